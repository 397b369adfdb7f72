"""The expert warm start's data for `env=agent`: the agent played with `env.expert` answering every model call
(`agentforge.gateway.expert`), keeping the episodes it won. Used by `trainer.warm_start: expert` and
`agentforge sft`."""

from __future__ import annotations

from typing import Any

from agentforge.errors import ConfigError
from agentforge.gateway.agent_env import load_callable
from agentforge.gateway.workflow import GatewayWorkflow
from agentforge.types import ProgressCallback, Task, Trajectory


def expert_conversations(env_options: dict[str, Any], max_model_len: int, tokenizer: Any, tasks: list[Task],
                         on_progress: ProgressCallback | None = None) -> list[Trajectory]:
    """One expert-answered episode per task; the won ones, every call a turn with the expert's reply as its ids.
    `env_options`: the agent env's options (its `expert`, `entry`, ...); `max_model_len`: the engine's."""
    options = env_options
    expert = load_callable(options.get("expert"), "env.expert")
    workflow = GatewayWorkflow(options, max_model_len=max_model_len, expert=expert)
    try:
        result = workflow.play_expert(tokenizer, tasks, on_progress)
    finally:
        workflow.close()
    played = [t for g in result.groups for t in g.trajectories]
    failed = [t.meta.get("agent_error") for t in played if t.meta.get("agent_error")]
    won = [t for t in played if t.won and t.turns and not t.meta.get("agent_error")]
    if not won:
        first = f"; the first failure: {str(failed[0]).splitlines()[-1][:300]}" if failed else ""
        raise ConfigError(f"the expert ({options.get('expert')}) won none of {len(played)} episodes of "
                          f"{options.get('entry')} ({len(failed)} failed{first}); check that the expert's tool calls "
                          "match the agent's tools")
    return won
