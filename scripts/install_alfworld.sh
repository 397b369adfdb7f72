#!/usr/bin/env bash
# Install the real ALFWorld text engine into agentforge's venv: alfworld==0.4.2 + textworld[pddl]==1.7.0.
#
# Traps (FACTS.md): fast-downward-textworld has no binary wheel and builds from C++ source (~4-5 min on 2 cores);
# jericho (imported by textworld) declares spacy, which nothing here needs, so it and the engine packages are
# installed --no-deps with their real dependencies named below. The two source builds are turned into wheels once
# and kept in a cache folder, so later installs (CI, new venvs) take seconds.
# The source build runs `python build.py` from PATH, so the venv's bin goes first on PATH (a pyenv shim there
# breaks it with "No module named 'glob'").
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
PIP="$VENV/bin/pip"
WHEELS=${AGENTFORGE_WHEELS:-$HOME/.cache/agentforge/wheels}

if "$PY" -c "import alfworld, textworld, fast_downward; from textworld.envs import PddlEnv; PddlEnv()" 2>/dev/null; then
    echo "alfworld already installed"
    exit 0
fi

mkdir -p "$WHEELS"
if ! ls "$WHEELS"/fast_downward_textworld-20.6.4-*.whl "$WHEELS"/jericho-3.3.1-*.whl >/dev/null 2>&1; then
    echo "building fast-downward-textworld and jericho wheels into $WHEELS (one time, ~5 min)"
    PATH="$(cd "$VENV/bin" && pwd):$PATH" nice -n 10 "$PIP" wheel -q --no-deps \
        fast-downward-textworld==20.6.4 jericho==3.3.1 -w "$WHEELS"
fi
# The engine packages without their declared extras (spacy via jericho; torch/opencv via alfworld[full]).
"$PIP" install -q --no-deps --find-links "$WHEELS" \
    fast-downward-textworld==20.6.4 jericho==3.3.1 textworld==1.7.0 alfworld==0.4.2
# textworld's real runtime dependencies.
"$PIP" install -q "tatsu==5.8.3" "hashids>=1.2.0" "mementos>=1.3.1" more_itertools termcolor prompt_toolkit \
    "networkx>=2" tqdm numpy
"$PY" -c "from textworld.envs import PddlEnv; PddlEnv(); import alfworld.agents.environment.alfred_tw_env; \
print('alfworld installed')"
