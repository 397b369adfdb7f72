"""ALFWorld on outside data, on the real engine: broken game files are named (or skipped when asked), Fast Downward
never touches the caller's `sys.argv` nor turns a parse error into a CLI "unrecognized arguments", the expert's
walkthroughs are what the agent could play, an empty folder names the expected layout, and the CLI rejects bad data
in seconds, before the model, the engine and Ray start. Games are bundled ones written out in the real format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("textworld")
pytest.importorskip("alfworld")

from agentforge.envs.alfworld import AlfWorldEnv  # noqa: E402
from agentforge.envs.alfworld.expert import expert_actions  # noqa: E402
from agentforge.envs.alfworld.gamefile import GameFileError  # noqa: E402
from agentforge.envs.alfworld.games import GameRecord, GameSet, bundle_path, load_bundle  # noqa: E402
from agentforge.errors import ConfigError  # noqa: E402
from agentforge.tasks import SPLIT_SEED_BASE  # noqa: E402
from agentforge.types import Task  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CLI_ARGV = ["agentforge train", "command=train", "recipe=gigpo_alfworld"]  # what the CLI's sys.argv looks like


def bundled(count: int = 2) -> list[GameRecord]:
    return list(load_bundle(str(bundle_path("train")), "train")[:count])


def write_game(root: Path, name: str, game: GameRecord, text: str | None = None, **changes: object) -> Path:
    """`root/train/<task>-X-None-Y-1/<name>/` with traj_data.json and a game.tw-pddl (its text, or the game's data
    with `changes`)."""
    folder = root / "train" / f"{game.task_type}-X-None-Y-1" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "traj_data.json").write_text(json.dumps({"task_type": game.task_type, "pddl_params": game.pddl_params}))
    if text is None:
        text = json.dumps({**game.game_data(), **changes})
    (folder / "game.tw-pddl").write_text(text)
    return folder / "game.tw-pddl"


def task(seed: int) -> Task:
    return Task("alfworld", seed, "train")


def task_for(root: Path, trial: str, **options: object) -> Task:
    """The train task that plays the game in folder `trial` (games are taken in path order)."""
    games = GameSet(str(root), **options).games("train")  # type: ignore[arg-type]
    index = next(i for i, g in enumerate(games) if g.game_id.endswith(trial))
    return task(SPLIT_SEED_BASE.get("train", 0) + index)


@pytest.mark.parametrize(("kind", "says"), [("truncated", "truncated"), ("not_json", "not JSON")])
def test_a_truncated_or_non_json_file_is_named_or_skipped_and_the_split_stays_usable(tmp_path, kind, says):
    good, other = bundled()
    write_game(tmp_path, "trial_a_good", good)
    full = json.dumps(other.game_data())
    broken = write_game(tmp_path, "trial_b_broken", other, text=full[: len(full) // 2] if kind == "truncated"
                        else "<html>404 Not Found</html>")
    with pytest.raises(GameFileError) as caught:
        GameSet(str(tmp_path)).games("train")
    assert str(broken) in str(caught.value) and says in str(caught.value)
    assert "skip_broken_games=true" in str(caught.value)

    with pytest.warns(UserWarning, match=str(broken)):
        games = GameSet(str(tmp_path), skip_broken_games=True).games("train")
    assert len(games) == 1 and games[0].path.endswith("trial_a_good/game.tw-pddl")
    env = AlfWorldEnv(data_source=str(tmp_path), skip_broken_games=True)
    try:
        assert "Your task is to:" in env.reset(task(0)).text
    finally:
        env.close()


def test_broken_pddl_is_named_without_touching_sys_argv_and_skipped_when_asked(tmp_path, monkeypatch):
    good, other = bundled()
    write_game(tmp_path, "trial_a_good", good)
    problem = other.game_data()["pddl_problem"]
    unbalanced = write_game(tmp_path, "trial_b_unbalanced", other,
                            pddl_problem=problem.replace("(:init", "(:init (x", 1))
    duplicate = write_game(tmp_path, "trial_c_duplicate", other,  # Fast Downward raises SystemExit for this one
                           pddl_problem=problem.replace("(:objects", "(:objects agent1 - agent", 1))
    monkeypatch.setattr(sys, "argv", list(CLI_ARGV))
    good_task = task_for(tmp_path, "trial_a_good")
    env = AlfWorldEnv(data_source=str(tmp_path))
    try:
        assert "Your task is to:" in env.reset(good_task).text
        assert sys.argv == CLI_ARGV  # Fast Downward sets its own while loading, and gives ours back
        for path, says in ((unbalanced, "ParseError"), (duplicate, "SystemExit")):
            with pytest.raises(GameFileError) as caught:  # never SystemExit, never a raw fast_downward class
                env.reset(task_for(tmp_path, path.parent.name))
            assert str(path) in str(caught.value) and says in str(caught.value)
            assert sys.argv == CLI_ARGV
        assert "Your task is to:" in env.reset(good_task).text  # the env is still usable
    finally:
        env.close()

    skipping = AlfWorldEnv(data_source=str(tmp_path), skip_broken_games=True)
    try:
        with pytest.warns(UserWarning) as record:
            obs = skipping.reset(task_for(tmp_path, "trial_b_unbalanced"))
        warned = " ".join(str(w.message) for w in record)
        assert str(unbalanced) in warned and str(duplicate) in warned  # each broken game named as it is skipped
        assert skipping.game.game_id.endswith("trial_a_good")  # the next game that loads, after the broken ones
        assert "Your task is to:" in obs.text
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # known broken: skipped again without loading (and without a warning)
            skipping.reset(task_for(tmp_path, "trial_b_unbalanced"))
    finally:
        skipping.close()


def test_a_parse_error_in_a_ray_worker_reaches_the_driver_as_a_named_error(tmp_path, monkeypatch):
    """The bug: the worker's fast_downward ParseError, unpickled in the driver, imported Fast Downward's option module
    there, which parsed the CLI's argv and exited with "unrecognized arguments"."""
    pytest.importorskip("ray")
    import ray

    from agentforge.hosting.pool import make_pool

    (game,) = bundled(1)
    broken = write_game(tmp_path, "trial_a_broken", game,
                        pddl_problem=game.game_data()["pddl_problem"].replace("(:init", "(:init (oops", 1))
    monkeypatch.setattr(sys, "argv", list(CLI_ARGV))
    for name in [m for m in sys.modules if m.startswith("fast_downward")]:  # a driver that never loaded it
        monkeypatch.delitem(sys.modules, name)
    ray.init(num_cpus=1, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    pool = make_pool("ray", "alfworld", {"data_source": str(tmp_path)}, num_workers=1)
    try:
        with pytest.raises(GameFileError) as caught:
            pool.reset([task(0)])
        assert str(broken) in str(caught.value) and "ParseError" in str(caught.value)
        assert sys.argv == CLI_ARGV
    finally:
        pool.close()
        ray.shutdown()


def test_walkthrough_steps_the_env_hides_are_not_expert_actions(tmp_path):
    (game,) = bundled(1)
    stored = list(game.walkthrough or ())
    write_game(tmp_path, "trial_a", game, walkthrough=["help", *stored[:2], "help", *stored[2:]])
    actions = expert_actions(task(0), {"data_source": str(tmp_path)})
    assert actions == stored
    env = AlfWorldEnv(data_source=str(tmp_path))
    try:
        env.reset(task(0))
        assert [env.step(a) for a in actions][-1].won
    finally:
        env.close()


def test_a_walkthrough_longer_than_the_step_limit_falls_back_to_the_planner(tmp_path):
    (game,) = bundled(1)
    stored = list(game.walkthrough or ())
    padded = ["look"] * (50 - len(stored) + 5) + stored  # still wins, but only in 55 steps
    write_game(tmp_path, "trial_a", game, walkthrough=padded)
    actions = expert_actions(task(0), {"data_source": str(tmp_path), "max_steps": 50})
    assert actions is not None and len(actions) <= 50 and "look" not in actions
    env = AlfWorldEnv(data_source=str(tmp_path), max_steps=50)
    try:
        env.reset(task(0))
        assert [env.step(a) for a in actions][-1].won
    finally:
        env.close()
    assert expert_actions(task(0), {"data_source": str(tmp_path), "max_steps": len(stored) - 1}) is None


def test_an_empty_folder_names_the_expected_layout(tmp_path, monkeypatch):
    (tmp_path / "json_2.1.1" / "train").mkdir(parents=True)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    for source in ("real", str(tmp_path / "json_2.1.1")):
        with pytest.raises(ConfigError, match=r"\$ALFWORLD_DATA/json_2\.1\.1/<split>/<task>/<trial>/"):
            GameSet(source).games("train")


def run_cli(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "agentforge.cli", *args], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env={**os.environ, **env})
    return result, time.perf_counter() - started


@pytest.mark.parametrize("problem", ["missing ALFWORLD_DATA", "broken game file"])
def test_the_cli_rejects_bad_alfworld_data_in_seconds(tmp_path, problem):
    """Before: the model, the vLLM engine and Ray started (~70 s), and then an env worker failed."""
    if problem == "missing ALFWORLD_DATA":
        source, env, says = "real", {"ALFWORLD_DATA": str(tmp_path / "nowhere")}, "json_2.1.1/<split>/<task>/<trial>"
    else:
        (game,) = bundled(1)
        broken = write_game(tmp_path / "data", "trial_a", game, text='{"pddl_domain": "(define')
        source, env, says = str(tmp_path / "data"), {}, str(broken)
    result, seconds = run_cli("train", "recipe=gigpo_alfworld", f"env.data_source={source}",
                              f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert result.returncode == 2, result.stderr[-2000:]  # a config error (the data it names)
    assert says in result.stderr and "agentforge: config error:" in result.stderr
    assert "unrecognized arguments" not in result.stderr and "Traceback" not in result.stderr
    assert seconds < 30, f"took {seconds:.1f} s"
