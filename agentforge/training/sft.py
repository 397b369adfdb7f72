"""Supervised warm start on expert trajectories, in exactly the token format the agent loop produces.

Why: SmolLM2-135M as shipped almost never writes `<think>…</think><action>…</action>` (FACTS), so RL from it sees
only penalties. A short SFT on expert play (a Sokoban BFS solver here) teaches the format and some play; RL recipes
then start from it with `model.init_from=<sft run>/model`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentforge.agent.prompts import HistoryEntry, PromptTemplate, prompt_for
from agentforge.agent.render import AgentConfig, conversation_prompt, render_turn_prompt
from agentforge.envs.agent import AGENT_ENV
from agentforge.envs.base import expert_for, make_env
from agentforge.errors import ConfigError
from agentforge.learner import Learner, samples_from_sft
from agentforge.models.loading import ModelSpec, load_hf_model, load_tokenizer
from agentforge.tasks import task_sampler
from agentforge.tasks.held_out import TrainingStreams
from agentforge.types import Task, Trajectory, Turn


def expert_response(action: str, thought: str | None = None, action_tag: str = "action") -> str:
    """The expert's turn text: a short, predictable thought and the action, in the strict format.

    Kept short on purpose: the warm start is there to teach the format and the moves; a thought the model cannot
    predict (e.g. how many steps remain) only adds loss it cannot reduce. An env may say what its expert looks at
    (`expert_thought(action)`, e.g. Sokoban's box and target positions): still predictable from the prompt.
    With alternative tags (`search|answer`, `python|answer`) the env's `tag[body]` action is written as the tag the
    parser reads back, `<tag>body</tag>`.
    """
    think = f"<think>{thought or f'Next move: {action}.'}</think>"
    if "|" in action_tag:
        tag, _, rest = action.partition("[")
        if tag.casefold() in {t.casefold() for t in action_tag.split("|")} and rest.endswith("]"):
            return f"{think}<{tag}>{rest[:-1]}</{tag}>"
    return f"{think}<action>{action}</action>"


def expert_trajectory(
    task: Task, actions: list[str], env: Any, template: PromptTemplate, tokenizer: Any, agent: AgentConfig
) -> Trajectory:
    """Play the expert's actions through the real env, rendering each turn as the rollout workflow would."""
    eos = tokenizer.eos_token_id
    trajectory = Trajectory(task=task, rollout_index=0)
    observation = env.reset(task)
    history: list[HistoryEntry] = []
    for step, action in enumerate(actions, start=1):
        if agent.conversation and trajectory.turns:  # the conversation so far, extended as rollouts extend it
            last = trajectory.turns[-1]
            prompt_ids = conversation_prompt(template, tokenizer, last.prompt_ids, last.response_ids, observation,
                                             history, step)
        else:
            prompt_ids = render_turn_prompt(template, tokenizer, agent, observation, history, step, task)
        thought = env.expert_thought(action) if hasattr(env, "expert_thought") else None
        text = expert_response(action, thought, template.action_tag)
        response_ids = tokenizer.encode(text, add_special_tokens=False) + [eos]
        result = env.step(action)
        trajectory.turns.append(Turn(
            prompt_ids=prompt_ids, response_ids=response_ids, logprobs=[0.0] * len(response_ids),
            forced_mask=[False] * len(response_ids), response_text=text, action=action, valid=True,
            reward=result.reward, env_reward=result.reward, anchor=observation.anchor, observation=observation.text,
            done=result.done,
        ))
        history.append(HistoryEntry(observation.text, action))
        observation = result.observation
        trajectory.won = trajectory.won or result.won
        if result.done:
            break
    return trajectory


@dataclass(frozen=True)
class ExpertPlay:
    """What expert data are played in: the env (each member's, for env=mix), the agent's turn format, and for an
    external agent (env=agent) the gateway's context bound."""

    env_name: str
    env_options: dict[str, Any]
    agent: AgentConfig
    max_model_len: int = 4096
    streams: TrainingStreams = field(default_factory=TrainingStreams)  # the run seed's tasks, held-out ones skipped

    def members(self) -> dict[str, dict[str, Any]]:
        """env -> its options: the run's env, or each member of env=mix."""
        if self.env_name != "mix":
            return {self.env_name: self.env_options}
        from agentforge.tasks import mix_members

        return {name: member for name, (_, member) in mix_members(self.env_options.get("envs")).items()}


def expert_trajectories(play: ExpertPlay, tokenizer: Any, tasks: list[Task]) -> list[Trajectory]:
    """Solved, winning expert trajectories that fit in agent.max_turns (others are skipped); for env=mix each task
    is played by its member env's expert, in its template."""
    agent = play.agent
    out = []
    for name, env_options in play.members().items():
        expert = expert_for(name)
        template = prompt_for(name)
        env = make_env(name, env_options)
        try:
            for task in (t for t in tasks if t.env == name):
                actions = expert(task, env_options)
                if actions and len(actions) <= agent.max_turns:
                    trajectory = expert_trajectory(task, actions, env, template, tokenizer, agent)
                    if trajectory.won:
                        out.append(trajectory)
        finally:
            env.close()
    return out


def save_full_model(spec: ModelSpec, weights: list[tuple[str, torch.Tensor]], out_dir: Path) -> Path:
    """Write the trained weights as a complete HF folder (with tokenizer) that `model.init_from` can load."""
    model = load_hf_model(spec)
    state = dict(weights)
    missing = [name for name in model.state_dict() if name not in state and not name.endswith("lm_head.weight")]
    if missing:
        raise ConfigError(f"exported weights lack {len(missing)} tensors (e.g. {missing[:3]}); export all weights")
    model.load_state_dict(state, strict=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    load_tokenizer(spec).save_pretrained(out_dir)
    return out_dir


def expert_dataset(play: ExpertPlay, sft: Any, tokenizer: Any) -> list[Trajectory]:
    """`sft.num_tasks` expert trajectories from train seeds starting at `sft.seed_offset` (`sft`: the `sft`
    section, typed or as composed), moved by the run seed, held-out content skipped (`play.streams`)."""
    tasks = task_sampler(play.env_name, play.env_options, "train", int(sft.seed_offset), play.streams.stream,
                         play.streams.admit).sample(int(sft.num_tasks))
    if play.env_name == AGENT_ENV:  # an external agent: played with its expert answering the model calls
        from agentforge.gateway.warm_start import expert_conversations

        return expert_conversations(play.env_options, play.max_model_len, tokenizer, tasks)
    data = expert_trajectories(play, tokenizer, tasks)
    if not data:
        raise ConfigError(f"the {play.env_name} expert solved none of {len(tasks)} tasks within agent.max_turns; "
                          "raise agent.max_turns or use smaller rooms")
    return data


def epoch_steps(section: Any, examples: int) -> int:
    """Optimizer steps of `section.epochs` passes over `examples` in batches of `section.batch_size`."""
    return int(section.epochs) * -(-examples // int(section.batch_size))


def run_sft_epochs(section: Any, seed: int, learner: Learner, data: list[Trajectory],
                   on_step: Callable[[int, dict[str, float]], None]) -> int:
    """`section.epochs` passes over the data in shuffled batches of `section.batch_size` trajectories, at
    `section.lr` (null: the learner's) (section `sft`: expert data; `rft`: the policy's kept rollouts); returns the
    steps."""
    rng = random.Random(int(seed))
    batch_size = int(section.batch_size)
    lr = float(section.lr) if getattr(section, "lr", None) is not None else None
    step = 0
    for _epoch in range(int(section.epochs)):
        order = data[:]
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            step += 1
            on_step(step, learner.sft_step(samples_from_sft(order[start : start + batch_size]), lr))
    return step
