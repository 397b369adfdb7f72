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
import time
from typing import Any

import torch
from _report import publish

from agentforge.builders import build_engine, build_model_spec, build_pool, build_rollout_context, without_name
from agentforge.config import compose_config
from agentforge.engines.interventions import InterventionSpec
from agentforge.gateway.examples.search_tools import SYSTEM, TOOLS, SearchTask
from agentforge.gateway.workflow import GatewayWorkflow
from agentforge.hardware import describe
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.multi_turn import MultiTurnWorkflow
from agentforge.tasks import TaskSampler

THINK = "I search for the entity the question names."
QUERY = "founder of the company"
LATENCIES: list[float] = []  # seconds per model call, as the agent saw them


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
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
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
    overrides = [f"model={args.model}", "env_pool.kind=local", f"agent.max_turns={args.calls}",
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
    started = time.perf_counter()
    result = workflow.run(ctx.with_sampling(ctx.config.sampling), tasks, group)
    wall = time.perf_counter() - started
    s = result.stats
    calls = sum(len(t.turns) for g in result.groups for t in g.trajectories)
    return {"wall_s": wall, "tokens": s.generated_tokens, "calls": calls, "tokens_per_s": s.generated_tokens / wall,
            "latency": list(LATENCIES), "failed": result.metrics.get("agent/failed_episodes", 0.0),
            "generate_calls": result.metrics.get("agent/generate_calls", s.turns and None),
            "generate_s": s.generate_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--window", type=float, default=0.2, help="env.batch_window_s")
    args = parser.parse_args()
    torch.set_num_threads(2)
    builtin_cfg, gateway_cfg = config(args, "search_qa"), config(args, "agent")
    engine = build_engine(builtin_cfg, build_model_spec(builtin_cfg))
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
                           "batch_window_s": args.window,
                           "engine": "in-process vLLM, 2 threads"}
    try:
        run_once(builtin, builtin_ctx, sixteen, 2)  # warm-ups, untimed
        run_once(gateway, gateway_ctx, sixteen, 2)
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
                             "generate_s": round(statistics.median(r["generate_s"] for r in rs), 2)}
        summary["gateway_over_builtin_wall"] = round(summary["gateway"]["wall_s"] / summary["builtin"]["wall_s"], 3)
        summary["gateway_over_builtin_tokens_per_s"] = round(
            summary["gateway"]["tokens_per_s"] / summary["builtin"]["tokens_per_s"], 3)
        out["sixteen_sessions"] = summary
        latency = {}
        for sessions, (tasks, group) in {1: (1, 1), 16: (8, 2), 64: (32, 2)}.items():
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
    s = out["sixteen_sessions"]
    lat = out["latency_per_call"]
    publish("gateway", out, f"gateway: 16 sessions x {args.calls} calls: built-in {s['builtin']['wall_s']} s "
          f"({s['builtin']['tokens_per_s']} tok/s) vs gateway {s['gateway']['wall_s']} s "
          f"({s['gateway']['tokens_per_s']} tok/s): wall x{s['gateway_over_builtin_wall']}; latency per call (median) "
          + ", ".join(f"{k} sessions {v['median_s']} s" for k, v in lat.items()))


if __name__ == "__main__":
    main()
