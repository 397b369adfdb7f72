# agentforge: `make demo` runs the main job on the embedded default model; `make test` runs the test suite.
VENV ?= .venv
BIN := $(VENV)/bin
export OMP_NUM_THREADS ?= 2
# Python may cache what it compiles (agentforge's modules, the tests pytest rewrites): with PYTHONDONTWRITEBYTECODE
# set (as on these machines) every process of the suite — xdist workers, `agentforge` subprocesses, Ray workers and
# replica actors — compiled agentforge from source again (~0.4 CPU-s a start) and pytest rewrote every test module.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo test test-long test-unit test-slurm test-gpu docker-check lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/install.sh
	bash scripts/install.sh

demo: setup
	$(BIN)/agentforge train recipe=sokoban_demo

# `make test` leaves out the `long` variants (tests/conftest.py LONG_TESTS: each names the test that keeps its path
# here); `make test-long` runs only them, on a schedule. The suite prints its 15 slowest files at the end.
# Files run in parallel (pytest-xdist, `--dist loadfile`: a file's tests share its module fixtures in one worker), one
# worker per core as memory allows (tests/conftest.py; PYTEST_XDIST_AUTO_NUM_WORKERS=1: one file at a time).
# The `serial` tests push the whole machine (Ray's memory monitor near the memory limit): they run alone, after.
# The serial phase collects only the files that hold serial tests (collecting the whole suite again costs ~10 s).
SERIAL_FILES := $(shell grep -rl --include='test_*.py' 'pytest.mark.serial' tests)
test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not long and not serial" -n auto --dist loadfile --durations=25
	AGENTFORGE_TEST_DURATIONS=.test-file-durations-serial.json $(BIN)/python -m pytest -q -p no:cacheprovider \
		-m "serial and not long" $(SERIAL_FILES)

test-long: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -m long -n auto --dist loadfile --durations=0

test-unit: setup
	$(BIN)/python -m pytest -q -m unit

# A real local Slurm (scripts/slurm_local.sh: apt, root; two emulated nodes): multi-node launch, requeue/resume and
# submitit sweeps on the tiny model, ~17 min on 2 cores. Not part of `make test` (skipped there); docs/cluster.md.
# The GPU paths (tests marked gpu; skipped without CUDA): HF engine on CUDA, DeepSpeed ZeRO-2/3 bf16 + LoRA, a weight-group
# broadcast into a replica process, training iterations of a Qwen2.5-0.5B-shaped model; figures to docs/gpu.md.
test-gpu: setup
	OUT=$(CURDIR)/benchmarks/results PY=$(BIN)/python bash scripts/gpu_check.sh

test-slurm: setup
	AGENTFORGE_TEST_SLURM=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/slurm

# hadolint both Dockerfiles + `pip install --dry-run` of each image's requirement set (docker/check.sh, ~1.5 min,
# network-bound; CI runs it after `make test`).
docker-check: setup
	bash docker/check.sh

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/pip install -q -e ".[bench]"
	$(BIN)/python benchmarks/advantages.py
	$(BIN)/python benchmarks/tjpo_credit.py
	$(BIN)/python benchmarks/env_pool.py
	$(BIN)/python benchmarks/dtype_matmul.py
	$(BIN)/python benchmarks/dtype_vllm.py
	$(BIN)/python benchmarks/rollout.py
	$(BIN)/python benchmarks/train_step.py
	$(BIN)/python benchmarks/learner_step.py
	$(BIN)/python benchmarks/vs_trl.py
	$(BIN)/python benchmarks/t2po_tti.py
	$(BIN)/python benchmarks/strata_selection.py
	$(BIN)/python benchmarks/objective_options.py
	$(BIN)/python benchmarks/replicas.py
	$(BIN)/python benchmarks/schedule.py
	$(BIN)/python benchmarks/asynchronous.py
	$(BIN)/python benchmarks/interruptible.py
	$(BIN)/python benchmarks/async_sim.py

clean:
	rm -rf runs multirun outputs .pytest_cache
