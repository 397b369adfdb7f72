"""Generate ALFWorld games from the package's floor plans, keep those the package's planner expert solves.

Game `index` of a split is fully determined by (seed, split, index, attempt): the task type cycles through the six
types, the floor plan is drawn from the split's scenes (valid_unseen: ALFRED's held-out scenes; train and
valid_seen: all others), then objects and goal are sampled. Each game is written in the real format, like
`alfworld-generate` leaves it: `<split>/<task>-<obj>-None-<parent>-<scene>/trial_G<index>_<attempt>/` with
`traj_data.json`, `initial_state.pddl` and `game.tw-pddl` (`solvable` null until solved). The planner then runs on
the game file through `AlfredExpert(expert_type="planner")`, in a child process with a CPU-time limit (its
search can take minutes on some two-object games); a game is kept when its plan wins when replayed. A game that
fails gets `solvable: false` and the next attempt of the same index is sampled.
Existing folders are reused, so an interrupted run resumes where it stopped and gives the same set.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentforge.envs.alfworld.games import (
    ALFWORLD_SPLITS,
    GameRecord,
    assemble_game_data,
    package_logic,
    write_bundle,
)
from agentforge.envs.alfworld.problem import problem_pddl
from agentforge.envs.alfworld.sampling import NoGoal, SampledGame, sample_game, task_supported
from agentforge.envs.alfworld.scenes import UNSEEN_FLOOR_PLANS, floor_plan_numbers, load_floor_plan
from agentforge.envs.alfworld.task_types import TASK_TYPES
from agentforge.errors import AgentforgeError

MAX_ATTEMPTS = 20
MAX_WALKTHROUGH = 50  # the env's step limit: a longer expert plan could never win


@dataclass(frozen=True)
class GameSpec:
    """A sampled game before solving: where it goes and what it contains."""

    split: str
    index: int
    attempt: int
    rel_dir: str
    sampled: SampledGame
    task_desc: str
    traj_data: dict[str, Any]
    pddl_problem: str


def split_floor_plans(split: str) -> list[int]:
    if split not in ALFWORLD_SPLITS:
        raise AgentforgeError(f"unknown ALFWorld split {split!r}; valid: {', '.join(ALFWORLD_SPLITS)}")
    numbers = floor_plan_numbers()
    if split == "valid_unseen":
        return [n for n in numbers if n in UNSEEN_FLOOR_PLANS]
    return [n for n in numbers if n not in UNSEEN_FLOOR_PLANS]


@contextmanager
def _seeded_global_random(seed: str) -> Iterator[None]:
    """`get_templated_task_desc` draws from the global `random`; seed it and restore the caller's state."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def task_sentence(traj_data: dict[str, Any], seed: str) -> str:
    """The package's templated goal sentence (what `add_task_to_grammar` puts after "Your task is to: ")."""
    from alfworld.agents.utils.misc import get_templated_task_desc

    with _seeded_global_random(seed):
        return get_templated_task_desc(traj_data)


def game_spec(seed: int, split: str, index: int, attempt: int) -> GameSpec:
    """Sample game `index` (attempt `attempt`) of a split; no solving."""
    key = f"agentforge-alfworld:{seed}:{split}:{index}:{attempt}"
    rng = random.Random(key)
    task_type = TASK_TYPES[index % len(TASK_TYPES)].name
    candidates = [n for n in split_floor_plans(split) if task_supported(load_floor_plan(n), task_type)]
    if not candidates:
        raise AgentforgeError(f"no floor plan of split {split} supports {task_type}")
    for _ in range(50):
        plan = load_floor_plan(rng.choice(candidates))
        try:
            sampled = sample_game(plan, task_type, rng)
            break
        except NoGoal:
            continue
    else:
        raise AgentforgeError(f"could not sample a {task_type} game for {split} index {index}")
    goal = sampled.goal
    trial = f"trial_G{index:05d}_{attempt}"
    second = goal.toggle_target if task_type == "look_at_obj_in_light" else goal.parent_target
    rel_dir = f"{split}/{task_type}-{goal.object_target}-None-{second}-{plan.number}/{trial}"
    traj_data: dict[str, Any] = {
        "task_id": trial,
        "task_type": task_type,
        "pddl_params": goal.pddl_params(),
        "scene": {"floor_plan": f"FloorPlan{plan.number}", "scene_num": plan.number},
        "agentforge": {"generator_seed": seed, "split": split, "index": index, "attempt": attempt},
    }
    task_desc = task_sentence(traj_data, key)
    return GameSpec(split, index, attempt, rel_dir, sampled, task_desc, traj_data,
                    problem_pddl(sampled.scene, goal, trial))


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so an interrupted run never leaves half a game file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def _read_game_file(game_file: Path) -> dict[str, Any] | None:
    try:
        return json.loads(game_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_game_folder(out: Path, spec: GameSpec) -> Path:
    """Write the real-format folder (game.tw-pddl with solvable null) unless it exists; returns the folder."""
    folder = out / spec.rel_dir
    game_file = folder / "game.tw-pddl"
    if _read_game_file(game_file) is not None:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / "traj_data.json", json.dumps(spec.traj_data, indent=2))
    _write_atomic(folder / "initial_state.pddl", spec.pddl_problem)
    data = assemble_game_data(spec.pddl_problem, spec.task_desc, None)
    data["solvable"] = None
    _write_atomic(game_file, json.dumps(data))
    return folder


# -- solving -----------------------------------------------------------------------------------------------------------
def plan_and_check(game_file: str, max_steps: int = MAX_WALKTHROUGH) -> tuple[list[str] | None, str]:
    """The planner expert's walkthrough for a game file, kept if it fits in `max_steps` and replaying it in the same
    game wins.

    The plan is `AlfredExpert(expert_type="planner")`'s `extra.expert_plan` at reset (what `alfworld-generate
    --expert_type planner` stores); the replay then steps the wrapped engine with replanning switched off.
    """
    from agentforge.envs.alfworld.engine import make_engine

    expert = make_engine(planner=True)
    expert.load(game_file)
    state = expert.reset()
    if state["won"]:
        return None, "goal holds at the start"
    plan = list(state["extra.expert_plan"] or [])
    if not plan:
        return None, "the planner found no plan"
    if len(plan) > max_steps:
        return None, f"plan of {len(plan)} steps exceeds {max_steps}"
    expert.request_infos.policy_commands = False  # replanning after every step is the expensive part
    player = expert._wrapped_env  # AlfredInfos(AlfredDemangler(PddlEnv)): the same game state
    for command in plan:
        if command not in state["admissible_commands"]:
            return None, f"plan step {command!r} is not admissible"
        state, _, done = player.step(command)
        if done:
            break
    return (plan, "solved") if state["won"] else (None, "the plan does not win")


def _solve_child(game_file: str, cpu_seconds: float, conn: Any) -> None:
    import resource

    # A CPU-time limit (not wall time) so which games pass does not depend on how busy the machine is.
    limit = max(1, int(cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    try:
        conn.send(plan_and_check(game_file))
    except Exception as err:  # report the engine's error to the parent instead of dying silently
        conn.send((None, f"error: {err!r}"))
    finally:
        conn.close()


def solve_with_limit(game_file: Path, cpu_seconds: float) -> tuple[list[str] | None, str]:
    """Run the planner in a forked child limited to `cpu_seconds` of CPU; a child past it is unsolved."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_solve_child, args=(str(game_file), cpu_seconds, sender), daemon=True)
    child.start()
    sender.close()
    try:
        return receiver.recv()
    except EOFError:  # killed by the CPU limit (SIGXCPU/SIGKILL) or crashed
        return None, f"planner stopped (over {cpu_seconds:.0f} CPU s or crashed, exit {child.join() or child.exitcode})"
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receiver.close()


def record_result(game_file: Path, walkthrough: list[str] | None, reason: str) -> None:
    data = json.loads(game_file.read_text())
    data["solvable"] = walkthrough is not None
    data["walkthrough"] = walkthrough
    if walkthrough is None:
        data["agentforge_reason"] = reason
    _write_atomic(game_file, json.dumps(data))


# -- whole splits ------------------------------------------------------------------------------------------------------
@dataclass
class SplitStats:
    solved: int = 0
    reused: int = 0
    failed: int = 0
    planner_seconds: float = 0.0


def generate_game(out: Path, seed: int, split: str, index: int, cpu_limit: float, stats: SplitStats,
                  log: Any = None) -> Path:
    """Game `index` of a split, solved: reuses finished folders, samples new attempts after failures."""
    for attempt in range(MAX_ATTEMPTS):
        spec = game_spec(seed, split, index, attempt)
        folder = write_game_folder(out, spec)
        game_file = folder / "game.tw-pddl"
        solvable = json.loads(game_file.read_text()).get("solvable")
        if solvable is True:
            stats.reused += 1
            return folder
        if solvable is False:
            continue
        started = time.perf_counter()
        walkthrough, reason = solve_with_limit(game_file, cpu_limit)
        stats.planner_seconds += time.perf_counter() - started
        record_result(game_file, walkthrough, reason)
        if walkthrough is not None:
            stats.solved += 1
            return folder
        stats.failed += 1
        if log is not None:
            log(f"{spec.rel_dir}: {reason}")
    raise AgentforgeError(f"{split} game {index}: no solvable game in {MAX_ATTEMPTS} attempts")


def solved_folder(out: Path, seed: int, split: str, index: int) -> Path | None:
    """The folder of game `index` whose solve succeeded, without solving anything (None if not there yet)."""
    for attempt in range(MAX_ATTEMPTS):
        spec = game_spec(seed, split, index, attempt)
        game_file = out / spec.rel_dir / "game.tw-pddl"
        if not game_file.exists():
            return None
        if json.loads(game_file.read_text()).get("solvable") is True:
            return out / spec.rel_dir
    return None


def read_game_folder(folder: Path, root: Path, split: str) -> GameRecord:
    """A solved real-format folder as a bundle record (task sentence taken back out of the grammar)."""
    traj = json.loads((folder / "traj_data.json").read_text())
    data = json.loads((folder / "game.tw-pddl").read_text())
    marker = "Your task is to: "
    grammar = data["grammar"]
    start = grammar.index(marker) + len(marker)
    task_desc = grammar[start : grammar.index('"', start)]
    if task_desc.endswith("."):
        task_desc = task_desc[:-1]
    _, package_grammar = package_logic()
    if package_grammar.replace("UNKNOWN GOAL", task_desc) != grammar:
        raise AgentforgeError(f"{folder}: its grammar is not the package grammar with a task sentence")
    return GameRecord(
        game_id=str(folder.relative_to(root)), split=split, task_type=traj["task_type"],
        pddl_params=traj["pddl_params"], task_desc=task_desc, floor_plan=traj["scene"]["scene_num"],
        pddl_problem=data["pddl_problem"], walkthrough=tuple(data["walkthrough"]),
    )


def pack_split(out: Path, seed: int, split: str, count: int, dest: Path) -> int:
    """Write games 0..count-1 of a split (all must be solved) as the bundled `<split>.jsonl.gz`."""
    records = []
    for index in range(count):
        folder = solved_folder(out, seed, split, index)
        if folder is None:
            raise AgentforgeError(f"{split} game {index} is not generated yet; run `generate` first")
        records.append(read_game_folder(folder, out, split))
    return write_bundle(records, dest)
