"""Per-episode scheduling on real parts (the tiny model in vLLM's CPU engine, Sokoban in local and Ray pools): on
a local pool it plays exactly what lockstep plays; on a Ray pool a slow env step holds back only its own episode;
every RolloutHooks contract holds per episode; a run on engine replicas keeps each episode on its replica."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agentforge.agent.prompts import prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.commands.builders import build_engine, build_model_spec
from agentforge.engines.interventions import InterventionSpec
from agentforge.envs.base import ENVS
from agentforge.envs.sokoban import SokobanEnv
from agentforge.hosting.pool import LocalEnvPool, RayEnvPool
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.multi_turn import MultiTurnWorkflow
from agentforge.rollout.workflow import RolloutContext
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler
from agentforge.types import SamplingConfig, Task

pytestmark = pytest.mark.integration

ENV_OPTIONS = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 20}
MOVES = ["up", "right", "down", "left"]
SLOW_S = 2.5  # margin for a loaded machine: the fast episodes must play 2 turns within one slow step


class SlowSeedSokoban(SokobanEnv):
    """Sokoban whose steps take SLOW_S seconds on one task seed (a slow web page, a stalled simulator)."""

    def __init__(self, slow_seed: int, **options: Any) -> None:
        super().__init__(**options)
        self.slow_seed, self.seed = slow_seed, None

    def reset(self, task: Task) -> Any:
        self.seed = task.seed
        return super().reset(task)

    def step(self, action: str) -> Any:
        if self.seed == self.slow_seed:
            time.sleep(SLOW_S)
        return super().step(action)


ENVS.register("slow_seed_sokoban_test")(SlowSeedSokoban)


@pytest.fixture(scope="module")
def engine(ray_with_module_classes):
    cfg = compose_config(["model=tiny", "engine=vllm"])
    engine = build_engine(cfg, build_model_spec(cfg))
    yield engine
    engine.close()


class ForcedMoves(RolloutHooks):
    """A few sampled tokens, then a move that depends on the episode and its turn only: valid turns that step the
    env, the same moves under any schedule. Records what the workflow asked, in order."""

    def __init__(self, tokenizer: Any, sampled: int = 2, reject_first: bool = False) -> None:
        self.tokenizer, self.sampled, self.reject_first = tokenizer, sampled, reject_first
        self.calls: list[tuple[str, Any]] = []

    def before_first_turn(self, episodes, ctx):
        self.calls.append(("before_first_turn", len(episodes)))

    def turn_intervention(self, episode, ctx):
        turn = len(episode.trajectory.turns)
        self.calls.append(("turn", (episode.slot, turn + 1, time.monotonic())))
        move = MOVES[(episode.slot + turn) % len(MOVES)]
        ids = self.tokenizer.encode(f"<think>go</think><action>{move}</action>", add_special_tokens=False)
        return InterventionSpec("force_sequence", {"sequence": [*ids, self.tokenizer.eos_token_id],
                                                   "after_tokens": self.sampled})

    def review_turns(self, episodes, completions, attempt, ctx):
        self.calls.append(("review", (attempt, [e.slot for e in episodes])))
        return [attempt > 0 or not self.reject_first] * len(episodes)

    def after_episodes(self, episodes, ctx):
        self.calls.append(("after_episodes", all(e.done for e in episodes)))


def play(engine, pool, schedule: str, tasks, group_size: int = 2, max_turns: int = 4, hooks=None):
    engine.reseed(0)
    config = AgentConfig(max_turns=max_turns, schedule=schedule, sampling=SamplingConfig(max_new_tokens=24))
    ctx = RolloutContext(engine, pool, prompt_for("sokoban"), config)
    hooks = hooks or ForcedMoves(engine.tokenizer)
    return MultiTurnWorkflow(hooks).run(ctx, tasks, group_size), hooks


def played(result) -> list[list[tuple]]:
    return [[(t.response_ids, t.logprobs, t.action, t.reward, t.anchor) for t in tr.turns]
            for g in result.groups for tr in g.trajectories]


def test_per_episode_on_a_local_pool_plays_exactly_what_lockstep_plays(engine):
    """One lane and steps that return at once: the event order is lockstep's, so a fixed seed reproduces the run
    (sampled tokens included) and it equals the lockstep run."""
    tasks = TaskSampler("sokoban", "eval").sample(3)
    lockstep, _ = play(engine, LocalEnvPool("sokoban", ENV_OPTIONS), "lockstep", tasks)
    per_episode, _ = play(engine, LocalEnvPool("sokoban", ENV_OPTIONS), "per_episode", tasks)
    again, _ = play(engine, LocalEnvPool("sokoban", ENV_OPTIONS), "per_episode", tasks)
    assert played(per_episode) == played(lockstep) == played(again)
    assert per_episode.stats.env_steps == lockstep.stats.env_steps > 0
    assert per_episode.stats.generated_tokens == lockstep.stats.generated_tokens


def test_a_slow_env_step_holds_back_only_its_own_episode(engine):
    tasks = [Task(env="sokoban", seed=s) for s in (3, 8, 21)]
    options = {**ENV_OPTIONS, "slow_seed": 21}
    # 3 threads per worker: a slow step does not hold back the steps of the worker's other episodes
    with RayEnvPool("slow_seed_sokoban_test", options, num_workers=2, step_threads=3) as pool:
        per_episode, hooks = play(engine, pool, "per_episode", tasks, max_turns=3)
        lockstep, lock_hooks = play(engine, pool, "lockstep", tasks, max_turns=3)

    def submitted(calls):
        return {(slot, turn): at for kind, value in calls if kind == "turn" for slot, turn, at in [value]}

    slow_slots = {4, 5}  # task seed 21, both rollouts
    per, lock = submitted(hooks.calls), submitted(lock_hooks.calls)
    fast_done = max(at for (slot, turn), at in per.items() if slot not in slow_slots)
    # per episode: the fast episodes played all 3 turns before the slow ones' second turn was even submitted
    assert all(per[(slot, 2)] > fast_done for slot in slow_slots)
    # lockstep: every turn 2 waits for the slow step of turn 1
    assert min(at for (slot, turn), at in lock.items() if turn == 2) - min(lock.values()) > SLOW_S
    # the same moves either way (forced), and per-episode idled less than a lockstep turn barrier costs
    actions = [[[t.action for t in turns] for turns in _trajectories(r)] for r in (per_episode, lockstep)]
    assert actions[0] == actions[1]
    assert per_episode.stats.idle_seconds > 0 and per_episode.stats.env_steps == lockstep.stats.env_steps


def _trajectories(result) -> list[list[Any]]:
    return [tr.turns for g in result.groups for tr in g.trajectories]


def test_every_hook_contract_holds_per_episode(engine):
    """before_first_turn once before any turn; a rejected turn regenerated from the same prompt (its first attempt a
    NOT_TRAINED span); each review sees one attempt number; after_episodes once, when all are done."""
    tasks = TaskSampler("sokoban", "eval").sample(2)
    latency = {"dist": "lognormal", "median_s": 0.02, "sigma": 1.0, "max_s": 0.5, "seed": 3}
    hooks = ForcedMoves(engine.tokenizer, reject_first=True)
    with RayEnvPool("sokoban", ENV_OPTIONS, num_workers=2, step_latency=latency) as pool:
        result, _ = play(engine, pool, "per_episode", tasks, max_turns=3, hooks=hooks)
    kinds = [kind for kind, _ in hooks.calls]
    assert kinds[0] == "before_first_turn" and kinds.count("before_first_turn") == 1
    assert kinds[-1] == "after_episodes" and kinds.count("after_episodes") == 1 and hooks.calls[-1][1] is True
    turns = [tr for g in result.groups for tr in g.trajectories]
    assert all(len(tr.turns) == 3 or (len(tr.turns) < 3 and tr.turns[-1].done) for tr in turns)
    for trajectory in turns:
        discarded = [s for s in trajectory.spans if s.kind == "discarded_turn"]
        assert len(discarded) == len(trajectory.turns)  # every turn's first attempt
        for span, turn in zip(discarded, trajectory.turns, strict=True):
            assert span.prompt_ids == turn.prompt_ids  # regenerated from the same prompt
    assert result.stats.regenerated_turns == sum(len(tr.turns) for tr in turns)
    # each turn was asked for its intervention twice (the attempt and the regeneration), in turn order per episode
    asked: dict[int, list[int]] = {}
    for kind, value in hooks.calls:
        if kind == "turn":
            asked.setdefault(value[0], []).append(value[1])
    lengths = {slot: len(tr.turns) for slot, tr in enumerate(turns)}
    assert asked == {slot: [k for k in range(1, n + 1) for _ in (0, 1)] for slot, n in lengths.items()}
