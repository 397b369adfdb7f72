"""Replay and branching on every bundled env: replays are deterministic and equal stepping by hand, each env flags
its inexecutable actions, the Ray pool (batched, 2 workers) gives what in-process replay gives, a branch (reset with
a prefix, then stepping) equals playing the whole sequence from scratch, dead workers are recovered, and envs that
cannot replay are refused by name. ALFWorld and ScienceWorld are slow to start: one or two tasks each."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentforge.envs.base import ENVS, Env, action_executable, expert_for, make_env
from agentforge.envs.replay import ReplayError, ReplayResult, replay
from agentforge.envs.sokoban import ACTIONS, SokobanEnv, apply_action
from agentforge.errors import ConfigError
from agentforge.hosting.pool import LocalEnvPool, RayEnvPool, ensure_ray
from agentforge.types import StepResult, Task

pytestmark = pytest.mark.integration

SOKOBAN = {"dim_room": [6, 6], "num_boxes": 2, "max_steps": 30}
SCIENCEWORLD = {"task_names": ["find-non-living-thing", "lifespan-longest-lived", "power-component"], "max_steps": 30}


class CrashOnceSokoban(SokobanEnv):
    """Sokoban whose process really dies (os._exit) once, at a given step of a given seed: a crash mid-replay."""

    def __init__(self, crash_file: str, crash_seed: int, crash_at_step: int, **options: Any) -> None:
        super().__init__(**options)
        self.crash_file, self.crash_seed, self.crash_at_step = crash_file, crash_seed, crash_at_step
        self.seed: int | None = None

    def reset(self, task: Task) -> Any:
        self.seed = task.seed
        return super().reset(task)

    def step(self, action: str) -> Any:
        at_crash = self.seed == self.crash_seed and self.steps_taken + 1 == self.crash_at_step
        if at_crash and not os.path.exists(self.crash_file):
            Path(self.crash_file).touch()
            os._exit(1)
        return super().step(action)


class UnseededSokoban(SokobanEnv):
    """A user env that says it cannot replay (as one with unseeded randomness would)."""

    replayable = False
    replay_note = "its rooms come from an unseeded generator"


ENVS.register("crash_once_sokoban_replay_test")(CrashOnceSokoban)
ENVS.register("unseeded_sokoban_replay_test")(UnseededSokoban)


@pytest.fixture(scope="module", autouse=True)
def ray_runtime() -> Iterator[None]:
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors cannot import this test module
    started = not ray.is_initialized()
    ensure_ray(num_cpus=2)
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    if started:
        ray.shutdown()


# -- one case per bundled env: options, tasks, an expert's actions and a known inexecutable action ------------------
@dataclass
class Case:
    env: str
    options: dict[str, Any]
    seeds: list[int]
    expert: Callable[[Env, Task], list[str]]
    # (index, action) to insert into the expert's actions: an action the env must flag as not executable
    inexecutable: Callable[[Env, Task, list[str]], tuple[int, str]]

    def tasks(self) -> list[Task]:
        return [Task(self.env, seed) for seed in self.seeds]


def registry_expert(name: str, options: dict[str, Any]) -> Callable[[Env, Task], list[str]]:
    def actions(env: Env, task: Task) -> list[str]:
        found = expert_for(name)(task, options)
        assert found, f"no expert actions for {task.describe()}"
        return list(found)

    return actions


def sokoban_wall(env: Env, task: Task, actions: list[str]) -> tuple[int, str]:
    """The first point on the expert's path where some move changes nothing (a wall or an unpushable box)."""
    env.reset(task)
    for index, action in enumerate(actions):
        blocked = [a for a in ACTIONS if not apply_action(env.state, a).moved_player]
        if blocked:
            return index, blocked[0]
        env.step(action)
    raise AssertionError(f"no blocked move along the expert path of {task.describe()}")


def intervention_plan(env: Env, task: Task) -> list[str]:
    return list(env.case_for(task).plan_avoiding)


CASES: dict[str, Case] = {
    "sokoban": Case("sokoban", SOKOBAN, [2, 7], registry_expert("sokoban", SOKOBAN), sokoban_wall),
    # going to where you already are: the engine answers "Nothing happens."
    "alfworld": Case("alfworld", {}, [0], registry_expert("alfworld", {}), lambda env, task, a: (1, a[0])),
    # under disruption a command naming a forbidden location is rejected (`look` runs instead)
    "alfworld_intervention": Case("alfworld_intervention", {"condition": "disruption"}, [0], intervention_plan,
                                  lambda env, task, a: (1, f"go to {env.case_for(task).forbidden[0]}")),
    "webshop": Case("webshop", {}, [0, 5], registry_expert("webshop", {}), lambda env, task, a: (0, "click[buy now]")),
    "scienceworld": Case("scienceworld", SCIENCEWORLD, [0], registry_expert("scienceworld", SCIENCEWORLD),
                         lambda env, task, a: (1, "fly to the moon")),
    "search_qa": Case("search_qa", {}, [0, 3], registry_expert("search_qa", {}), lambda env, task, a: (1, "hello")),
}
SLOW = {"alfworld", "alfworld_intervention", "scienceworld"}


def skip_without_engine(name: str) -> None:
    if name.startswith("alfworld"):
        pytest.importorskip("textworld")
        pytest.importorskip("alfworld")
    if name == "scienceworld":
        pytest.importorskip("scienceworld")
        if shutil.which("java") is None:
            pytest.skip("ScienceWorld needs a java executable")


@pytest.fixture(scope="module")
def close_scienceworld_experts() -> Iterator[None]:
    yield
    if "agentforge.envs.scienceworld" in sys.modules:
        from agentforge.envs.scienceworld import close_expert_envs

        close_expert_envs()


def rows(result: ReplayResult) -> list[Any]:
    """Everything a replay showed, step by step (observation text, anchor, admissible, reward, done, won, flag)."""
    first = result.initial_observation
    return [(first.text, first.anchor, first.admissible)] + [
        (s.action, s.observation.text, s.observation.anchor, s.observation.admissible, s.reward, s.done, s.won,
         s.executable, s.info) for s in result.steps
    ]


def step_rows(actions: list[str], results: list[StepResult]) -> list[Any]:
    return [(a, r.observation.text, r.observation.anchor, r.observation.admissible, r.reward, r.done, r.won,
             action_executable(r), r.info) for a, r in zip(actions, results, strict=False)]


def by_hand(env: Env, task: Task, actions: list[str]) -> list[Any]:
    """Reset and step `env` ourselves, stopping when the episode ends: what a replay must reproduce."""
    first = env.reset(task)
    results: list[StepResult] = []
    for action in actions:
        results.append(env.step(action))
        if results[-1].done:
            break
    return [(first.text, first.anchor, first.admissible), *step_rows(actions, results)]


def with_inserted(actions: list[str], index: int, action: str) -> list[str]:
    return [*actions[:index], action, *actions[index:]]


# -- per env, in-process ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_replay_is_deterministic_equals_stepping_and_flags_inexecutable_actions(
    name: str, close_scienceworld_experts: None
) -> None:
    skip_without_engine(name)
    case = CASES[name]
    env = make_env(name, case.options)
    try:
        for task in case.tasks():
            actions = case.expert(env, task)
            first = replay(env, task, actions)
            second = replay(env, task, actions)
            assert rows(first) == rows(second) == by_hand(env, task, actions)
            assert first.won and first.done and not first.unplayed, task.describe()
            assert first.inexecutable_steps == [] and first.executed_actions == actions

            index, bad = case.inexecutable(env, task, actions)
            sequence = with_inserted(actions, index, bad)
            flagged = replay(env, task, sequence)
            assert rows(flagged) == rows(replay(env, task, sequence)) == by_hand(env, task, sequence)
            assert flagged.inexecutable_steps == [index], (task.describe(), bad, flagged.steps[index].observation.text)
            assert flagged.executed_actions == actions[: len(flagged.steps) - 1]
            if name == "sokoban":  # a blocked move leaves the room as it was
                before = flagged.steps[index - 1].observation if index else flagged.initial_observation
                assert flagged.steps[index].observation.anchor == before.anchor
    finally:
        env.close()


def test_alfworld_intervention_flags_later_steps_that_a_changed_plan_makes_inexecutable() -> None:
    """TrajEvolve's question: after a change, which later steps can no longer be carried out?"""
    skip_without_engine("alfworld")
    env = make_env("alfworld_intervention", {"condition": "disruption"})
    try:
        task = Task("alfworld_intervention", 0)
        case = env.case_for(task)
        result = replay(env, task, list(case.plan_using))  # the plan through the unavailable location
        rejected = [i for i, step in enumerate(result.steps) if step.info["rejected"]]
        assert rejected and set(rejected) < set(result.inexecutable_steps)  # and later steps fail in the game too
        assert not result.won
        assert all("Nothing happens" in result.steps[i].observation.text for i in result.inexecutable_steps)
    finally:
        env.close()


# -- per env, through the Ray pool ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_ray_pool_replays_and_branches_like_in_process(name: str, close_scienceworld_experts: None) -> None:
    skip_without_engine(name)
    case = CASES[name]
    env = make_env(name, case.options)
    try:
        requests: list[tuple[Task, list[str]]] = []
        for task in case.tasks():
            actions = case.expert(env, task)
            index, bad = case.inexecutable(env, task, actions)
            requests += [(task, actions), (task, actions[:index] + actions[index + 1 :]),  # one step removed
                         (task, with_inserted(actions, index, bad))]
        if name in SLOW:
            requests = requests[:2]  # one request per worker
        expected = [replay(env, task, actions) for task, actions in requests]
        full = [by_hand(env, task, actions) for task, actions in requests[:2]]
    finally:
        env.close()

    with RayEnvPool(name, case.options, num_workers=2) as pool:
        assert pool.replay(requests) == expected
        # branch: slot i replays a prefix of request i's actions, then steps the rest; equals playing all of it
        branches = requests[:2]
        cuts = [max(1, len(actions) // 2) for _, actions in branches]
        prefixes = [actions[:cut] for (_, actions), cut in zip(branches, cuts, strict=True)]
        started = pool.reset_with_prefixes([task for task, _ in branches], prefixes)
        for slot, (result, k) in enumerate(zip(started, cuts, strict=True)):
            assert rows(result) == full[slot][: k + 1]
        rest = {slot: list(actions[cut:]) for slot, ((_, actions), cut) in enumerate(zip(branches, cuts, strict=True))}
        stepped: dict[int, list[StepResult]] = {slot: [] for slot in rest}
        while moves := {s: rest[s][len(stepped[s])] for s in pool.active_slots if len(stepped[s]) < len(rest[s])}:
            for slot, result in pool.step(moves).items():
                stepped[slot].append(result)
        for slot in rest:
            assert step_rows(rest[slot], stepped[slot]) == full[slot][cuts[slot] + 1 :]
        assert pool.restarts == 0


# -- the pool API ---------------------------------------------------------------------------------------------------
def sokoban_requests() -> list[tuple[Task, list[str]]]:
    """TrajEvolve's pattern on two tasks: the expert path, and the path with each step removed in turn."""
    case = CASES["sokoban"]
    env = make_env("sokoban", SOKOBAN)
    requests = []
    for task in case.tasks():
        actions = case.expert(env, task)
        requests.append((task, actions))
        requests += [(task, actions[:i] + actions[i + 1 :]) for i in range(len(actions))]
    return requests


def play_slots(pool: Any, tasks: list[Task], plans: list[list[str]], prefixes: list[list[str]] | None = None,
               between: Callable[[int], None] | None = None) -> list[Any]:
    """Reset (with prefixes) and step every slot through its plan; everything the pool showed, turn by turn."""
    shown: list[Any] = [[(o.text, o.anchor) for o in pool.reset(tasks, prefixes)]]
    turn = 0
    while pool.active_slots:
        if between is not None:
            between(turn)
        results = pool.step({s: plans[s][turn % len(plans[s])] for s in pool.active_slots})
        shown.append(sorted((s, r.observation.anchor, r.reward, r.done, r.won, r.info) for s, r in results.items()))
        turn += 1
    return shown


def test_pool_replay_is_batched_spread_over_workers_and_leaves_episodes_alone() -> None:
    requests = sokoban_requests()
    env = make_env("sokoban", SOKOBAN)
    expected = [replay(env, task, actions) for task, actions in requests]
    assert any(not r.won for r in expected) and any(r.won for r in expected)  # some removed steps were necessary
    tasks = [Task("sokoban", s) for s in (3, 3, 8)]
    plans = [list(ACTIONS), list(reversed(ACTIONS)), ["up", "up", "left"]]

    with LocalEnvPool("sokoban", SOKOBAN) as local:
        undisturbed = play_slots(local, tasks, plans)
        assert local.replay(requests) == expected
    with RayEnvPool("sokoban", SOKOBAN, num_workers=2) as pool:
        groups = pool._spread([(i, (t, a, True)) for i, (t, a) in enumerate(requests)])
        assert sorted(groups) == [0, 1]
        work = [sum(1 + len(item[1][1]) for item in groups[w]) for w in (0, 1)]
        assert abs(work[0] - work[1]) <= max(1 + len(a) for _, a in requests)  # even, up to one request

        def replay_now(turn: int) -> None:  # replays between steps must not move the slots' envs
            if turn in (1, 4):
                assert pool.replay(requests) == expected

        assert play_slots(pool, tasks, plans, between=replay_now) == undisturbed
        assert pool.replay(requests[:1]) == expected[:1] and pool.replay([]) == []
        assert pool.restarts == 0


def test_branch_prefixes_enter_the_log_and_survive_a_killed_worker() -> None:
    tasks = [Task("sokoban", s) for s in (2, 2, 7, 9)]
    prefixes = [["left"], ["up", "up"], [], ["down", "right", "down"]]
    plans = [list(ACTIONS), ["right", "down"], ["left", "up"], ["up"]]
    with LocalEnvPool("sokoban", SOKOBAN) as local:
        expected = play_slots(local, tasks, plans, prefixes)
        started = local.reset_with_prefixes(tasks, prefixes)
        assert [r.actions for r in started] == prefixes
        assert local._episodes[3].actions == prefixes[3]
    with RayEnvPool("sokoban", SOKOBAN, num_workers=2, max_restarts=2) as pool:
        def kill(turn: int) -> None:
            if turn == 2:
                pool.kill_worker(1)  # slots 1 and 3: both branched

        assert play_slots(pool, tasks, plans, prefixes, between=kill) == expected
        assert pool.worker_restarts == [0, 1]


def test_a_worker_killed_before_or_dying_during_a_replay_is_restarted_and_the_replay_retried(tmp_path: Path) -> None:
    requests = sokoban_requests()
    env = make_env("sokoban", SOKOBAN)
    expected = [replay(env, task, actions) for task, actions in requests]
    tasks = [Task("sokoban", s) for s in (3, 8)]
    with LocalEnvPool("sokoban", SOKOBAN) as local:
        local.reset(tasks)
        after = local.step({0: "up", 1: "left"})
    with RayEnvPool("sokoban", SOKOBAN, num_workers=2, max_restarts=2) as pool:
        pool.reset(tasks)
        pool.kill_worker(0)
        assert pool.replay(requests) == expected
        assert pool.worker_restarts == [1, 0]
        assert pool.step({0: "up", 1: "left"}) == after  # slot 0's episode was restored on the new worker

    crash = {**SOKOBAN, "crash_file": str(tmp_path / "crashed"), "crash_seed": 7, "crash_at_step": 2}
    with RayEnvPool("crash_once_sokoban_replay_test", crash, num_workers=2, max_restarts=2) as pool:
        assert pool.replay(requests) == expected
        assert (tmp_path / "crashed").exists() and pool.restarts == 1


def test_env_errors_during_replay_name_the_env_the_task_and_the_action() -> None:
    task = Task("sokoban", 2)
    env = make_env("sokoban", SOKOBAN)
    with pytest.raises(ReplayError, match=r"env 'sokoban' \(SokobanEnv\) raised at action 1 \('jump'\) while "
                                          r"replaying sokoban\[train\] seed=2: ValueError: unknown Sokoban action"):
        replay(env, task, ["up", "jump"])
    solution = CASES["sokoban"].expert(env, task)
    with pytest.raises(ReplayError, match="ended after action"):
        replay(env, task, [*solution, "up"], stop_when_done=False)
    assert replay(env, task, [*solution, "up"]).unplayed == ["up"]
    with pytest.raises(TypeError, match="single string"):
        replay(env, task, "up")

    with RayEnvPool("sokoban", SOKOBAN, num_workers=2) as pool:
        with pytest.raises(ReplayError, match="'sokoban'.*at action 1 \\('jump'\\).*seed=2") as caught:
            pool.replay([(Task("sokoban", 7), ["up"]), (task, ["up", "jump"])])
        assert "request 1" in "".join(getattr(caught.value, "__notes__", []))
        assert pool.replay([(task, solution)]) == [replay(env, task, solution)]  # the pool goes on
        with pytest.raises(ReplayError, match="jump"):
            pool.reset([task, task], prefixes=[["up"], ["jump"]])
        with pytest.raises(ValueError, match="2 tasks but 1 prefixes"):
            pool.reset([task, task], prefixes=[["up"]])
        with pytest.raises(TypeError, match="request 0 must be a \\(Task, actions\\) pair"):
            pool.replay([["up"]])
        assert pool.restarts == 0


def test_an_env_that_cannot_replay_is_refused_by_name() -> None:
    task = Task("sokoban", 2)
    unseeded = UnseededSokoban(**SOKOBAN)
    message = r"'sokoban' \(UnseededSokoban\) cannot replay.*unseeded generator"
    with pytest.raises(ConfigError, match=message):
        replay(unseeded, task, ["up"])
    with RayEnvPool("unseeded_sokoban_replay_test", SOKOBAN, num_workers=2) as pool:
        with pytest.raises(ConfigError, match=message):
            pool.replay([(task, ["up"])])
        with pytest.raises(ConfigError, match=message):
            pool.reset([task], prefixes=[["up"]])
        assert len(pool.reset([task, task], prefixes=[[], []])) == 2  # no prefix: a plain reset works
        assert pool.step({0: "up"})[0].info["steps"] == 1
    pytest.importorskip("scienceworld")
    from agentforge.envs.scienceworld import ScienceWorldEnv

    with pytest.raises(ConfigError, match="'scienceworld' \\(ScienceWorldEnv\\) cannot replay.*deterministic"):
        replay(ScienceWorldEnv(deterministic=False), Task("scienceworld", 0), ["look around"])  # no JVM starts
