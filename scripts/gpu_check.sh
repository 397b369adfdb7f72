#!/usr/bin/env bash
# On a GPU machine (the device tool's, or any with CUDA): the GPU tests of tests/gpu with their figures, then
# docs/gpu.md from them. Needs .gpu/ from scripts/gpu_prepare.sh when the machine lacks DeepSpeed (the device
# tool's image does); a machine with `make setup` done runs `make test-gpu` instead. Budget: under 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
PY=${PY:-python3}
if [ -d .gpu/whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
  export AGENTFORGE_GPU_TOKENIZER=$PWD/.gpu/tokenizer
fi
export PYTHONUNBUFFERED=1 AGENTFORGE_GPU_REPORT=$OUT/gpu.jsonl
rm -f "$AGENTFORGE_GPU_REPORT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu_name.txt"
timeout 460 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/gpu 2>&1 | tee "$OUT/gpu_tests.log"
status=${PIPESTATUS[0]}
"$PY" scripts/gpu_report.py "$AGENTFORGE_GPU_REPORT" "$OUT/gpu_tests.log" > "$OUT/gpu.md" && cp "$OUT/gpu.md" docs/gpu.md
exit "$status"
