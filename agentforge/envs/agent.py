"""The `agent` env kind: the options of an externally written agent (`env=agent env.entry=mypkg.agent:run`).

It is not stepped like the other envs: the agent drives the episode and calls the model through the gateway
(`agentforge.gateway.workflow`). The class holds the options (its constructor is the config schema, as for every
env) and refuses to be stepped, naming why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from agentforge.envs.base import ENVS
from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

AGENT_ENV = "agent"


@ENVS.register(AGENT_ENV)
class AgentEnv:
    """Options of the gateway-driven env kind."""

    replayable = False
    replay_note = "an external agent drives the episode; its tools and choices cannot be replayed by the trainer"
    descriptors: ClassVar[dict[str, str]] = {"tool_calls": "agentforge.envs.agent_descriptors:agent_tool_calls"}
    option_help: ClassVar[dict[str, str]] = {
        "entry": "the agent: `package.module:callable`, sync or async, called as (task, base_url, api_key) and "
                 "returning a reward (float), a dict {reward, won?, info?}, or None (then `verifier` scores it)",
        "task_env": "the env whose tasks the agent solves (its data; agents may build it for their tools)",
        "task_env_options": "that env's options",
        "expert": "optional `package.module:callable` (task, messages, tools) -> the assistant message an expert "
                  "would write: the tool-format warm start (trainer.warm_start=expert, agentforge sft) plays the agent "
                  "with it answering every model call (agentforge.gateway.expert)",
        "verifier": "optional `package.module:callable` (task, final_text) -> reward, for agents that return None",
        "timeout": "seconds an episode may take; past it the episode fails (counted) and the iteration goes on",
        "max_calls": "model calls per episode; more are refused (HTTP 429)",
        "batch_window_s": "gap timeout: requests arriving within this of each other share a generate call "
                          "(at most 20 windows; at once when every live session waits)",
        "host": "the gateway's address (127.0.0.1: this machine only)",
        "port": "the gateway's port (0: a free one)",
        "model_name": "the model id the gateway serves (/v1/models)",
        "max_body_mb": "a request body over this many MiB is refused (413) while it streams in",
        "special_tokens": "how control-token strings (e.g. `<|im_end|>`) inside message text are encoded: text (as "
                          "chat servers do: tool output cannot forge turn boundaries) | control (the old behaviour)",
    }

    def __init__(self, entry: str | None = None, task_env: str = "search_qa",
                 task_env_options: dict[str, Any] | None = None, verifier: str | None = None,
                 expert: str | None = None, timeout: float = 300.0,
                 max_calls: int = 16, batch_window_s: float = 0.2, host: str = "127.0.0.1", port: int = 0,
                 model_name: str = "agentforge-policy", special_tokens: str = "text",
                 max_body_mb: float = 16.0) -> None:
        if timeout <= 0:
            raise ConfigError(f"agent env timeout={timeout}: must be > 0 seconds")
        if max_calls < 1:
            raise ConfigError(f"agent env max_calls={max_calls}: must be >= 1")
        if batch_window_s < 0:
            raise ConfigError(f"agent env batch_window_s={batch_window_s}: must be >= 0")
        if not max_body_mb > 0:
            raise ConfigError(f"agent env max_body_mb={max_body_mb}: must be > 0")
        if special_tokens not in ("text", "control"):
            raise ConfigError(f"agent env special_tokens={special_tokens!r}: must be text or control")
        self.options = dict(entry=entry, task_env=task_env, task_env_options=dict(task_env_options or {}),
                            verifier=verifier, expert=expert,
                            timeout=timeout, max_calls=max_calls, batch_window_s=batch_window_s,
                            host=host, port=port, model_name=model_name, special_tokens=special_tokens,
                            max_body_mb=max_body_mb)
        self._task_env: Any = None  # built on the first task key only: the agent itself builds what it needs
        self.task_key_note = ""

    def task_key(self, task: Task) -> str | None:
        """The task's content (agentforge/envs/task_keys.py): the key its `task_env` (with `task_env_options`) gives
        the same seed, unchanged, so the tasks an agent trains on and those a plain run of that env holds out (or a
        warm start trained on) are compared as the same content. None (see `task_key_note`) where it names none, or
        one that does not key its tasks."""
        if self._task_env is None:
            self._task_env = self._build_task_env()
        if self._task_env is None:
            return None
        return self._task_env.task_key(replace(task, env=str(self.options["task_env"])))

    def _build_task_env(self) -> Any:
        name = self.options["task_env"]
        env_class = ENVS.get(str(name)) if name else None
        if env_class is None or not callable(getattr(env_class, "task_key", None)) or name == AGENT_ENV:
            self.task_key_note = (f"the agent's task_env {name!r} does not say what its tasks contain"
                                  if name else "the agent names no task_env, so its tasks have no content to key")
            return None
        return env_class(**self.options["task_env_options"])

    def reset(self, task: Task) -> Observation:
        raise ConfigError("the `agent` env is played by its agent through the gateway, not stepped; it runs under "
                          "the gateway workflow (agentforge train/rollout/eval pick it for env=agent)")

    def step(self, action: str) -> StepResult:
        return self.reset(Task(AGENT_ENV, 0))  # type: ignore[return-value]

    def close(self) -> None:
        if self._task_env is not None:
            self._task_env.close()
            self._task_env = None

