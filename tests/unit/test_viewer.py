"""`agentforge view` without a browser: the trajectory records the trainer writes, reading every kind of run dir, the
env drawings on real env output (each env's expert playing real tasks), the page being self-contained, bad input,
and the wandb table."""

from __future__ import annotations

import gzip
import json
import re
import shutil

import pytest
from viewer_play import expert_groups, expert_records, expert_run

from agentforge.cli import main
from agentforge.evaluation.summary import view_hint
from agentforge.tracking.trajectories import (
    char_runs,
    iteration_files,
    read_records,
    table_rows,
    token_runs,
    trajectory_file,
    trajectory_records,
    write_records,
)
from agentforge.types import Group, LossRole, Span, Task, Trajectory, Turn
from agentforge.viewer import ViewerError, load_run, write_page
from agentforge.viewer import alfworld as alfworld_drawing
from agentforge.viewer import sokoban as sokoban_drawing
from agentforge.viewer import webshop as webshop_drawing
from agentforge.viewer.descriptors import descriptor_html
from agentforge.viewer.load import parse_iterations
from agentforge.viewer.render import render_page
from agentforge.viewer.response import marked, split_response

pytestmark = pytest.mark.unit


class CharDecoder:
    """A tokenizer whose token i is the character chr(i): decoding a prefix is exact, so offsets can be checked."""

    def decode(self, token_ids, skip_special_tokens=True):
        return "".join(chr(i) for i in token_ids if not (skip_special_tokens and i == 0))


def text_turn(text: str, forced: list[bool], reward: float = 0.0) -> Turn:
    return Turn(prompt_ids=[1, 2], response_ids=[ord(c) for c in text], logprobs=[-0.5] * len(text),
                forced_mask=forced, response_text=text, action="up", valid=True, reward=reward, env_reward=reward,
                anchor="a", observation="obs")


# ---- records ---------------------------------------------------------------------------------------------------
def test_forced_tokens_become_token_and_character_ranges():
    assert token_runs([False, True, True, False, True]) == [[1, 3], [4, 5]]
    assert token_runs([False, False]) == []
    text = "<think>hm</think><action>up</action>"
    ids = [ord(c) for c in text]
    start = text.index("</think>")
    runs = [[start, start + len("</think><action>")]]
    assert char_runs(ids, runs, text, CharDecoder()) == runs
    assert char_runs(ids, runs, text, None) == []  # no tokenizer: token ranges only
    assert char_runs([0, 0, ord("a")], [[0, 2]], "a", CharDecoder()) == []  # special tokens decode to nothing


def test_records_carry_each_turns_advantage_and_each_trained_spans_in_flat_order():
    task = Task("sokoban", 7)
    text = "<think>go</think><action>up</action>"
    forced = [False] * len(text)
    forced[2:4] = [True, True]
    first = Trajectory(task, 0, [text_turn(text, forced, 1.0), text_turn(text, [False] * len(text))], won=True)
    strategy = Span(LossRole.STRATEGY, "strategy", [1], [ord("s")], [-0.1], "s")
    judgment = Span(LossRole.NOT_TRAINED, "judgment", [1], [ord("j")], [-0.1], "j")
    second = Trajectory(task, 1, [text_turn(text, [False] * len(text))], spans=[strategy, judgment])
    groups = [Group(task, [first]), Group(task, [second])]
    records = trajectory_records(groups, [0.5, -0.5, 2.0], [0.25], CharDecoder())
    assert [r["group"] for r in records] == [0, 1]
    assert [t["advantage"] for r in records for t in r["turns"]] == [0.5, -0.5, 2.0]
    assert records[0]["turns"][0]["forced"] == {"tokens": [[2, 4]], "chars": [[2, 4]]}
    assert "forced" not in records[0]["turns"][1] and records[0]["turns"][0]["response_tokens"] == len(text)
    assert "prompt_ids" not in records[0]["turns"][0]  # no token ids by default (size)
    spans = records[1]["spans"]
    assert spans[0]["advantage"] == 0.25 and "advantage" not in spans[1]  # only trained spans have one
    with_tokens = trajectory_records(groups, [0.5, -0.5, 2.0], [0.25], with_tokens=True)
    assert with_tokens[0]["turns"][0]["response_ids"] == [ord(c) for c in text]
    rows = table_rows(3, records)
    assert len(rows) == 3 and rows[0][0] == 3 and rows[0][-1] == 2 and rows[0][-2] == 0.5


def test_records_round_trip_gzip_and_the_file_is_replaced_whole(tmp_path):
    path = trajectory_file(tmp_path, 3)
    assert path == tmp_path / "trajectories" / "iter_00003.jsonl.gz"
    write_records(path, [{"a": 1}, {"b": {1, 2}}])
    write_records(path, [{"a": 2}])
    assert read_records(path) == [{"a": 2}]
    assert not list(path.parent.glob("*.partial"))
    assert iteration_files(tmp_path) == {3: path}


def test_resume_drops_the_trajectory_files_of_iterations_after_the_checkpoint(tmp_path):
    from agentforge.tracking.tracker import RunTracker

    tracker = RunTracker(tmp_path, {"wandb": False}, {}, resume=True)
    for step in (1, 2, 3):
        tracker.log_trajectories(step, [{"turns": []}])
    tracker.truncate_after(1)
    assert list(iteration_files(tmp_path)) == [1]
    assert read_records(trajectory_file(tmp_path, 1)) == [{"iteration": 1, "turns": []}]


# ---- loading run dirs ------------------------------------------------------------------------------------------
def test_a_train_run_dir_is_read_as_one_section_per_iteration_of_groups(tmp_path):
    run = expert_run(tmp_path / "run", "sokoban", iterations=3, tasks=2, group_size=3)
    view = load_run(run)
    assert view.kind == "train" and view.env == "sokoban" and view.algorithm["name"] == "grpo"
    assert [s.label for s in view.sections] == ["iteration 1", "iteration 2", "iteration 3"]
    section = view.sections[0]
    assert [len(g.trajectories) for g in section.groups] == [3, 3]
    assert [g.successes for g in section.groups] == [1, 1]  # the full expert play wins, the cut ones do not
    assert [s.iteration for s in load_run(run, iterations={1, 3}).sections] == [1, 3]
    assert [s.iteration for s in load_run(run, last=1).sections] == [3]
    assert load_run(run / "trajectories").path == run  # the run's trajectories/ folder stands for the run
    assert parse_iterations("1,5,10-12") == {1, 5, 10, 11, 12} and parse_iterations(None) is None


def test_eval_rollout_and_old_samples_runs_are_read_too(tmp_path):
    records = expert_records("sokoban", tasks=2, group_size=2)
    plain = [{k: v for k, v in r.items() if k != "group"} for r in records]  # eval/rollout write no group index
    lines = "".join(json.dumps(r) + "\n" for r in plain)

    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    (evaluation / "eval.json").write_text(json.dumps({"rows": [{"name": "TJPO (location)"}]}))
    (evaluation / "trajectories.jsonl").write_text(lines)
    (evaluation / "trajectories_disruption.jsonl").write_text(lines)
    view = load_run(evaluation)
    assert view.kind == "eval"
    assert [s.label for s in view.sections] == ["eval: TJPO (location)", "eval: disruption condition"]
    assert [len(g.trajectories) for g in view.sections[0].groups] == [2, 2]  # grouped by task

    rollout = tmp_path / "rollout"
    rollout.mkdir()
    (rollout / "summary.json").write_text("{}")
    (rollout / "trajectories.jsonl").write_text(lines)
    assert [s.label for s in load_run(rollout).sections] == ["rollout"]
    assert load_run(rollout / "trajectories.jsonl").sections[0].label == "trajectories.jsonl"

    old = tmp_path / "old_train"
    old.mkdir()
    (old / "config.yaml").write_text("command: train\nenv:\n  name: sokoban\n")
    (old / "samples.jsonl").write_text("".join(json.dumps({"iteration": i, **plain[0]}) + "\n" for i in (1, 2)))
    view = load_run(old)
    assert [s.label for s in view.sections] == ["iteration 1 (samples)", "iteration 2 (samples)"]
    assert "samples.jsonl" in view.notes[0]


@pytest.mark.parametrize(("setup", "message"), [
    ("missing", "does not exist"),
    ("empty", "is not an agentforge run dir"),
    ("sweep", "is a folder of runs"),
    ("no_trajectories", "run dir without trajectories"),
    ("corrupt", "not a readable trajectories file"),
    ("text_file", "not a trajectories .jsonl"),
    ("iterations", "none of those asked for"),
])
def test_bad_input_names_the_problem_and_the_fix(tmp_path, setup, message):
    path = tmp_path / "x"
    if setup == "empty":
        path.mkdir()
    elif setup == "sweep":
        for job in ("0", "1"):
            (path / job).mkdir(parents=True)
            (path / job / "config.yaml").write_text("command: train\n")
    elif setup == "no_trajectories":
        path.mkdir()
        (path / "config.yaml").write_text("command: train\n")
        (path / "metrics.jsonl").write_text("")
    elif setup == "corrupt":
        trajectory_file(path, 1).parent.mkdir(parents=True)
        trajectory_file(path, 1).write_bytes(gzip.compress(b'{"task": {}}\n')[:12])
    elif setup == "text_file":
        path = tmp_path / "notes.txt"
        path.write_text("hello")
    elif setup == "iterations":
        expert_run(path, "sokoban", iterations=2, tasks=1, group_size=2)
    with pytest.raises(ViewerError, match=message):
        load_run(path, iterations={9} if setup == "iterations" else None)


def test_the_cli_writes_the_page_and_reports_bad_input(tmp_path, capsys):
    run = expert_run(tmp_path / "run", "sokoban", iterations=1, tasks=1, group_size=2)
    assert main(["view", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{run / 'trajectories.html'}" in out and (run / "trajectories.html").stat().st_size > 1000
    assert main(["view", str(run), "-o", str(tmp_path / "page.html"), "--last", "1"]) == 0
    assert (tmp_path / "page.html").exists()
    assert main(["view", str(tmp_path / "nowhere")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert view_hint(run) == f"agentforge view {run}  (writes {run}/trajectories.html)"


# ---- drawings on real env output -------------------------------------------------------------------------------
def test_sokoban_rooms_are_drawn_from_the_observation_and_the_last_move_is_replayed():
    groups = expert_groups("sokoban", tasks=1, group_size=1)
    won = groups[0].trajectories[0]
    first = won.turns[0].observation
    rows = sokoban_drawing.parse_grid(first)
    assert rows is not None and len(rows) == 6 and all(len(r) == 6 for r in rows)
    svg = str(sokoban_drawing.grid_svg(rows))
    assert svg.count('class="player"') == 1 and svg.count('class="box"') == 1 and svg.count('class="target"') == 1
    assert sokoban_drawing.parse_grid("You see nothing special.") is None
    last = won.turns[-1]
    after = sokoban_drawing.after_last_move(last.observation, last.action, executed=True)
    assert after is not None and "√" in "".join(after)  # the expert's last push puts the box on its target
    assert "√" not in "".join(sokoban_drawing.after_last_move(last.observation, last.action, executed=False))


def test_webshop_pages_are_drawn_with_products_options_and_the_click_outlined():
    groups = expert_groups("webshop", tasks=1, group_size=1)
    turns = groups[0].trajectories[0].turns
    search, results, item = (t.observation for t in turns[:3])
    assert 'class="ws-search"' in webshop_drawing.page_html(search, turns[0].action)
    page = str(webshop_drawing.page_html(results, turns[1].action))
    asins = re.findall(r"\bB0[A-Z0-9]{8}\b", results)
    assert page.count('class="ws-product') == len(asins) and page.count("ws-clicked") == 1
    item_page = str(webshop_drawing.page_html(item, "click[buy now]"))
    assert 'class="ws-item-title"' in item_page and 'ws-button ws-clicked">Buy Now' in item_page


def test_alfworld_routes_are_a_graph_of_the_visited_locations():
    pytest.importorskip("alfworld", reason="ALFWorld's engine is not installed (make setup installs it)")
    groups = expert_groups("alfworld", tasks=1, group_size=1)
    records = trajectory_records(groups)
    turns = records[0]["turns"]
    room = alfworld_drawing.room_locations(turns[0]["observation"])
    assert len(room) >= 5 and all(re.search(r"\d$", name) for name in room)
    steps = alfworld_drawing.route(turns)
    expected = [t.action[len("go to "):] for t in groups[0].trajectories[0].turns if t.action.startswith("go to ")]
    assert [location for _, location in steps] == expected
    svg = str(alfworld_drawing.route_svg(turns, turns[0]["observation"], uid="t"))
    assert svg.count('class="move"') == len(expected)
    assert svg.count('class="location visited"') == len(set(expected))
    assert 'marker-end="url(#arrow-t)"' in svg


def test_descriptors_are_drawn_by_what_they_count():
    transitions = [0.0] * 16
    transitions[1] = 1.0  # up -> down
    table = str(descriptor_html("direction_transition", transitions))
    assert table.count("<td") == 16 and 'title="up → down: 1.000"' in table
    rows = ["####", "#P_#", "####"]
    coverage = str(descriptor_html("spatial_coverage", [0, 0, 0, 0, 0, 0.5, 0.5, 0, 0, 0, 0, 0], rows))
    assert "coverage" in coverage and coverage.count("<td") == 12
    bars = str(descriptor_html("my.pkg:tool_use", [0.25, 0.0, 0.75]))
    assert bars.count('class="bar-row"') == 2  # zeros left out


def test_responses_are_split_into_reasoning_and_action_with_forced_characters_marked():
    text = "<think>plan</think>\n<action>up</action>"
    parts = split_response(text)
    assert text[slice(*parts.reasoning)] == "plan" and text[slice(*parts.action)] == "up"
    start = text.index("</think>")
    html = str(marked(text, [[start, start + 8]]))
    assert '<mark class="forced"' in html and "&lt;/think&gt;</mark>" in html
    assert split_response("no tags").reasoning is None


# ---- the page --------------------------------------------------------------------------------------------------
def test_the_page_is_self_contained_and_shows_every_trajectory(tmp_path):
    run = expert_run(tmp_path / "run", "sokoban", iterations=2, tasks=2, group_size=3)
    page = write_page(run).read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # no CDN, no network
    assert "<link" not in page and "@import" not in page and "<script src" not in page
    assert page.count('class="traj ') == 12
    assert page.count('data-outcome="success"') == 4 and page.count('data-outcome="failure"') == 8
    assert page.count('class="sokoban-grid"') > 12  # a room per turn plus each final position
    assert 'id="filter-outcome"' in page and "<script>" in page


def test_tjpo_and_strata_information_is_on_the_page(tmp_path):
    records = expert_records("sokoban", tasks=1, group_size=2)
    records[0]["meta"].update(descriptor={"direction_transition": [0.0] * 15 + [1.0]}, diversity_credit=0.71,
                              strategy_index=0, strategy="Push the box right.", strategy_reward=0.5,
                              strategy_format_ok=True, judgment="ok", flagged_steps=[1],
                              strata_rewards=[0.4] * len(records[0]["turns"]))
    records[0]["turns"][0]["info"]["flagged"] = True
    records[0]["spans"] = [{"role": "strategy", "kind": "strategy", "text": "Push the box right.",
                            "advantage": 0.8, "info": {"candidate": 0}, "turn_index": None},
                           {"role": "not_trained", "kind": "judgment", "text": "1", "info": {}, "turn_index": None},
                           {"role": "not_trained", "kind": "discarded_turn", "text": "retry me", "turn_index": 0,
                            "info": {"attempt": 0}}]
    run = tmp_path / "run"
    write_records(trajectory_file(run, 1), records)
    page = render_page(load_run(run))
    assert "TJPO credit <span class=\"num pos\">+0.71</span>" in page and "descriptor <b>direction_transition" in page
    assert "Push the box right." in page and "flagged by judgment" in page and "judged redundant: step 1" in page
    assert "discarded attempt 0" in page and "retry me" in page and "StraTA step reward" in page


# ---- wandb -----------------------------------------------------------------------------------------------------
def test_trajectories_are_logged_as_a_wandb_table_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from agentforge.tracking.tracker import RunTracker

    monkeypatch.delenv("WANDB_MODE", raising=False)
    records = expert_records("sokoban", tasks=1, group_size=2)
    tracker = RunTracker(tmp_path, {"wandb": True, "wandb_mode": "offline", "project": "viewer-test"}, {}, False)
    try:
        tracker.log_trajectories(1, records)
    finally:
        tracker.close()
    tables = list(tmp_path.glob("wandb/offline-run-*/files/media/table/trajectories_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    assert table["columns"][:3] == ["iteration", "group", "task"]
    assert len(table["data"]) == sum(len(r["turns"]) for r in records)
    assert trajectory_file(tmp_path, 1).exists()
    shutil.rmtree(tmp_path / "wandb", ignore_errors=True)


def test_each_env_names_its_own_drawing_and_a_plugin_env_can_bring_one():
    from markupsafe import Markup

    from agentforge.envs.base import ENVS
    from agentforge.viewer import drawings

    assert drawings.drawing_for_env("sokoban") is sokoban_drawing.DRAWING
    assert drawings.drawing_for_env("alfworld_intervention") is alfworld_drawing.DRAWING  # drawn as ALFWorld
    assert drawings.family("search_qa") == "" and drawings.turn_drawing("search_qa", {"observation": "q"}) is None
    assert drawings.family("not-an-env") == ""  # a record from a plugin env not installed here: text alone
    record = {"turns": [{"observation": "anything"}]}

    @ENVS.register("viewer_plugin_env_test")
    class PluginEnv:
        drawing = drawings.EnvDrawing(family="plugin", turn=lambda turn: Markup("<b>drawn</b>"),
                                      episode=lambda record, uid: ("the end", Markup("<i>end</i>")))

    try:
        assert str(drawings.turn_drawing("viewer_plugin_env_test", record["turns"][0])) == "<b>drawn</b>"
        assert drawings.trajectory_drawing("viewer_plugin_env_test", record, "u")[0] == "the end"
        assert drawings.room_rows("viewer_plugin_env_test", record) is None
    finally:
        ENVS._items.pop("viewer_plugin_env_test", None)
        drawings.drawing_for_env.cache_clear()
