"""Shared fixtures. Models are built once into the agentforge cache ($AGENTFORGE_CACHE or ~/.cache/agentforge)
and reused across runs."""

from __future__ import annotations

import os

# Under pytest-xdist (`make test` runs `-n auto`) each worker gets its share of the cores for its torch/vLLM threads
# and its subprocesses, so two workers do not run two OpenMP threads each on two cores (measured within noise on a
# 5-file subset: 264 s against 283 s; kept to avoid oversubscription). Set before anything imports torch.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(_share)

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from agentforge.models import ModelSpec, load_tokenizer, resolve_model  # noqa: E402

# One training iteration on the tiny fp32 model, in-process envs, an eval after it, no checkpoint: what an
# algorithm's end-to-end wiring test needs (it adds its recipe and its own overrides).
TINY_TRAIN = [
    "model=tiny", "command=train", "logger.wandb=false", "env_pool.kind=local", "model.dtype=float32",
    "engine.dtype=float32", "learner.dtype=float32", "trainer.iterations=1", "trainer.tasks_per_iteration=2",
    "trainer.eval_before=false", "trainer.eval_every=1", "trainer.eval_tasks=2", "trainer.checkpoint_every=0",
    "agent.max_turns=2",
]


@pytest.fixture(scope="session", autouse=True)
def shared_rollout_engine():
    """Runs in this process with the same engine settings share one vLLM engine (agentforge.engines.shared): the
    suite makes dozens of runs, and each used to start an engine of its own. Subprocess runs are unaffected."""
    from agentforge.engines import shared

    shared.enable(True)
    yield
    shared.enable(False)


@pytest.fixture(scope="session")
def tiny_spec() -> ModelSpec:
    """The tiny 2-layer Llama with the SmolLM2 tokenizer, fp32 (built on first use, under a second after that)."""
    return resolve_model({"name": "tiny", "dtype": "float32"})


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_spec: ModelSpec) -> Path:
    """The tiny model's HF folder (config, safetensors, tokenizer): what vLLM and transformers load."""
    return Path(tiny_spec.path)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_spec: ModelSpec) -> Any:
    """The SmolLM2 tokenizer (ChatML template, `<|im_end|>` as EOS and pad)."""
    return load_tokenizer(tiny_spec)


@pytest.fixture
def tiny_train_config(tmp_path: Path) -> Any:
    """`make(recipe, *overrides)`: a one-iteration tiny-model train config (TINY_TRAIN) writing to tmp_path/run."""
    from agentforge.schema.compose import compose_config

    def make(recipe: str, *overrides: str) -> Any:
        return compose_config([f"recipe={recipe}", *TINY_TRAIN, *overrides], run_dir=str(tmp_path / "run"))

    return make


@pytest.fixture(scope="module")
def ray_with_module_classes(request: pytest.FixtureRequest) -> Any:
    """A Ray runtime (started here unless one runs) whose actors can load env classes defined in the requesting test
    module: the actors cannot import a test module, so it is shipped by value."""
    import sys

    import ray
    from ray import cloudpickle

    from agentforge.hosting.pool import ensure_ray

    module = sys.modules[request.module.__name__]
    cloudpickle.register_pickle_by_value(module)
    started = not ray.is_initialized()
    ensure_ray(num_cpus=2)
    yield
    cloudpickle.unregister_pickle_by_value(module)
    if started:
        ray.shutdown()


# ---- the suite's time budget (issue 37) --------------------------------------------------------------------------
# Variant tests that start a whole training stack (engine, Ray, learner, a subprocess) to check a path another test
# in `make test` already runs for real. They carry the `long` marker: `make test` skips them, `make test-long` runs
# them (on a schedule, as `make test-slurm`). Each entry says which test keeps its component's path in `make test`.
LONG_TESTS: dict[str, str] = {
    "tests/integration/test_preemption.py::test_scheduler_signal_checkpoints_then_resume_auto_continues[SIGTERM]":
        "the same handler as SIGUSR1 (reliability/interrupt.py installs both); the SIGUSR1 variant stays",
    "tests/integration/test_preemption.py::test_scheduler_signal_checkpoints_then_resume_auto_continues"
    "[SIGUSR1-asynchronous]": "asynchronous resume stays in test_asynchronous.py (a resumed run trains the batches "
                              "its checkpoint kept); the signal path stays with SIGUSR1",
    "tests/integration/test_asynchronous.py::test_asynchronous_grpo_learns_within_the_staleness_bound[2]":
        "k=1 stays; k=2 widens the same bound",
    "tests/integration/test_asynchronous.py::test_group_algorithms_train_asynchronously_on_sokoban[gigpo]":
        "test_gigpo_trains_asynchronously_with_pushes_landing_inside_generation trains GiGPO one version ahead on "
        "the same Sokoban setup (and checks the same bound, lag-1 turns and samples)",
    "tests/integration/test_asynchronous.py::test_group_algorithms_train_asynchronously_on_sokoban[tjpo]":
        "GiGPO's asynchronous run stays (the same producer and lag bookkeeping; TJPO's advantages are tested "
        "synchronously)",
    "tests/integration/test_asynchronous.py::test_group_algorithms_train_asynchronously_on_sokoban[t2po]":
        "GiGPO's asynchronous run stays; T2PO's regeneration in the producer is tested by test_t2po_runs.py",
    "tests/integration/test_gateway.py::test_training_through_the_gateway[openai-gigpo]":
        "openai-grpo stays (every agent kind stays: langgraph, mcp); GiGPO's advantages are tested without a gateway",
    "tests/integration/test_gateway.py::test_training_through_the_gateway[openai-tjpo]":
        "openai-grpo stays; TJPO's advantages are tested without a gateway",
    "tests/integration/test_gateway.py::test_training_through_the_gateway[openai-t2po]":
        "openai-grpo stays; T2PO's gateway refusal/regeneration is tested in test_gateway's unit tests",
    "tests/integration/test_gateway.py::test_the_expert_warm_start_plays_the_agent_unchanged_with_expert_replies"
    "[langgraph]": "the openai variant stays (the same expert replies through the same gateway)",
    "tests/integration/test_gateway.py::test_the_expert_warm_start_plays_the_agent_unchanged_with_expert_replies"
    "[mcp]": "the openai variant stays",
    "tests/integration/test_env_replay.py::test_ray_pool_replays_and_branches_like_in_process[scienceworld]":
        "the in-process ScienceWorld replay stays, and the Ray pool's replay stays for four other envs",
    "tests/integration/test_env_replay.py::test_ray_pool_replays_and_branches_like_in_process"
    "[alfworld_intervention]": "the in-process replay stays, and the Ray pool's replay stays for alfworld",
    "tests/e2e/test_rollout_cli.py::test_train_sweep_runs_each_job_in_its_own_folder":
        "test_sweep_report.py's tiny sweep runs `train --multirun` into job folders on every `make test`",
}
# Workers for `-n auto`: one per core, but no more than memory holds (a worker's heaviest tests hold ~5 GiB: a
# tiny-model training stack plus a subprocess run). One more than the cores was measured no faster (the suite is
# CPU-bound: 3 workers on 2 cores 18:31 against 17:57 for 2). `PYTEST_XDIST_AUTO_NUM_WORKERS` overrides it.
WORKER_MEMORY = 6 * 2**30


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    import psutil

    by_memory = int(psutil.virtual_memory().available // WORKER_MEMORY)
    return max(1, min(len(os.sched_getaffinity(0)), by_memory))


SLOWEST_FILES = 15
# `make test`'s second, serial phase writes its own (`.ci/run` names the parallel phase's slowest files)
DURATIONS_FILE = os.environ.get("AGENTFORGE_TEST_DURATIONS", ".test-file-durations.json")
_file_seconds: dict[str, float] = {}


# The heaviest files first: xdist hands files to workers in the collection's order, and by default reorders them by
# their number of tests, which puts the few-test files that each start a training stack (test_killed_training: one
# test, ~90 s) last, where one of them runs alone while the other worker idles. Longest first is the classic bound for
# this (LPT). The seconds are a full suite's per-file times (`.test-file-durations.json` of a CI run, files >= 3 s);
# a file not in it counts as heavy (it may be a new training-stack test). Refresh it when the slowest files change.
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
UNKNOWN_FILE_SECONDS = 60.0


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below
        config.option.loadscopereorder = False


def heaviest_files_first(items: list[pytest.Item]) -> None:
    import json

    seconds = json.loads(FILE_SECONDS.read_text())

    def weight(item: pytest.Item) -> float:
        path = item.nodeid.split("::", 1)[0]
        return seconds.get(path, UNKNOWN_FILE_SECONDS if path.startswith(("tests/integration", "tests/reliability",
                                                                         "tests/e2e")) else 0.0)

    items.sort(key=lambda item: -weight(item))  # stable: a file's tests keep their order


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in LONG_TESTS:
            item.add_marker(pytest.mark.long)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # only where xdist schedules files; a plain run keeps its order
        heaviest_files_first(items)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + float(report.duration)  # setup + call + teardown


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The 15 slowest files (setup + call + teardown), and all of them into .test-file-durations.json for
    `.ci/run`'s budget warning: the suite's time made visible in every log."""
    if not _file_seconds:
        return
    import json

    ranked = sorted(_file_seconds.items(), key=lambda kv: -kv[1])
    total = sum(_file_seconds.values())
    terminalreporter.write_sep("=", f"{SLOWEST_FILES} slowest test files ({total:.0f} s in all tests)")
    for path, seconds in ranked[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    Path(DURATIONS_FILE).write_text(json.dumps(dict(ranked), indent=1))
