"""The gateway against the built-in env loop, measured: the same search-QA episodes both ways, and the latency of a
model call at 1, 16 and 64 concurrent sessions.

    python benchmarks/gateway.py [--model smollm2-135m] [--calls 4] [--repeats 2]

The same episodes: every call's reply is forced (a search for a fixed query, then the env's next observation), so
both ways make `--calls` model calls per episode on the same tasks and generate the same number of tokens (the
forced texts differ by their markup: `<think>…</think><search>…</search>` for the built-in template, padded to the
length of the agent's Hermes `<tool_call>`). The prompts differ as the two formats do (the agent's carries the tool
prompt and its whole history). Built-in: `MultiTurnWorkflow` over a local env pool. Gateway: the example tool-
calling agent's loop on the real `openai` client (AsyncOpenAI) → HTTP → the gateway → the same in-process vLLM
engine (2 threads), the search-QA env behind its tools in the agent's process. One untimed warm-up of each; then the
two alternate `--repeats` times (medians). Writes benchmarks/results/gateway.json and one summary line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import torch
from _report import publish

from agentforge.commands.builders import build_engine, build_model_spec, build_pool, build_rollout_context, without_name
from agentforge.engines.interventions import InterventionSpec
from agentforge.gateway.examples.client import http_client
from agentforge.gateway.examples.search_tools import SYSTEM, TOOLS, SearchTask
from agentforge.gateway.workflow import GatewayWorkflow
from agentforge.hardware import describe
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.multi_turn import MultiTurnWorkflow
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler

THINK = "I search for the entity the question names."
QUERY = "founder of the company"
LATENCIES: list[float] = []  # seconds per model call, as the agent saw them


class Timeline:
    """Where a run's wall time goes: the engine's generate calls (start, end, prompts, prompt tokens), and for the
    gateway each call's time in the handler before it reached the batcher, waiting for its generate, and after it."""

    def __init__(self) -> None:
        self.generates: list[tuple[float, float, int, int]] = []
        self.calls: list[tuple[float, float, float, float]] = []  # handler entry, batcher submit, result, exit

    def clear(self) -> None:
        self.generates.clear()
        self.calls.clear()

    def wrap_engine(self, engine: Any) -> None:
        generate = engine.generate

        def timed(prompts, *args, **kwargs):
            started = time.perf_counter()
            out = generate(prompts, *args, **kwargs)
            self.generates.append((started, time.perf_counter(), len(prompts), sum(len(p) for p in prompts)))
            return out

        engine.generate = timed

    def wrap_handler(self, handler: Any) -> None:
        local = threading.local()
        for method in ("chat", "completion"):
            run = getattr(handler, method)

            def timed_call(session, body, headers=None, _run=run):
                local.enter = time.perf_counter()
                local.submit = local.result = None
                try:
                    return _run(session, body, headers)
                finally:
                    if local.submit is not None:
                        self.calls.append((local.enter, local.submit, local.result, time.perf_counter()))

            setattr(handler, method, timed_call)
        generate = handler._generate

        def timed_generate(*args, **kwargs):
            local.submit = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                local.result = time.perf_counter()

        handler._generate = timed_generate

    def summary(self, wall: float) -> dict[str, Any]:
        gens = sorted(self.generates)
        engine = sum(b - a for a, b, _, _ in gens)
        gaps = [b[0] - a[1] for a, b in zip(gens, gens[1:], strict=False)]
        out: dict[str, Any] = {"generate_calls": len(gens), "engine_s": round(engine, 3),
                               "outside_engine_s": round(wall - engine, 3),
                               "between_generates_s": round(sum(gaps), 3),
                               "before_first_generate_s": None, "prompt_tokens": sum(g[3] for g in gens),
                               "batch_sizes": [g[2] for g in gens]}
        if self.calls:
            out["handler_before_batcher_ms"] = round(1e3 * statistics.mean(c[1] - c[0] for c in self.calls), 2)
            out["handler_after_generate_ms"] = round(1e3 * statistics.mean(c[3] - c[2] for c in self.calls), 2)
            # the batcher's gathering: from a batch's first request to the generate call serving it
            firsts = []
            for start, _end, _n, _t in gens:
                waiting = [c[1] for c in self.calls if c[1] <= start and c[2] >= start]
                if waiting:
                    firsts.append(start - min(waiting))
            out["batch_gather_s"] = round(sum(firsts), 3)
        return out


TIMELINE = Timeline()


class Forced(RolloutHooks):
    """Every call's reply forced: `text` + EOS."""

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]

    def turn_intervention(self, episode: Any, ctx: Any) -> InterventionSpec:
        return InterventionSpec("force_sequence", {"sequence": self.ids, "after_tokens": 0})


async def timed_agent(task: Any, base_url: str, api_key: str) -> dict[str, Any]:
    """The example openai-client search loop, timing each call."""
    from openai import AsyncOpenAI

    episode = SearchTask(task)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client())
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": episode.question}]
    try:
        while not episode.done:
            started = time.perf_counter()
            response = await client.chat.completions.create(model="agentforge-policy", messages=messages,
                                                            tools=TOOLS)
            LATENCIES.append(time.perf_counter() - started)
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                episode.answer_text(message.content or "")
                break
            for call in message.tool_calls:
                output = episode.call(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    finally:
        await client.close()
    return episode.outcome()


def config(args: argparse.Namespace, env: str) -> Any:
    dtype = [f"model.dtype={args.dtype}", f"engine.dtype={args.dtype}"] if args.dtype else []
    overrides = [f"model={args.model}", "env_pool.kind=local", *dtype, f"agent.max_turns={args.calls}",
                 "agent.sampling.max_new_tokens=64", "agent.max_prompt_tokens=3500", "engine.max_model_len=4096"]
    if env == "agent":
        overrides += ["env=agent", f"env.entry={__name__}:timed_agent", "env.max_calls=64",
                      f"env.batch_window_s={args.window}",
                      f"+env.task_env_options.max_turns={args.calls}"]
    else:
        overrides += ["env=search_qa", f"env.max_turns={args.calls}"]
    return compose_config(overrides)


def run_once(workflow: Any, ctx: Any, tasks: list, group: int) -> dict[str, Any]:
    LATENCIES.clear()
    TIMELINE.clear()
    started = time.perf_counter()
    result = workflow.run(ctx.with_sampling(ctx.config.sampling), tasks, group)
    ended = time.perf_counter()
    wall = ended - started
    timeline = TIMELINE.summary(wall)
    if TIMELINE.generates:
        timeline["before_first_generate_s"] = round(min(g[0] for g in TIMELINE.generates) - started, 3)
        timeline["after_last_generate_s"] = round(ended - max(g[1] for g in TIMELINE.generates), 3)
    s = result.stats
    calls = sum(len(t.turns) for g in result.groups for t in g.trajectories)
    return {"wall_s": wall, "tokens": s.generated_tokens, "calls": calls, "tokens_per_s": s.generated_tokens / wall,
            "latency": list(LATENCIES), "failed": result.metrics.get("agent/failed_episodes", 0.0),
            "generate_calls": result.metrics.get("agent/generate_calls", s.turns and None),
            "generate_s": s.generate_seconds, "timeline": timeline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--window", type=float, default=0.2, help="env.batch_window_s")
    parser.add_argument("--dtype", default=None, help="model.dtype and engine.dtype (default: the model's)")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency runs at 1, 16 and 64 sessions")
    parser.add_argument("--out", default=None, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(2)
    builtin_cfg, gateway_cfg = config(args, "search_qa"), config(args, "agent")
    engine = build_engine(builtin_cfg, build_model_spec(builtin_cfg))
    TIMELINE.wrap_engine(engine)
    builtin_pool, gateway_pool = build_pool(builtin_cfg), build_pool(gateway_cfg)
    tokenizer = engine.tokenizer
    call = json.dumps({"name": "search", "arguments": {"query": QUERY}})
    think = THINK  # padded so both replies are the same number of tokens
    while len(tokenizer.encode(f"<think>{think}</think><search>{QUERY}</search>")) < len(
            tokenizer.encode(f"<tool_call>\n{call}\n</tool_call>")):
        think += " Then"
    builtin = MultiTurnWorkflow(Forced(tokenizer, f"<think>{think}</think><search>{QUERY}</search>"))
    gateway = GatewayWorkflow(without_name(gateway_cfg.env), Forced(tokenizer, f"<tool_call>\n{call}\n</tool_call>"),
                              4096)
    builtin_ctx = build_rollout_context(builtin_cfg, engine, builtin_pool)
    gateway_ctx = build_rollout_context(gateway_cfg, engine, gateway_pool)
    sixteen = TaskSampler("search_qa", "eval").sample(8)
    out: dict[str, Any] = {"machine": describe(), "model": args.model, "calls_per_episode": args.calls,
                           "batch_window_s": args.window, "dtype": args.dtype or "the model's",
                           "engine": "in-process vLLM, 2 threads"}
    try:
        run_once(builtin, builtin_ctx, sixteen, 2)  # warm-ups, untimed
        run_once(gateway, gateway_ctx, sixteen, 2)
        TIMELINE.wrap_handler(gateway.server.handler)
        runs: dict[str, list[dict[str, Any]]] = {"builtin": [], "gateway": []}
        for _ in range(args.repeats):
            runs["builtin"].append(run_once(builtin, builtin_ctx, sixteen, 2))
            runs["gateway"].append(run_once(gateway, gateway_ctx, sixteen, 2))
        summary = {}
        for name, rs in runs.items():
            summary[name] = {"wall_s": round(statistics.median(r["wall_s"] for r in rs), 2),
                             "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in rs), 1),
                             "tokens": rs[-1]["tokens"], "calls": rs[-1]["calls"],
                             "generate_calls": rs[-1]["generate_calls"],
                             "generate_s": round(statistics.median(r["generate_s"] for r in rs), 2),
                             "timeline": rs[-1]["timeline"]}
        summary["gateway_over_builtin_wall"] = round(summary["gateway"]["wall_s"] / summary["builtin"]["wall_s"], 3)
        summary["gateway_over_builtin_tokens_per_s"] = round(
            summary["gateway"]["tokens_per_s"] / summary["builtin"]["tokens_per_s"], 3)
        out["sixteen_sessions"] = summary
        latency = {}
        for sessions, (tasks, group) in ({} if args.no_latency else {1: (1, 1), 16: (8, 2), 64: (32, 2)}).items():
            r = run_once(gateway, gateway_ctx, TaskSampler("search_qa", "eval").sample(tasks), group)
            lat = sorted(r["latency"])
            latency[str(sessions)] = {"calls": len(lat), "median_s": round(statistics.median(lat), 3),
                                      "p90_s": round(lat[int(0.9 * (len(lat) - 1))], 3),
                                      "max_s": round(lat[-1], 3), "wall_s": round(r["wall_s"], 2),
                                      "tokens_per_s": round(r["tokens_per_s"], 1), "failed": r["failed"],
                                      "generate_calls": r["generate_calls"]}
        out["latency_per_call"] = latency
    finally:
        gateway.close()
        builtin_pool.close()
        gateway_pool.close()
        engine.close()
    if args.out:  # a copy elsewhere too (benchmarks/results/gateway.json is always written)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2))
    s = out["sixteen_sessions"]
    lat = out["latency_per_call"]
    publish("gateway", out, f"gateway: 16 sessions x {args.calls} calls: built-in {s['builtin']['wall_s']} s "
          f"({s['builtin']['tokens_per_s']} tok/s) vs gateway {s['gateway']['wall_s']} s "
          f"({s['gateway']['tokens_per_s']} tok/s): wall x{s['gateway_over_builtin_wall']}; latency per call (median) "
          + ", ".join(f"{k} sessions {v['median_s']} s" for k, v in lat.items()))


if __name__ == "__main__":
    main()
