"""verifiers environments as text envs (`env=verifiers env.entry=pkg.module:load_environment`).

A verifiers env (`vf.MultiTurnEnv`, `vf.SingleTurnEnv`, ...) runs its own rollout loop, `env.rollout(input, client,
model)`, which is `@final` and asks a model *client* for every assistant turn; the rubric scores the finished state
(`env.rubric.score_rollout`). The adapter keeps that loop intact and inverts it: the library's rollout runs in a
thread of its own, and the adapter is its client: each model call hands the conversation to `reset`/`step` as the
observation and waits for the agent's action as the assistant's reply. So `env_response`, the stop conditions and
the rubric are the library's, unchanged.

Tasks: a seed picks a row of the env's dataset (`get_dataset()` for the train split, `get_eval_dataset()` for eval
and test; verifiers falls back to the train set when an env has no eval set, which is then not held out). Reward:
0 per turn, the rubric's reward when the rollout ends; success: reward >= `success_reward`. The agent's `<action>`
text (not its whole response) is the assistant message, through `action_format` (e.g. `<guess>{action}</guess>`
for an env whose parser reads that tag).

Versions: verifiers 0.4 would move `openai` and `mcp` (the gateway examples use both); 0.3.1, installed `--no-deps`
with what it imports (`make setup`), runs the legacy (`vf.MultiTurnEnv`) API this adapter drives.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import queue
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from agentforge.envs.adapters.common import check_action_format, import_library
from agentforge.envs.base import ENVS, EXECUTABLE
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Observation, StepResult, Task

NAME = "verifiers"
EXTRA = "verifiers"
EXAMPLE = "agentforge.envs.adapters.verifiers_example:load_environment"
MODEL_NAME = "agentforge-policy"
_CLOSED = object()  # handed to a waiting client when the env is closed mid-rollout


def _vf() -> Any:
    return import_library("verifiers", EXTRA, NAME)


_SIGNAL_LOCK = threading.Lock()


@contextmanager
def keep_signal_handlers() -> Iterator[None]:
    """Build a verifiers env without letting it take over SIGINT/SIGTERM.

    verifiers' `Environment.__init__` installs process-wide handlers (SIGTERM: teardown then `exit(143)`), which
    raises outside the main thread (env workers build envs on threads) and would replace the trainer's own
    preemption handling. The handlers stay the process's; the env's teardown still runs at exit (its atexit hook).
    """
    with _SIGNAL_LOCK:
        install = signal.signal
        signal.signal = lambda signum, handler: signal.getsignal(signum)  # type: ignore[assignment]
        try:
            yield
        finally:
            signal.signal = install


def load_environment(entry: str | None, args: dict[str, Any]) -> Any:
    """The user's verifiers env from `pkg.module:load_environment` (called with `env.args`)."""
    if not entry or ":" not in entry:
        raise ConfigError(f"env {NAME!r} needs entry=pkg.module:load_environment (the function that builds the "
                          f"verifiers env), got {entry!r}; an example: entry={EXAMPLE}")
    vf = _vf()
    module, _, attr = entry.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"env {NAME!r}: entry {entry!r} cannot be loaded ({error})") from None
    try:
        with keep_signal_handlers():
            env = factory(**args)
    except TypeError as error:
        raise ConfigError(f"env {NAME!r}: {entry} does not take args {sorted(args)} ({error})") from None
    if not isinstance(env, vf.MultiTurnEnv):
        raise ConfigError(f"env {NAME!r}: {entry} returned {type(env).__name__}, not a verifiers MultiTurnEnv "
                          "(SingleTurnEnv, ToolEnv and MultiTurnEnv subclasses are)")
    return env


def message_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "") if isinstance(p, dict) else getattr(p, "text", "")) for p in content)
    return str(content or "")


def _role(message: Any) -> str:
    return str(message.get("role") if isinstance(message, dict) else getattr(message, "role", ""))


def since_last_reply(messages: Sequence[Any]) -> str:
    """The messages after the last assistant turn (the env's answer; the system prompt and task at first)."""
    last = max((i for i, m in enumerate(messages) if _role(m) == "assistant"), default=-1)
    return "\n\n".join(message_text(m) for m in messages[last + 1:] if message_text(m))


def bridge_client_class() -> type:
    """A `vf.Client` whose model is the agent: each call posts the conversation and waits for the action."""
    from verifiers.legacy.clients.client import Client
    from verifiers.legacy.types import Response, ResponseMessage

    class AgentClient(Client):  # type: ignore[misc, valid-type]
        def __init__(self, episode: _Episode) -> None:
            super().__init__(episode)

        def setup_client(self, config: Any) -> Any:
            return None

        async def to_native_tool(self, tool: Any) -> Any:
            return tool

        async def to_native_prompt(self, messages: Any) -> tuple[Any, dict]:
            return messages, {}

        async def get_native_response(self, prompt: Any, model: str, sampling_args: Any, tools: Any = None,
                                      **kwargs: Any) -> str:
            episode: _Episode = self.client
            episode.outbox.put(("prompt", list(prompt)))
            reply = await asyncio.to_thread(episode.inbox.get)
            if reply is _CLOSED:
                raise AgentforgeError("the episode was closed before the rollout ended")
            return str(reply)

        async def raise_from_native_response(self, response: Any) -> None:
            return None

        async def from_native_response(self, response: Any) -> Any:
            message = ResponseMessage(content=response, finish_reason="stop", is_truncated=False)
            return Response(id="agentforge", created=int(time.time()), model=MODEL_NAME, message=message)

        async def close(self) -> None:
            return None

    return AgentClient


class _Episode:
    """One library rollout running in its own thread and event loop, talking to the adapter through two queues."""

    def __init__(self, vf_env: Any, row: dict[str, Any]) -> None:
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.outbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.client = bridge_client_class()(self)
        self.thread = threading.Thread(target=self._run, args=(vf_env, row), daemon=True, name="verifiers-rollout")
        self.thread.start()

    def _run(self, vf_env: Any, row: dict[str, Any]) -> None:
        async def play() -> Any:
            state = await vf_env.rollout(row, self.client, MODEL_NAME, {})
            await vf_env.rubric.score_rollout(state)
            await vf_env.rubric.cleanup(state)
            return state

        try:
            self.outbox.put(("done", asyncio.run(play())))
        except BaseException as error:  # noqa: BLE001 - carried to the caller's thread
            self.outbox.put(("error", error))

    def next(self, timeout: float) -> tuple[str, Any]:
        try:
            return self.outbox.get(timeout=timeout)
        except queue.Empty:
            raise AgentforgeError(f"the verifiers rollout answered nothing within {timeout} s") from None

    def close(self) -> None:
        if self.thread.is_alive():
            self.inbox.put(_CLOSED)
            self.thread.join(timeout=10)


@ENVS.register(NAME)
class VerifiersEnv:
    """A verifiers environment played through its own rollout loop, the agent answering its model calls."""

    option_help: ClassVar[dict[str, str]] = {
        "entry": f"the env's loader, pkg.module:load_environment (example: {EXAMPLE})",
        "args": "keyword arguments for the loader",
        "action_format": "the assistant message built from the agent's action (Python format string, {action}), "
                         "e.g. '<guess>{action}</guess>' for an env whose parser reads <guess>",
        "success_reward": "a rubric reward of at least this is a win",
        "timeout": "seconds one library call (env_response, scoring) may take before the episode fails",
        "replayable": "false when the env's answers are not a function of the conversation (an LLM judge, a live "
                      "service): replays and branching are then refused",
    }

    def __init__(self, entry: str | None = EXAMPLE, args: dict[str, Any] | None = None,
                 action_format: str = "{action}", success_reward: float = 1.0, timeout: float = 60.0,
                 replayable: bool = True) -> None:
        check_action_format(NAME, action_format)
        if timeout <= 0:
            raise ConfigError(f"env {NAME!r}: timeout must be > 0 seconds, got {timeout}")
        from agentforge.envs.adapters.common import plain_kwargs

        self.entry = entry
        self.vf_env = load_environment(entry, plain_kwargs(args))
        self.action_format = action_format
        self.success_reward = float(success_reward)
        self.timeout = float(timeout)
        self.replayable = bool(replayable)
        self.replay_note = "env.replayable=false: the env's answers are not a function of the conversation"
        self._episode: _Episode | None = None
        self._datasets: dict[str, Any] = {}
        self.done = True

    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        env = cls(**options)
        for split in splits:
            env.dataset(split)
        env.close()

    def dataset(self, split: str) -> Any:
        key = "train" if split == "train" else "eval"
        if key not in self._datasets:
            data = self.vf_env.get_dataset() if key == "train" else self.vf_env.get_eval_dataset()
            if data is None or len(data) == 0:
                raise ConfigError(f"env {NAME!r}: {self.entry} has no {key} rows")
            self._datasets[key] = data
        return self._datasets[key]

    def row_for(self, task: Task) -> dict[str, Any]:
        """The dataset row a task plays: seed modulo the split's dataset."""
        data = self.dataset(task.split)
        return dict(data[task.seed % len(data)])

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): the row's prompt (each message's role and text) and
        answer, not its index (`example_id`): a dataset that repeats a task, or an env whose eval set is its train
        set, gives one key for it."""
        row = self.row_for(task)
        prompt = row.get("prompt", row.get("question"))
        messages = [[_role(m), message_text(m)] for m in prompt] if isinstance(prompt, list) else str(prompt)
        return f"{NAME}:{self.entry}:" + json.dumps([messages, str(row.get("answer", ""))], ensure_ascii=False)

    def reset(self, task: Task) -> Observation:
        self.close()
        row = self.row_for(task)
        self.row = row
        self._episode = _Episode(self.vf_env, row)
        self.done = False
        kind, payload = self._episode.next(self.timeout)
        if kind != "prompt":
            self._raise_or_finish(kind, payload)
            raise AgentforgeError(f"{self.entry}: the rollout ended before asking the model anything")
        return self._observation(payload)

    def step(self, action: str) -> StepResult:
        if self.done or self._episode is None:
            raise RuntimeError("this verifiers episode is over (done=True); call reset() before stepping again")
        self._episode.inbox.put(self.action_format.format(action=action))
        kind, payload = self._episode.next(self.timeout)
        if kind == "prompt":
            return StepResult(self._observation(payload), 0.0, False, False, {EXECUTABLE: True})
        state = self._raise_or_finish(kind, payload)
        reward = float(state.get("reward") or 0.0)
        final = state.get("final_env_response") or []
        text = "\n\n".join(message_text(m) for m in final) or "(the episode is over)"
        info: dict[str, Any] = {EXECUTABLE: True, "stop_condition": str(state.get("stop_condition"))}
        metrics = state.get("metrics") or {}
        info.update({f"metric/{k}": float(v) for k, v in dict(metrics).items() if isinstance(v, (int, float))})
        self.done = True
        return StepResult(Observation(text=text, anchor=text, admissible=None), reward, True,
                          reward >= self.success_reward, info)

    def _raise_or_finish(self, kind: str, payload: Any) -> Any:
        if kind == "error":
            self.done = True
            raise AgentforgeError(f"{self.entry}: the verifiers rollout failed: {type(payload).__name__}: {payload}"
                                  ) from payload
        error = payload.get("error") if hasattr(payload, "get") else None
        if error is not None:
            self.done = True
            raise AgentforgeError(f"{self.entry}: the verifiers rollout stopped with an error: {error}")
        return payload

    def _observation(self, messages: list[Any]) -> Observation:
        text = since_last_reply(messages)
        return Observation(text=text, anchor=text, admissible=None)

    def close(self) -> None:
        if self._episode is not None:
            self._episode.close()
            self._episode = None
