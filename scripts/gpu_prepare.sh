#!/usr/bin/env bash
# Here (no GPU needed): put what the GPU check needs and the GPU machine lacks into .gpu/ (ignored by git, carried by
# the device tool): DeepSpeed 0.19.8 built as a pure-Python wheel plus its missing dependencies for CPython 3.12
# (the GPU image's Python), and SmolLM2's tokenizer (the check's random Qwen2.5-shaped model uses it). ~6 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -rf .gpu && mkdir -p .gpu/whl .gpu/tokenizer
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation deepspeed==0.19.8 -w .gpu/whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
  hjson py-cpuinfo pydantic pydantic-core annotated-types typing-inspection msgpack ninja nvidia-ml-py
"$PY" - <<'PYEOF'
from transformers import AutoTokenizer
from agentforge.models.loading import cache_root, smollm2_tokenizer_folder
AutoTokenizer.from_pretrained(smollm2_tokenizer_folder(cache_root() / "models")).save_pretrained(".gpu/tokenizer")
PYEOF
du -sh .gpu
echo "now: device run, carry [.gpu], command: bash scripts/gpu_check.sh"
