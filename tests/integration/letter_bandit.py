"""The letter bandit: the smallest task the full RL loop can visibly learn, shared by the learning and asynchronous
training tests (registered once here, so both modules can run in one session).

One step: the policy writes one token inside `<action>…</action>` (a `slot_fill` intervention scaffolds the tags,
which are masked out of the loss) and earns 1 when that token contains the letter `letter`. A random 2-layer model
does this for only some samples; GRPO must shift its distribution within a few updates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import open_dict

from agentforge.agent.prompts import PROMPTS, PromptTemplate
from agentforge.envs.base import ENVS
from agentforge.models.loading import load_tokenizer, resolve_model
from agentforge.schema.compose import compose_config
from agentforge.types import Observation, StepResult, Task

# One iteration: 4 tasks x 8 samples of one 8-token turn at lr 3e-2, the learning tests' budget.
BANDIT_RUN = [
    "recipe=debug", "command=train", "logger.wandb=false", "env_pool.kind=local", "algorithm=grpo",
    "trainer.iterations=8", "trainer.tasks_per_iteration=4", "trainer.group_size=8", "trainer.eval_every=0",
    "trainer.eval_before=false", "trainer.checkpoint_every=0", "agent.max_turns=1", "reward.invalid_penalty=0",
    "agent.sampling.max_new_tokens=8", "learner.lr=3e-2", "seed=0",
]


@ENVS.register("letter_bandit")
class LetterBandit:
    """One step: reward 1 when the action contains the letter `letter`."""

    def __init__(self, letter: str = "a") -> None:
        self.letter = letter

    def reset(self, task: Task) -> Observation:
        return Observation("Write one word.", anchor="start", admissible=None)

    def step(self, action: str) -> StepResult:
        won = self.letter in action.lower()
        return StepResult(Observation("done", anchor="done"), float(won), True, won, {})

    def close(self) -> None:
        pass


PROMPTS.register("letter_bandit")(PromptTemplate(system="You write words.", turn="{observation}",
                                                 require_think=False))


def bandit_config(run_dir: Path, *overrides: str) -> Any:
    """A training config on the letter bandit: BANDIT_RUN, then `overrides`, with the action scaffold."""
    tokenizer = load_tokenizer(resolve_model({"name": "tiny"}))
    cfg = compose_config([*BANDIT_RUN, *overrides], run_dir=str(run_dir))
    with open_dict(cfg):
        cfg.env = {"name": "letter_bandit", "letter": "a"}
        cfg.agent.intervention = {"kind": "slot_fill", "params": {
            "prefix": tokenizer.encode("<action>", add_special_tokens=False), "free": 1,
            "suffix": [*tokenizer.encode("</action>", add_special_tokens=False), tokenizer.eos_token_id],
        }}
    return cfg


def metric_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
