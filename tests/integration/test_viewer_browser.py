"""`agentforge view` on a real run, opened in a real headless browser.

A real tiny training run through the CLI (the tiny model on vLLM's CPU engine, real Sokoban, TJPO, a decoding
intervention that forces `</think>\\n<action>`, wandb offline) writes its trajectories; the page made from them is
loaded in Debian's chromium-headless-shell through Playwright: no console errors, no request leaves the page, the
success/failure filters change what is shown, Sokoban rooms render, forced tokens are marked; a screenshot is kept
as a test artifact (under pytest's tmp dir, and in $AGENTFORGE_ARTIFACTS when set).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from viewer_play import expert_run

from agentforge.tracking.trajectories import iteration_files, read_records
from agentforge.viewer import write_page

pytestmark = pytest.mark.integration

CHROMIUM = Path(os.environ.get("AGENTFORGE_CHROMIUM", "/usr/bin/chromium-headless-shell"))
needs_browser = pytest.mark.skipif(
    not CHROMIUM.exists() or importlib.util.find_spec("playwright") is None,
    reason=f"needs a headless Chromium at {CHROMIUM} (apt-get install chromium-headless-shell, or set "
           "AGENTFORGE_CHROMIUM) and playwright (pip install playwright); `make setup` installs both",
)
FORCED = "</think>\n<action>"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer) -> tuple[Path, str]:
    """A real 2-iteration tiny TJPO run on Sokoban through the CLI (about a minute); returns (run dir, its output)."""
    folder = tmp_path_factory.mktemp("viewer_run")
    sequence = tiny_tokenizer.encode(FORCED, add_special_tokens=False)
    unless = tiny_tokenizer.encode("</think>", add_special_tokens=False)
    params = f"sequence: {sequence}, after_tokens: 8, unless_emitted: {unless}"
    intervention = f"{{kind: force_sequence, params: {{{params}}}}}"
    run_dir = folder / "run"
    args = ["train", "recipe=debug", "algorithm=tjpo", "algorithm.descriptor=direction_transition",
            "env_pool.kind=local", "logger.wandb=true", "trainer.iterations=2", "trainer.tasks_per_iteration=2",
            "trainer.group_size=4", "trainer.eval_before=false", "trainer.eval_every=0", "trainer.checkpoint_every=0",
            "agent.max_turns=3", "agent.sampling.max_new_tokens=24", f"agent.intervention={intervention}",
            f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), "WANDB_MODE": "offline"}
    done = subprocess.run([sys.executable, "-m", "agentforge.cli", *args], cwd=folder, capture_output=True, text=True,
                          timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return run_dir, done.stdout + done.stderr


def test_a_training_run_writes_every_iterations_trajectories_with_advantages_and_forced_marks(run, tiny_tokenizer):
    run_dir, stdout = run
    assert f"agentforge view {run_dir}" in stdout  # the run's summary names the viewer
    files = iteration_files(run_dir)
    assert list(files) == [1, 2]
    forced_turns = 0
    for iteration, path in files.items():
        records = read_records(path)
        assert len(records) == 8 and {r["iteration"] for r in records} == {iteration}
        assert sorted({r["group"] for r in records}) == [0, 1]
        for record in records:
            assert "descriptor" in record["meta"] and isinstance(record["meta"]["diversity_credit"], float)
            for turn in record["turns"]:
                assert isinstance(turn["advantage"], float) and "response_ids" not in turn
                for start, end in turn.get("forced", {}).get("chars", []):
                    assert turn["response_text"][start:end] == FORCED  # the marks cover exactly the forced text
                    forced_turns += 1
    assert forced_turns > 0
    tables = list(run_dir.glob("wandb/offline-run-*/files/media/table/trajectories_*.table.json"))
    assert len(tables) == 2
    rows = sum(len(json.loads(t.read_text())["data"]) for t in tables)
    assert rows == sum(len(r["turns"]) for p in files.values() for r in read_records(p))


def open_page(browser, path: Path):
    """Load the page; collect console errors, page errors and every request that is not the page itself."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url) if request.url != path.as_uri() else None)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, requests


def shown(page) -> int:
    return int(page.locator("#visible-count").get_attribute("data-shown"))


def choose(page, outcome: str) -> int:
    page.check(f"input[name=outcome][value={outcome}]")
    return shown(page)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield chromium
        chromium.close()


@needs_browser
def test_the_real_runs_page_loads_cleanly_filters_and_draws_sokoban(run, browser, tmp_path):
    run_dir, _ = run
    done = subprocess.run([sys.executable, "-m", "agentforge.cli", "view", str(run_dir)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path = run_dir / "trajectories.html"
    records = [r for p in iteration_files(run_dir).values() for r in read_records(p)]
    won = sum(bool(r["won"]) for r in records)

    page, errors, requests = open_page(browser, path)
    assert errors == [] and requests == []
    assert shown(page) == len(records) == 16
    assert choose(page, "success") == won and choose(page, "failure") == len(records) - won
    assert choose(page, "all") == len(records)  # whichever way the run went, one filter changed the count
    assert page.locator("#empty-state").is_hidden() == (len(records) > 0)

    first = page.locator("details.traj").first  # open on load
    grid = first.locator("svg.sokoban-grid").first
    box = grid.bounding_box()
    assert box is not None and box["width"] >= 100 and box["height"] >= 100
    assert grid.locator("circle.player").count() == 1 and grid.locator("path.walls").count() == 1
    page.click("#expand-all")
    assert page.locator("mark.forced").first.is_visible()
    shot = tmp_path / "viewer.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000
    if os.environ.get("AGENTFORGE_ARTIFACTS"):
        Path(os.environ["AGENTFORGE_ARTIFACTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["AGENTFORGE_ARTIFACTS"]) / "viewer.png")
    page.close()


@needs_browser
def test_filters_and_sections_on_mixed_outcomes_and_the_other_envs_drawings(browser, tmp_path):
    """Expert play of real tasks, some cut short: known successes and failures in every group."""
    page_path = write_page(expert_run(tmp_path / "sokoban", "sokoban", iterations=2, tasks=2, group_size=3))
    page, errors, requests = open_page(browser, page_path)
    assert errors == [] and requests == []
    assert shown(page) == 12 and choose(page, "success") == 4 and choose(page, "failure") == 8
    assert page.locator("details.traj.won:visible").count() == 0
    page.select_option("#filter-section", "iter-2")
    assert shown(page) == 4 and page.locator("section#iter-1").is_hidden()
    page.close()

    for env_name, selector in (("webshop", ".webshop-page"), ("alfworld", "svg.alfworld-route")):
        if env_name == "alfworld" and importlib.util.find_spec("alfworld") is None:
            continue
        page_path = write_page(expert_run(tmp_path / env_name, env_name, iterations=1, tasks=1, group_size=2))
        page, errors, requests = open_page(browser, page_path)
        assert errors == [] and requests == []
        drawing = page.locator(f"details.traj[open] {selector}").first
        assert drawing.is_visible() and drawing.bounding_box()["height"] > 50
        page.close()
