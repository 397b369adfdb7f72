"""The OpenAI-compatible gateway with the real parts: the tiny model in vLLM, the real HTTP server (FastAPI/uvicorn),
the real `openai` client inside the example agent, the search-QA env behind its tools, the DeepSpeed learner.

A slot-fill intervention makes the untrained tiny model write a Hermes tool call (`<tool_call>{"name": "search",
"arguments": {"query": "` + 2 sampled tokens + `"}}</tool_call>`), so every session is a multi-call, tool-using
conversation whose later requests repeat the earlier replies."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from omegaconf import open_dict

from agentforge.algorithms import make_algorithm
from agentforge.commands.builders import (
    build_engine,
    build_model_spec,
    build_pool,
    build_rollout_context,
    build_workflow,
)
from agentforge.errors import ConfigError
from agentforge.learner.batch import TurnSample
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler

pytestmark = pytest.mark.integration

OPENAI_AGENT = "agentforge.gateway.examples.openai_search:run"
LANGGRAPH_AGENT = "agentforge.gateway.examples.langgraph_search:run"
MCP_AGENT = "agentforge.gateway.examples.mcp_search:run"
TINY = ["model=tiny", "model.dtype=float32", "engine.dtype=float32", "learner.dtype=float32", "logger.wandb=false",
        "env_pool.kind=local", "agent.sampling.max_new_tokens=40"]


def tool_call_scaffold(tokenizer: Any) -> dict[str, Any]:
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    return {"kind": "slot_fill", "params": {
        "prefix": encode('<tool_call>\n{"name": "search", "arguments": {"query": "'), "free": 2,
        "suffix": [*encode('"}}\n</tool_call>'), tokenizer.eos_token_id]}}


def gateway_config(tmp_path, tokenizer, entry: str, *overrides: str, scaffold: bool = True) -> Any:
    cfg = compose_config(["recipe=debug", "command=rollout", "env=agent", f"env.entry={entry}", *TINY, *overrides],
                         run_dir=str(tmp_path))
    if scaffold:
        with open_dict(cfg):
            cfg.agent.intervention = tool_call_scaffold(tokenizer)
    return cfg


class Played:
    """A real rollout through the gateway, with every engine call recorded (prompt ids → the completion)."""

    def __init__(self, cfg: Any, tasks: int = 2, group: int = 2) -> None:
        self.engine = build_engine(cfg, build_model_spec(cfg))
        self.pool = build_pool(cfg)
        self.ctx = build_rollout_context(cfg, self.engine, self.pool)
        self.workflow = build_workflow(cfg, make_algorithm(cfg.algorithm), "rollout")
        self.sampled: dict[tuple[int, ...], list[Any]] = {}  # a group's sessions share their first prompt
        self.batch_sizes: list[int] = []
        generate = self.engine.generate

        def recording(prompts, sampling, interventions=None, **kw):
            out = generate(prompts, sampling, interventions, **kw)
            self.batch_sizes.append(len(prompts))
            for prompt, completion in zip(prompts, out, strict=True):
                self.sampled.setdefault(tuple(prompt), []).append(completion)
            return out

        self.engine.generate = recording
        self.tasks = TaskSampler("agent", "train").sample(tasks)
        self.group = group

    def run(self) -> Any:
        return self.workflow.run(self.ctx, self.tasks, self.group)

    def close(self) -> None:
        self.workflow.close()
        self.pool.close()


def test_every_trained_token_is_the_engines_sampled_token_over_multi_call_tool_sessions(tmp_path, tiny_tokenizer):
    played = Played(gateway_config(tmp_path, tiny_tokenizer, OPENAI_AGENT), tasks=2, group=2)
    try:
        result = played.run()
    finally:
        played.close()
    trajectories = [t for g in result.groups for t in g.trajectories]
    assert len(trajectories) == 4 and result.metrics["agent/failed_episodes"] == 0
    assert max(len(t.turns) for t in trajectories) >= 3, [len(t.turns) for t in trajectories]  # multi-call sessions
    assert sum(t.info["tool_calls"] != [] for tr in trajectories for t in tr.turns) >= 6  # tools really called
    assert max(played.batch_sizes) >= 2  # calls of different sessions shared a generate call
    for trajectory in trajectories:
        previous = None
        for k, turn in enumerate(trajectory.turns):
            candidates = played.sampled[tuple(turn.prompt_ids)]  # the engine ran exactly this prompt
            completion = next(c for c in candidates if c.token_ids == turn.response_ids)  # and sampled this reply
            candidates.remove(completion)  # once
            assert turn.logprobs == completion.logprobs
            sample = TurnSample.from_turn(turn, advantage=1.0)
            trained = [int(t) for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
            assert trained == [t for t, forced in zip(completion.token_ids, completion.forced_mask, strict=True)
                               if not forced]  # every trained id is a sampled id, in order
            assert turn.info["reencoded"] is None  # the client repeated its history: nothing re-encoded
            if previous is not None:  # the earlier call's prompt and sampled reply, as ids, open this prompt
                assert turn.info["extends_call"] == k - 1
                head = [*previous.prompt_ids, *previous.response_ids]
                assert turn.prompt_ids[:len(head)] == head
            previous = turn
    assert all(t.turns[-1].done for t in trajectories)


# ------------------------------------------------------------------------------------------ HTTP, bad input

PROBES: dict[str, Any] = {}
SEARCH_TOOL = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


def probe_agent(task: Any, base_url: str, api_key: str) -> float:
    """A sync agent speaking raw HTTP: every malformed request, then good ones, an edited history, completions."""
    auth = {"Authorization": f"Bearer {api_key}"}
    chat = f"{base_url}/chat/completions"
    messages = [{"role": "user", "content": "Say something."}]
    with httpx.Client(timeout=60) as http:
        def post(url: str, body: Any, headers: dict[str, str] | None = None, raw: bool = False) -> httpx.Response:
            if raw:
                return http.post(url, content=body, headers=headers if headers is not None else auth)
            return http.post(url, json=body, headers=headers if headers is not None else auth)

        out = {
            "no_token": post(chat, {"messages": messages}, headers={}),
            "unknown_session": post(chat.replace(task.session_id, "ep999-nope"), {"messages": messages}),
            "n2": post(chat, {"messages": messages, "n": 2}),
            "stream": post(chat, {"messages": messages, "stream": True}),
            "bad_schema": post(chat, {"messages": messages, "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]}),
            "not_json": post(chat, b"{not json", raw=True),
            "no_messages": post(chat, {"messages": []}),
            "models": http.get(f"{base_url}/models", headers=auth),
            "choice_unknown": post(chat, {"messages": messages, "tools": SEARCH_TOOL,
                                          "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "choice_no_tools": post(chat, {"messages": messages, "tool_choice": "required"}),
            "choice_bad": post(chat, {"messages": messages, "tools": SEARCH_TOOL, "tool_choice": "always"}),
        }
        first = post(chat, {"messages": messages, "max_tokens": 5, "logprobs": True})
        reply = first.json()["choices"][0]["message"]
        edited = [*messages, {"role": "assistant", "content": "not what the model said"},
                  {"role": "user", "content": "Again."}]
        out["first"], out["edited"] = first, post(chat, {"messages": edited, "max_tokens": 5})
        out["repeated"] = post(chat, {"messages": [*messages, reply, {"role": "user", "content": "More."}],
                                      "max_tokens": 5})
        out["completion"] = post(f"{base_url}/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        out["named"] = post(chat, {"messages": messages, "tools": SEARCH_TOOL, "max_tokens": 24,
                                   "tool_choice": {"type": "function", "function": {"name": "search"}}})
    PROBES[task.session_id] = {k: (r.status_code, r.json()) for k, r in out.items()}
    PROBES[task.session_id]["base_url"] = base_url
    PROBES[task.session_id]["api_key"] = api_key
    return 1.0


def test_bad_requests_get_openai_errors_and_an_edited_history_is_flagged(tmp_path, tiny_tokenizer):
    PROBES.clear()
    played = Played(gateway_config(tmp_path, tiny_tokenizer, f"{__name__}:probe_agent", scaffold=False),
                    tasks=1, group=2)
    try:
        result = played.run()
        sid, probe = next(iter(PROBES.items()))
        late = httpx.post(f"{probe['base_url']}/chat/completions", timeout=30,
                          json={"messages": [{"role": "user", "content": "hi"}]},
                          headers={"Authorization": f"Bearer {probe['api_key']}"})
    finally:
        played.close()
    expected = {"no_token": (401, "authentication_error", None),
                "unknown_session": (403, "permission_error", None),  # its token is its own session's only
                "n2": (400, "invalid_request_error", "n"), "stream": (400, "invalid_request_error", "stream"),
                "bad_schema": (400, "invalid_request_error", "tools[0].function.parameters"),
                "not_json": (400, "invalid_request_error", None), "no_messages": (400, "invalid_request_error",
                                                                                   "messages"),
                "choice_unknown": (400, "invalid_request_error", "tool_choice"),
                "choice_no_tools": (400, "invalid_request_error", "tool_choice"),
                "choice_bad": (400, "invalid_request_error", "tool_choice")}
    for name, (status, kind, param) in expected.items():
        code, body = probe[name]
        assert code == status and body["error"]["type"] == kind, (name, body)
        assert param is None or body["error"]["param"] == param, (name, body)
        assert len(body["error"]["message"]) > 20  # names the problem and the fix
    assert "set n=1" in probe["n2"][1]["error"]["message"] and "stream=false" in probe["stream"][1]["error"]["message"]
    assert probe["models"][1]["data"][0]["id"] == "agentforge-policy"
    first = probe["first"][1]
    assert probe["first"][0] == 200 and first["object"] == "chat.completion"
    assert len(first["choices"][0]["logprobs"]["content"]) == first["usage"]["completion_tokens"] <= 5
    assert probe["edited"][0] == 200 and probe["repeated"][0] == 200 and probe["completion"][0] == 200
    assert late.status_code == 409 and late.json()["error"]["code"] == "session_ended"
    turns = next(t for g in result.groups for t in g.trajectories if t.meta["session"] == sid).turns
    # the edited one, and the last (a new conversation: it repeats no earlier call)
    assert [t.info["reencoded"] is not None for t in turns] == [False, True, False, False, True]
    assert "edited" in turns[1].info["reencoded"] and turns[2].info["extends_call"] == 0
    assert turns[3].prompt_ids == [1, 2, 3]  # completions take token ids as they are
    assert result.metrics["agent/reencoded_calls"] == 4 and result.metrics["agent/failed_episodes"] == 0
    # tool_choice naming a function: the engine forced the call's opening (kept out of the loss), the model wrote on
    named = turns[4]
    opening = tiny_tokenizer.encode('<tool_call>\n{"name": "search", "arguments":', add_special_tokens=False)
    assert probe["named"][0] == 200 and named.response_ids[:len(opening)] == opening
    assert named.forced_mask[:len(opening)] == [True] * len(opening) and not any(named.forced_mask[len(opening):])
    assert len(named.response_ids) > len(opening)


STOP_PROBES: dict[str, Any] = {}


def stop_probe_agent(task: Any, base_url: str, api_key: str) -> float:
    """Bad prompt ids, then a chat call cut by a stop string inside a token, then the call that extends it."""
    auth = {"Authorization": f"Bearer {api_key}"}
    out: dict[str, Any] = {}
    with httpx.Client(timeout=60) as http:
        for name, ids in (("huge_id", [1000000000]), ("negative_id", [-1])):
            r = http.post(f"{base_url}/completions", json={"prompt": ids, "max_tokens": 4}, headers=auth)
            out[name] = (r.status_code, r.json())
        messages = [{"role": "user", "content": "Go."}]
        r = http.post(f"{base_url}/chat/completions", json={"messages": messages, "stop": ["gum"]}, headers=auth)
        out["stopped"] = (r.status_code, r.json())
        reply = r.json()["choices"][0]["message"]
        later = [*messages, reply, {"role": "user", "content": "Next."}]
        r = http.post(f"{base_url}/chat/completions", json={"messages": later, "max_tokens": 4}, headers=auth)
        out["next"] = (r.status_code, r.json())
        out["later"] = later
    STOP_PROBES[task.session_id] = out
    return 1.0


def test_stop_strings_are_omitted_and_trained_ids_match_what_the_client_saw(tmp_path, tiny_tokenizer):
    """`stop=["gum"]` ends the reply inside the token ` "arguments`: the client gets OpenAI's content (no stop
    string), the turn trains the sampled ids up to the last whole token the client saw, and the next prompt decodes to
    the conversation the client holds (the cut token's seen part, `ar`, encoded as prompt text). Bad prompt ids are
    400s, not engine failures."""
    from agentforge.gateway.rendering import ChatRenderer, normalise_messages

    STOP_PROBES.clear()
    played = Played(gateway_config(tmp_path, tiny_tokenizer, f"{__name__}:stop_probe_agent"), tasks=1, group=1)
    try:
        result = played.run()
    finally:
        played.close()
    sid, probe = next(iter(STOP_PROBES.items()))
    for name in ("huge_id", "negative_id"):
        code, body = probe[name]
        assert code == 400 and body["error"]["param"] == "prompt" and "vocabulary" in body["error"]["message"]
    code, body = probe["stopped"]
    content = body["choices"][0]["message"]["content"]
    assert code == 200 and content == '<tool_call>\n{"name": "search", "ar'  # OpenAI's: the stop string omitted
    assert body["choices"][0]["finish_reason"] == "stop" and probe["next"][0] == 200
    turns = next(t for g in result.groups for t in g.trajectories).turns
    first, second = turns
    completion = next(c for c in played.sampled[tuple(first.prompt_ids)])
    assert tiny_tokenizer.decode(completion.token_ids).endswith('"arguments')  # the engine sampled past it
    assert first.response_ids == completion.token_ids[:len(first.response_ids)]  # trained: sampled ids ...
    assert tiny_tokenizer.decode(first.response_ids) + "ar" == content  # ... up to what the client saw
    assert first.info["stop_cut"]["carried_text"] == "ar" and first.response_text == content
    assert second.info["extends_call"] == 0 and second.info["reencoded"] is None
    assert second.prompt_ids[:len(first.prompt_ids) + len(first.response_ids)] == [*first.prompt_ids,
                                                                                   *first.response_ids]
    renderer = ChatRenderer(tiny_tokenizer)
    assert tiny_tokenizer.decode(second.prompt_ids) == renderer.render(normalise_messages(probe["later"]), [], True)


def test_a_request_that_fails_in_the_engine_fails_alone(tmp_path, tiny_tokenizer):
    """Two sessions' calls in one batch, one with a prompt the engine refuses: only that call fails."""
    from agentforge.gateway.batcher import GenerationBatcher
    from agentforge.gateway.sessions import Session
    from agentforge.rollout.hooks import RolloutHooks
    from agentforge.rollout.workflow import Episode, EpisodePlan
    from agentforge.types import Observation, SamplingConfig, Task, Trajectory

    played = Played(gateway_config(tmp_path, tiny_tokenizer, OPENAI_AGENT, scaffold=False))
    ctx = played.ctx.fresh()
    batcher = GenerationBatcher(lambda: ctx, RolloutHooks(), live=lambda: 2, window_s=2.0)
    try:
        sessions = [Session(f"s{k}", Episode(k, EpisodePlan(Task("agent", k), k, 0), Trajectory(Task("agent", k), 0),
                                             Observation("", "")), max_calls=4) for k in range(2)]
        sampling = SamplingConfig(max_new_tokens=4)
        bad = batcher.submit(sessions[0], [1000000000], sampling)
        good = batcher.submit(sessions[1], [1, 2, 3], sampling)
        assert len(good.result(timeout=120).token_ids) >= 1
        with pytest.raises(Exception):  # noqa: B017  (the engine's own error, whatever its type)
            bad.result(timeout=120)
    finally:
        batcher.close()
        played.close()


# ------------------------------------------------------------------------------------------------- faults

async def faulty_agent(task: Any, base_url: str, api_key: str) -> float:
    """Rollout 0 raises, 1 hangs past the timeout, 2 never calls the model, 3 reports rewards before and between
    its two calls and is paid."""
    from openai import AsyncOpenAI

    if task.rollout_index == 0:
        raise RuntimeError("the agent's own bug")
    if task.rollout_index == 1:
        await asyncio.sleep(60)
    if task.rollout_index == 2:
        return 1.0
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    task.report_reward(0.25)  # before any call: the first call's
    for k in range(2):
        await client.chat.completions.create(model="agentforge-policy", messages=[{"role": "user", "content": "hi"}],
                                             max_tokens=4)
        if k == 0:
            task.report_reward(0.5)  # after a call: that call's
    await client.close()
    return 1.0


def test_agents_that_raise_hang_or_never_call_fail_their_episode_only(tmp_path, tiny_tokenizer):
    from agentforge.types import SamplingConfig

    played = Played(gateway_config(tmp_path, tiny_tokenizer, f"{__name__}:faulty_agent", "env.timeout=5",
                                   scaffold=False), tasks=1, group=4)
    # a cold engine's first generate call took ~10 s on a loaded 2-core machine (run alone): not the agent's time
    played.engine.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=2))
    started = time.monotonic()
    try:
        result = played.run()
    finally:
        played.close()
    assert time.monotonic() - started < 45  # the hung agent did not hold the iteration
    m = result.metrics
    counts = (m["agent/failed_episodes"], m["agent/raised"], m["agent/timeouts"], m["agent/no_model_calls"])
    assert counts == (3, 1, 1, 1)
    by_index = {t.rollout_index: t for t in result.groups[0].trajectories}
    assert "the agent's own bug" in by_index[0].meta["agent_error"]  # the exception text is kept
    assert "timeout" in by_index[1].meta["agent_error"] and by_index[2].meta["agent_outcome"] == "no_model_calls"
    paid = by_index[3]
    assert paid.won and [t.reward for t in paid.turns] == [0.75, 1.0] == [t.env_reward for t in paid.turns]
    assert paid.episode_return == 1.75


# ----------------------------------------------------------------------------------------------- training

def test_algorithms_that_replay_the_env_are_refused(tmp_path, tiny_tokenizer):
    for algorithm in ("strata", "trajevolve"):
        cfg = gateway_config(tmp_path, tiny_tokenizer, OPENAI_AGENT, f"algorithm={algorithm}", scaffold=False)
        with pytest.raises(ConfigError, match=f"algorithm '{algorithm}' cannot train an external agent"):
            build_workflow(cfg, make_algorithm(cfg.algorithm), "train")
    with pytest.raises(ConfigError, match="env.entry must be `package.module:callable`"):
        build_workflow(gateway_config(tmp_path, tiny_tokenizer, "no_colon", scaffold=False),
                       make_algorithm("grpo"), "train")


EXPERT = "agentforge.gateway.examples.search_tools:expert"
WARM_START = ["trainer.warm_start=expert", f"env.expert={EXPERT}", "sft.num_tasks=8", "sft.batch_size=8",
              "sft.epochs=4", "sft.lr=1e-3"]


@pytest.mark.parametrize("agent,algorithm", [(OPENAI_AGENT, "grpo"), (OPENAI_AGENT, "gigpo"), (OPENAI_AGENT, "tjpo"),
                                             (OPENAI_AGENT, "t2po"), (LANGGRAPH_AGENT, "grpo"), (MCP_AGENT, "grpo")],
                         ids=["openai-grpo", "openai-gigpo", "openai-tjpo", "openai-t2po", "langgraph-grpo",
                              "mcp-grpo"])
def test_training_through_the_gateway(tmp_path, tiny_tokenizer, agent, algorithm):
    """Each example agent, unchanged, trained for 2 iterations (openai-grpo after the tool-format warm start on the
    expert's replies); GiGPO groups calls by their rendered observation,
    TJPO's diversity credit reads the tools called (descriptor `tool_calls`), T2PO's token-level intervention and
    uncertainty act on every model call."""
    from agentforge.commands.train import build_trainer

    cfg = compose_config(["recipe=debug", "command=train", "env=agent", f"env.entry={agent}", *TINY,
                          f"algorithm={algorithm}", "trainer.iterations=2", "trainer.tasks_per_iteration=2",
                          "trainer.group_size=2", "trainer.eval_before=false", "trainer.eval_every=0",
                          "trainer.checkpoint_every=0", "learner.lr=1e-3",
                          *(["algorithm.descriptor=tool_calls"] if algorithm == "tjpo" else []),
                          *(WARM_START if (agent, algorithm) == (OPENAI_AGENT, "grpo") else [])],
                         run_dir=str(tmp_path))
    if algorithm != "t2po":  # T2PO brings its own intervention (TTI), one per turn
        with open_dict(cfg):
            cfg.agent.intervention = tool_call_scaffold(tiny_tokenizer)
    build_trainer(cfg).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    if (agent, algorithm) == (OPENAI_AGENT, "grpo"):  # the tool-format warm start ran first, on the expert's replies
        first = rows[0]
        assert first["sft/trajectories"] >= 4 and first["sft/steps"] == 4
        assert first["sft/loss"] < 10.5  # 4 steps on one batch: below the uniform ln(49152) = 10.8
    rows = [r for r in rows if "train/samples" in r]
    assert len(rows) == 2
    for r in rows:
        assert r["train/agent/model_calls"] == r["train/samples"] >= 4  # every model call became one trained turn
        assert r["train/agent/failed_episodes"] == 0 and r["train/skipped"] == 0
    import gzip

    saved = gzip.decompress((tmp_path / "trajectories" / "iter_00002.jsonl.gz").read_bytes()).decode()
    assert '"tool_calls"' in saved and '"session"' in saved  # the episodes, for `agentforge view`
    if algorithm != "t2po":
        assert sum(r["train/agent/model_calls"] for r in rows) > 8  # multi-call sessions
    if agent == MCP_AGENT:  # the MCP server's search results reached the model (not the env's `<information>`)
        assert ("Doc 1(Title:" in saved or "No passage matches this query." in saved) and "<information>" not in saved


@pytest.fixture(scope="module")
def ray_runtime(ray_with_module_classes):
    """Engine replicas in Ray (the asynchronous test)."""


def test_asynchronous_training_through_the_gateway(ray_runtime, tmp_path, tiny_tokenizer):
    """The producer thread plays the agent's episodes through the gateway on an engine replica while the learner
    trains: the calls carry the replica's policy version, the staleness bound holds."""
    from agentforge.commands.train import build_trainer

    cfg = compose_config(["recipe=debug", "command=train", "env=agent", f"env.entry={OPENAI_AGENT}", *TINY,
                          "trainer.iterations=3", "trainer.tasks_per_iteration=2", "trainer.group_size=2",
                          "trainer.eval_before=false", "trainer.eval_every=0", "trainer.checkpoint_every=0",
                          "engine.replicas=1", "engine.replica_cpus=1", "trainer.asynchronous.max_staleness=1",
                          "learner.old_logprobs=recompute", "learner.rollout_correction.is_level=token"],
                         run_dir=str(tmp_path))
    with open_dict(cfg):
        cfg.agent.intervention = tool_call_scaffold(tiny_tokenizer)
    build_trainer(cfg).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train/samples" in r]
    assert len(rows) == 3
    assert all(r["train/agent/model_calls"] == r["train/samples"] > 0 for r in rows)
    assert all(r["async/staleness_max"] <= 1 and r["async/dropped_groups"] == 0 for r in rows)
    assert all(r["train/agent/failed_episodes"] == 0 for r in rows)


# --------------------------------------------------------------------------- the tool-format expert warm start

@pytest.mark.parametrize("agent", [OPENAI_AGENT, LANGGRAPH_AGENT, MCP_AGENT], ids=["openai", "langgraph", "mcp"])
def test_the_expert_warm_start_plays_the_agent_unchanged_with_expert_replies(tmp_path, tiny_tokenizer, agent):
    """No engine: the agent's own loop runs against the gateway, the search-QA expert writes each reply as a Hermes
    tool call, and the won episodes are SFT data in exactly the conversation the agent holds."""
    from agentforge.commands.builders import build_expert_play
    from agentforge.learner import samples_from_sft
    from agentforge.training.sft import expert_dataset

    cfg = gateway_config(tmp_path, tiny_tokenizer, agent, f"env.expert={EXPERT}", "command=sft", "sft.num_tasks=6",
                         scaffold=False)
    data = expert_dataset(build_expert_play(cfg), cfg.sft, tiny_tokenizer)
    assert len(data) >= 3 and all(t.won for t in data)
    eos = tiny_tokenizer.eos_token_id
    for trajectory in data:
        names = [c["function"]["name"] for turn in trajectory.turns for c in turn.info["tool_calls"]]
        assert names[-1] == "answer" and set(names[:-1]) == {"search"} and len(names) == len(trajectory.turns)
        previous = None
        for turn in trajectory.turns:
            assert turn.response_ids[-1] == eos
            assert tiny_tokenizer.decode(turn.response_ids[:-1]).startswith("<tool_call>\n{")
            assert turn.info["reencoded"] is None
            if previous is not None:  # token-exact: the reply's ids open the next call's prompt
                head = [*previous.prompt_ids, *previous.response_ids]
                assert turn.prompt_ids[:len(head)] == head
            previous = turn
    samples = samples_from_sft(data)
    assert len(samples) == sum(len(t.turns) for t in data)
    assert all(s.num_loss_tokens == len(t.response_ids) for s, t in
               zip(samples, [t for tr in data for t in tr.turns], strict=True))


def test_the_expert_warm_start_needs_an_expert(tmp_path, tiny_tokenizer):
    from agentforge.commands.preflight import preflight

    cfg = compose_config(["recipe=debug", "command=train", "env=agent", f"env.entry={OPENAI_AGENT}", *TINY,
                          "trainer.warm_start=expert"], run_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="set env.expert=package.module:callable"):
        preflight(cfg)


@pytest.mark.parametrize("command", ["rollout", "eval", "rft"])
def test_every_command_closes_the_gateway_it_started(tmp_path, tiny_tokenizer, monkeypatch, command):
    """The rollout stack's one close (builders.RolloutStack) reaches the gateway workflow in every command: after
    `rollout`, `eval` and `rft` with env=agent, no gateway port still accepts a connection."""
    import socket

    from agentforge.gateway import workflow as gateway_workflow

    started: list[Any] = []

    class Recorded(gateway_workflow.GatewayServer):  # the real server, remembered so its port can be tried after
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(gateway_workflow, "GatewayServer", Recorded)
    sizes = {"rollout": ["rollout.num_tasks=2", "rollout.group_size=1"],
             "eval": ["eval.num_tasks=2", "eval.samples_per_task=1"],
             "rft": ["rft.num_tasks=2", "rft.group_size=1", "rft.threshold=0.0", "rft.epochs=1"]}[command]
    cfg = gateway_config(tmp_path, tiny_tokenizer, OPENAI_AGENT, f"command={command}", *sizes)
    if command == "rollout":
        from agentforge.commands.rollout import run_rollout as run
    elif command == "eval":
        from agentforge.commands.evaluate import run_eval as run
    else:
        from agentforge.commands.rft import run_rft as run
    run(cfg)
    assert started, "the command played no episode through the gateway"
    for server in started:
        with socket.socket() as probe, pytest.raises(OSError):
            probe.settimeout(2)
            probe.connect((server.host, server.port))
