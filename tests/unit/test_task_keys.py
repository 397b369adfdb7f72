"""Task keys (issue 55, held-out means held out): every env keys what a task *is*, so two seeds with the same content
give one key and different content different keys; and training streams drawn long enough to collide with the
held-out sets skip every held-out content (Sokoban, reasoning-gym, FrozenLake, a dataset env, a curriculum, a mix).

Each env's key is checked against an oracle that does not use it (the room or question reset shows, the game's
secret, the dataset row), over seeds that repeat content, so a key that keeps the seed or drops content fails."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentforge.envs.base import ENVS, make_env
from agentforge.envs.task_keys import TaskKeyer, digest, reserve_held_out
from agentforge.tasks import SPLIT_SEED_BASE, TaskSampler, task_sampler
from agentforge.tasks.held_out import HeldOut, TrainingFilter
from agentforge.training.curriculum import CurriculumSampler, CurriculumSettings
from agentforge.types import Observation, StepResult, Task

pytestmark = pytest.mark.unit

SOKOBAN = {"dim_room": [6, 6], "num_gen_steps": 5}
ARITHMETIC = {"task": "basic_arithmetic", "difficulty": 0}
LAKES = {"map_per_seed": 4, "kwargs": {"is_slippery": False}}


@pytest.fixture(autouse=True)
def key_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Keys cached under the test's folder: no test reads another run's keys."""
    monkeypatch.setenv("AGENTFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tasks(env: str, seeds: Sequence[int], split: str = "train") -> list[Task]:
    return [Task(env, SPLIT_SEED_BASE[split] + seed, split) for seed in seeds]


def assert_keys_are_content(keys: Sequence[str], contents: Sequence[Hashable], prefix: str) -> None:
    """Keys partition the tasks exactly as the oracle's contents do (equal key iff equal content), carry the env's
    prefix, and some different seeds share a key (the seeds given repeat content: no seed in the key)."""
    assert all(key.startswith(prefix) for key in keys)
    for (k1, c1), (k2, c2) in itertools.combinations(zip(keys, contents, strict=True), 2):
        assert (k1 == k2) == (c1 == c2), (k1, k2, c1, c2)
    assert len(set(keys)) < len(keys)


def same_twice(env_factory: Callable[[], Any], task: Task) -> None:
    """A key is a function of the task: the same in a second, fresh env, and asked twice of one env."""
    first, second = env_factory(), env_factory()
    assert first.task_key(task) == first.task_key(task) == second.task_key(task)


# -- each env's key ----------------------------------------------------------------------------------------------
def test_sokoban_key_is_the_room_shown() -> None:
    env = make_env("sokoban", SOKOBAN)
    sample = tasks("sokoban", range(120))
    assert_keys_are_content([env.task_key(t) for t in sample], [env.reset(t).text for t in sample], "sokoban:")
    same_twice(lambda: make_env("sokoban", SOKOBAN), sample[3])


def search_data(folder: Path, splits: dict[str, list[str]]) -> Path:
    """A search-QA data folder: a one-passage corpus and the given questions per split."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"id": "0", "contents": '"Title"\nSome text.'}) + "\n")
    for split, questions in splits.items():
        rows = [json.dumps({"question": q, "golden_answers": [f"a{i}"]}) for i, q in enumerate(questions)]
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return folder


def test_search_qa_key_is_the_question_normalised(tmp_path: Path) -> None:
    questions = ["Who wrote Hamlet?", "who  wrote HAMLET?", "Where is Kyoto?", "Who wrote Hamlet? ", "When?"]
    folder = search_data(tmp_path / "qa", {"train": questions, "eval": ["Where is Kyoto?"], "test": ["When?"]})
    env = make_env("search_qa", {"data_dir": str(folder)})
    sample = tasks("search_qa", range(10))  # two passes over the five rows
    shown = [" ".join(env.reset(t).text.splitlines()[0].casefold().split()) for t in sample]
    assert_keys_are_content([env.task_key(t) for t in sample], shown, "search_qa:")
    assert len({env.task_key(t) for t in sample}) == 3
    # the same question in another split is the same task: what the held-out filter keeps out of training
    assert env.task_key(tasks("search_qa", [0], "eval")[0]) == env.task_key(sample[2])
    same_twice(lambda: make_env("search_qa", {"data_dir": str(folder)}), sample[1])


def test_webshop_key_is_the_instruction_and_what_is_scored_not_the_product() -> None:
    from agentforge.envs.webshop.env import goal_key

    env = make_env("webshop", {})
    goals = env.catalog.split("train")
    sample = tasks("webshop", range(len(goals) + 5))  # the split and five seeds that wrap round to its start
    keys = [env.task_key(t) for t in sample]
    assert_keys_are_content(keys, [env.reset(t).text for t in sample], "webshop:")
    assert keys[:5] == keys[len(goals):]
    goal = goals[0]
    assert goal_key(goal) == goal_key(dataclasses.replace(goal, asin="B000000000", name="another product"))
    assert goal_key(goal) == goal_key(dataclasses.replace(goal, instruction_text=goal.instruction_text.upper()))
    for changed in ({"options": ("teal",)}, {"attributes": ("vegan",)}, {"price_upper": goal.price_upper + 10},
                    {"instruction_text": goal.instruction_text + " now"}):
        assert goal_key(dataclasses.replace(goal, **changed)) != goal_key(goal)
    same_twice(lambda: make_env("webshop", {}), sample[7])


def copy_game(record: Any, root: Path, folder: str) -> None:
    """A bundled game written out in ALFWorld's own folder format."""
    trial = root / "train" / folder / "trial_1"
    trial.mkdir(parents=True)
    (trial / "traj_data.json").write_text(json.dumps({"task_type": record.task_type,
                                                      "pddl_params": record.pddl_params}))
    (trial / "game.tw-pddl").write_text(json.dumps(record.game_data()))


def test_alfworld_key_is_the_game_content_not_its_path(tmp_path: Path) -> None:
    env = make_env("alfworld", {})
    train = env.games.games("train")
    keys = [env.task_key(t) for t in tasks("alfworld", range(len(train) + 3))]
    assert all(k.startswith("alfworld:") for k in keys)
    assert len(set(keys)) == len(train) and keys[:3] == keys[len(train):]  # distinct games; seeds wrap round
    held = {env.task_key(t) for split in ("eval", "test") for t in tasks("alfworld", range(80), split)}
    assert len(held) == 160 and not held & set(keys)  # ALFWorld's valid splits are other games
    # the same game in two folders (and bundled) is one task; a changed problem is another
    record = train[0]
    copy_game(record, tmp_path, f"{record.task_type}-A-None-B-1")
    copy_game(record, tmp_path, f"{record.task_type}-C-None-D-2")
    changed = dataclasses.replace(record, pddl_problem=record.pddl_problem.replace("(:init", "(:init\n", 1))
    copy_game(changed, tmp_path, f"{record.task_type}-E-None-F-3")
    folder_env = make_env("alfworld", {"data_source": str(tmp_path)})
    copied = [folder_env.task_key(t) for t in tasks("alfworld", range(3))]
    assert copied[0] == copied[1] == keys[0] != copied[2]
    same_twice(lambda: make_env("alfworld", {}), tasks("alfworld", [5])[0])


def test_alfworld_intervention_key_is_case_and_condition() -> None:
    env = make_env("alfworld_intervention", {})
    count = len(env.cases)
    keys = [env.task_key(t) for t in tasks("alfworld_intervention", range(count + 2))]
    cases = [env.case_for(t) for t in tasks("alfworld_intervention", range(count + 2))]
    assert_keys_are_content(keys, [(c.game_id, c.category) for c in cases], "alfworld_intervention:standard:")
    other = make_env("alfworld_intervention", {"condition": "disruption"})
    assert other.task_key(Task("alfworld_intervention", 0)) != keys[0]
    assert keys[0].endswith(env.env.game_key(env.game_for(cases[0])))


def test_scienceworld_key_is_task_and_variation_from_one_keying_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH")
    import agentforge.envs.scienceworld.jvm as jvm
    from agentforge.envs.scienceworld.tasks import split_variations

    started = []
    real_start = jvm.start_simulator
    monkeypatch.setattr(jvm, "start_simulator", lambda *a, **k: started.append(1) or real_start(*a, **k))
    env = make_env("scienceworld", {"task_names": ["chemistry-mix"]})
    train = [env.task_key(t) for t in tasks("scienceworld", range(40))]
    lists = split_variations(None, "chemistry-mix")  # cached by the keying: no simulator needed
    assert train == [f"scienceworld:chemistry-mix:{lists['train'][i % len(lists['train'])]}" for i in range(40)]
    dev = {make_env("scienceworld", {"task_names": ["melt", "chemistry-mix"]}).task_key(t)
           for t in tasks("scienceworld", range(40), "eval")}
    assert not dev & set(train)  # the package's dev variations are not its train ones
    assert len(started) <= 1 and env.jvm_pid is None  # one keying JVM per process; the env's own never started


def test_reasoning_gym_key_is_question_and_answer() -> None:
    pytest.importorskip("reasoning_gym")
    env = make_env("reasoning_gym", ARITHMETIC)
    sample = tasks("reasoning_gym", range(300))
    contents = []
    for task in sample:
        question = env.reset(task).text
        contents.append((question, env.expert_answer()))
    assert_keys_are_content([env.task_key(t) for t in sample], contents, "reasoning_gym:basic_arithmetic:")
    same_twice(lambda: make_env("reasoning_gym", ARITHMETIC), sample[9])


def test_gym_key_is_the_lake_or_the_start() -> None:
    pytest.importorskip("gymnasium")
    env = make_env("gym", LAKES)
    sample = tasks("gym", range(200))
    lakes = []
    for task in sample:
        env.reset(task)
        lakes.append(tuple(tuple(row) for row in env._env.unwrapped.desc.tolist()))
    assert_keys_are_content([env.task_key(t) for t in sample], lakes, "gym:FrozenLake-v1:")
    taxi = make_env("gym", {"id": "Taxi-v4"})
    starts = []
    for task in sample[:60]:
        taxi.reset(task)
        starts.append(int(taxi._env.unwrapped.s))  # taxi, passenger and destination: the render shows no colours
    assert_keys_are_content([taxi.task_key(t) for t in sample[:60]], starts, "gym:Taxi-v4:")
    same_twice(lambda: make_env("gym", LAKES), sample[4])


def test_gem_key_is_the_game_state_not_the_instruction_text() -> None:
    pytest.importorskip("gem")
    options = {"id": "game:GuessTheNumber-v0-easy"}
    env, player = make_env("gem", options), make_env("gem", options)
    sample = tasks("gem", range(40))
    secrets, texts = [], []
    for task in sample:
        texts.append(player.reset(task).text)
        secrets.append(player._env.unwrapped.game_number)
    keys = [env.task_key(t) for t in sample]
    assert_keys_are_content(keys, secrets, "gem:game:GuessTheNumber-v0-easy:")
    # the instructions show a random example guess: same secret, other text (a text key would miss the repeat)
    assert any(k1 == k2 and t1 != t2 for (k1, t1), (k2, t2) in itertools.combinations(zip(keys, texts, strict=True), 2))
    rows = make_env("gem", {"id": "rg:basic_arithmetic"})
    first = rows.task_key(sample[0])
    for task in tasks("gem", range(1, 600)):  # past GEM's dataset swap after 500 resets of one env
        rows.task_key(task)
    assert rows.task_key(sample[0]) == first == make_env("gem", {"id": "rg:basic_arithmetic"}).task_key(sample[0])


def test_textarena_key_is_the_game_state_and_side() -> None:
    pytest.importorskip("textarena")
    options = {"id": "GuessTheNumber-v0"}
    env, player = make_env("textarena", options), make_env("textarena", options)
    sample = tasks("textarena", range(60))
    secrets = []
    for task in sample:
        player.reset(task)
        secrets.append(player._env.state.game_state["game_number"])
    assert_keys_are_content([env.task_key(t) for t in sample], secrets, "textarena:GuessTheNumber-v0:")
    sides = make_env("textarena", {"id": "Nim-v0", "player": -1})
    assert sides.task_key(Task("textarena", 0)) != sides.task_key(Task("textarena", 1)) == \
        sides.task_key(Task("textarena", 3))  # one board, the policy's side by seed parity


def test_verifiers_key_is_the_row_prompt_and_answer() -> None:
    pytest.importorskip("verifiers")
    env = make_env("verifiers", {})
    rows = len(env.dataset("train"))
    sample = [Task("verifiers", seed) for seed in range(rows + 3)]
    contents = [(json.dumps(env.row_for(t)["prompt"]), env.row_for(t)["answer"]) for t in sample]
    keys = [env.task_key(t) for t in sample]
    assert_keys_are_content(keys, contents, "verifiers:")
    assert keys[:3] == keys[rows:]
    # the example's eval rows repeat its train rows' content: held out by seed, they would not be held out
    assert {env.task_key(t) for t in tasks("verifiers", range(50), "eval")} <= set(keys)


class Unkeyed:
    """An env that says nothing about its tasks' content."""

    def __init__(self) -> None:
        self.seed = 0

    def reset(self, task: Task) -> Observation:
        self.seed = task.seed
        return Observation(text=str(task.seed), anchor=task.seed)

    def step(self, action: str) -> StepResult:
        return StepResult(Observation(text="", anchor=0), 0.0, True, False)

    def close(self) -> None:
        pass


class CannotKey(Unkeyed):
    task_key_note = "its tasks come from a live service"

    def task_key(self, task: Task) -> str | None:
        return None


UNKEYED, CANNOT_KEY = "task_keys_test_unkeyed", "task_keys_test_cannot_key"
for _name, _class in ((UNKEYED, Unkeyed), (CANNOT_KEY, CannotKey)):
    if _name not in ENVS:
        ENVS.register(_name)(_class)


def test_agent_env_keys_its_task_env_and_says_when_it_cannot() -> None:
    agent = make_env("agent", {"task_env": "search_qa"})
    search = make_env("search_qa", {})
    for task in tasks("agent", range(5), "eval"):
        assert agent.task_key(task) == search.task_key(dataclasses.replace(task, env="search_qa"))
    keyer = TaskKeyer("agent", {"task_env": UNKEYED}, use_cache=False)
    assert not keyer.keyed and UNKEYED in keyer.note and "does not say what its tasks contain" in keyer.note
    assert keyer.key(Task("agent", 7)) == "seed:agent:train:7"


# -- what the keyer reports ---------------------------------------------------------------------------------------
def test_an_env_without_task_key_and_one_that_cannot_key_are_reported_and_fall_back_to_seeds() -> None:
    held_out, keyer = reserve_held_out(UNKEYED, {}, reserve=4)
    keyer.close()
    assert not held_out.keyed and "no task_key method" in held_out.note
    assert [t.seed for t in held_out.tasks("eval", 4)] == [SPLIT_SEED_BASE["eval"] + i for i in range(4)]
    cannot = TaskKeyer(CANNOT_KEY, {}, use_cache=False)
    assert not cannot.keyed and "its tasks come from a live service" in cannot.note


@pytest.mark.parametrize("env,options", [
    ("gym", {"id": "FrozenLake-v1"}),  # the id's fixed map: seeds change only the slips
    ("textarena", {"id": "TicTacToe-v0"}),  # an empty board whatever the seed
    ("gem", {"id": "game:Minesweeper-v0-easy"}),  # mines are laid at the first reveal
])
def test_a_start_that_does_not_depend_on_the_seed_is_reported(env: str, options: dict[str, Any]) -> None:
    pytest.importorskip({"gym": "gymnasium", "textarena": "textarena", "gem": "gem"}[env])
    keyer = TaskKeyer(env, options, use_cache=False)
    assert not keyer.keyed and "does not depend on the seed" in keyer.note
    assert keyer.key(Task(env, 3)) != keyer.key(Task(env, 4))  # seeds, then, as before


def test_keys_are_cached_per_env_and_options(key_cache: Path) -> None:
    keyer = TaskKeyer("sokoban", SOKOBAN)
    key = keyer.key(Task("sokoban", 5))
    keyer.save()
    files = list((key_cache / "task_keys").glob("sokoban-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["sokoban:train:5"] == key
    again = TaskKeyer("sokoban", SOKOBAN)
    assert again.key(Task("sokoban", 5)) == key and again._new == 0  # read, not recomputed


# -- training streams that collide with the held-out sets --------------------------------------------------------
def assert_held_out_kept_out(held_out: HeldOut, keyer: Any, drawn: list[Task], filt: TrainingFilter,
                             reserve: int) -> dict[str, dict[str, Any]]:
    """No drawn task is held-out content; eval and test are disjoint and have no repeats; each reports requested
    vs distinct. Returns the splits' reports."""
    assert filt.skipped > 0  # the stream did collide
    by_split = {split: {d for found in held_out.sets[split].values() for d in found.digests}
                for split in ("eval", "test")}
    assert not by_split["eval"] & by_split["test"]
    drawn_digests = {digest(keyer.key(t)) for t in drawn}
    assert not drawn_digests & (by_split["eval"] | by_split["test"])
    assert filt.trained == drawn_digests
    reports = {}
    for split, by_env in held_out.sets.items():
        for env, found in by_env.items():
            assert len(found.digests) == len(set(found.digests)) == len(found.tasks)
            report = found.to_json()
            assert report["requested"] == reserve and report["distinct"] == len(found.tasks) <= reserve
            reports[f"{split}/{env}"] = report
    return reports


def draw(env: str, options: dict[str, Any], count: int, reserve: int = 256
         ) -> tuple[HeldOut, Any, list[Task], TrainingFilter, Any]:
    held_out, keyer = reserve_held_out(env, options, reserve=reserve)
    filt = TrainingFilter(keyer.key, digest, held_out.reserved())
    sampler = task_sampler(env, options, "train", admit=filt.admit)
    drawn = sampler.sample(count)
    assert len(drawn) == count and sampler.position == count + filt.skipped
    return held_out, keyer, drawn, filt, sampler


def test_sokoban_stream_of_10000_rooms_skips_every_held_out_room() -> None:
    held_out, keyer, drawn, filt, _ = draw("sokoban", SOKOBAN, 10_000)
    reports = assert_held_out_kept_out(held_out, keyer, drawn, filt, 256)
    assert reports["test/sokoban"]["repeats_skipped"] > 0 and reports["eval/sokoban"]["in_other_split_skipped"] > 0
    assert filt.skipped > 1_000  # a 6x6 room of 5 walk steps is often a held-out one (measured: ~9,200)
    # an oracle that is not the key: the rooms reset shows (the first 300 drawn against every held-out room)
    env = make_env("sokoban", SOKOBAN)
    held = {env.reset(t).text for split in ("eval", "test") for t in held_out.tasks(split, 256)}
    assert not {env.reset(t).text for t in drawn[:300]} & held
    keyer.close()


def test_arithmetic_stream_of_10000_questions_skips_every_held_out_question() -> None:
    pytest.importorskip("reasoning_gym")
    held_out, keyer, drawn, filt, _ = draw("reasoning_gym", ARITHMETIC, 10_000)
    assert_held_out_kept_out(held_out, keyer, drawn, filt, 256)
    env = make_env("reasoning_gym", ARITHMETIC)
    held = {env.reset(t).text for split in ("eval", "test") for t in held_out.tasks(split, 256)}
    assert not {env.reset(t).text for t in drawn[:1000]} & held
    keyer.close()


def test_frozenlake_stream_skips_every_held_out_lake() -> None:
    pytest.importorskip("gymnasium")
    held_out, keyer, drawn, filt, _ = draw("gym", LAKES, 2_000)
    assert_held_out_kept_out(held_out, keyer, drawn, filt, 256)
    assert filt.skipped > 1_000  # 512 reserved lakes are most of the 4x4 lakes drawn (measured: 4,505 skipped)
    keyer.close()


def test_dataset_stream_skips_held_out_questions_a_train_file_repeats(tmp_path: Path) -> None:
    """search QA on data whose train file repeats eval and test questions (recased), as real QA sets do, and whose
    eval and test files share one: the held-out sets report fewer distinct than requested, and training skips."""
    evals = [f"Eval question {i}?" for i in range(12)]
    tests = [f"Test question {i}?" for i in range(10)] + [evals[0]]
    train = [f"Train question {i}?" for i in range(30)] + [q.upper() for q in evals[:4]] + [f" {tests[2]}"]
    folder = search_data(tmp_path / "qa", {"train": train, "eval": evals, "test": tests})
    options = {"data_dir": str(folder)}
    held_out, keyer, drawn, filt, _ = draw("search_qa", options, 300)
    reports = assert_held_out_kept_out(held_out, keyer, drawn, filt, 256)
    assert reports["test/search_qa"]["distinct"] == 11 and reports["eval/search_qa"]["distinct"] == 11
    assert reports["eval/search_qa"]["in_other_split_skipped"] > 0  # eval's first question is test's
    env = make_env("search_qa", options)
    shown = {" ".join(env.reset(t).text.splitlines()[0].casefold().split()) for t in drawn}
    assert len(shown) == 30 and not any("eval" in q or "test" in q for q in shown)
    assert filt.skipped == 5 * 9  # 5 held-out rows in each pass over the 35 before the 300th kept task
    keyer.close()


def test_a_curriculum_over_a_filtered_sampler_keys_rooms_with_their_level() -> None:
    held_out, keyer = reserve_held_out("sokoban", SOKOBAN, reserve=256)
    filt = TrainingFilter(keyer.key, digest, held_out.reserved())
    settings = CurriculumSettings("num_gen_steps", (3, 5))
    curriculum = CurriculumSampler(TaskSampler("sokoban", admit=filt.admit), settings, total_tasks=2_000)
    drawn = [t for _ in range(20) for t in curriculum.sample(100)]
    assert {t.options for t in drawn} == {(("num_gen_steps", 3),), (("num_gen_steps", 5),)}
    reserved = held_out.reserved()
    assert filt.skipped > 0 and not {digest(keyer.key(t)) for t in drawn} & reserved
    level3 = make_env("sokoban", {**SOKOBAN, "num_gen_steps": 3})
    easy = [t for t in drawn if t.options == (("num_gen_steps", 3),)][:50]
    assert [keyer.key(t) for t in easy] == [level3.task_key(t) for t in easy]  # keyed as played: with its level
    plain = make_env("sokoban", SOKOBAN)
    assert any(level3.task_key(t) != plain.task_key(t) for t in easy)  # the level changes the room
    keyer.close()


def test_mix_keys_each_member_by_its_own_keyer() -> None:
    members = {"sokoban": {"weight": 1.0, **SOKOBAN}, "search_qa": {"weight": 1.0}}
    held_out, keyer, drawn, filt, _ = draw("mix", {"envs": members}, 2_000, reserve=64)
    assert set(keyer.members) == {"sokoban", "search_qa"}
    assert keyer.members["sokoban"].options == SOKOBAN and keyer.members["search_qa"].options == {}
    for task in drawn[:20]:
        assert keyer.key(task).startswith(f"{task.env}:")
        assert keyer.key(task) == make_env(task.env, keyer.members[task.env].options).task_key(task)
    assert_held_out_kept_out(held_out, keyer, drawn, filt, 64)
    assert {t.env for t in drawn} == {"sokoban", "search_qa"}
    keyer.close()
