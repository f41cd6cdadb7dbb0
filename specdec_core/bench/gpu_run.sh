#!/usr/bin/env bash
# The whole gpu-check on a lent GPU machine, in one call (issue 44): the checks, the short bench and the
# scale section at the GPU presets' shapes; writes results/gpu-<device>.{json,md} and prints everything.
#
#   SPECDEC_COMMIT=<the commit you run> bash specdec_core/bench/gpu_run.sh [gpucheck options]
#
# From the repository root. The machine's own python (GPU_PYTHON, default python3) needs PyTorch with CUDA,
# transformers and peft; bitsandbytes is optional (its comparison is skipped with a note). No network.
# SPECDEC_COMMIT names the code in the report where the machine has no .git (the report also carries a hash
# of the package's sources). When $OUT is set (the device tool's folder that comes back), the report files
# and the log are copied there. gpu-check keeps to its own --budget (330 s by default: the scale section gets
# what the checks and the bench leave); LIMIT (default 400 s) is a hard stop above it.
set -u
cd "$(dirname "$0")/../.."
PY=${GPU_PYTHON:-python3}
LIMIT=${LIMIT:-400}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
LOG=${OUT:-/tmp}/gpucheck.log

run() {
    echo "# bash specdec_core/bench/gpu_run.sh $*, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${SPECDEC_COMMIT:-not given}"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    $PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "| torch", torch.__version__,
"| cuda", torch.version.cuda, "| transformers", transformers.__version__)'
    for pkg in peft bitsandbytes; do
        $PY -c "import $pkg; print('$pkg', $pkg.__version__)" 2>/dev/null || echo "$pkg: not installed"
    done
    start=$(date +%s)
    timeout -k 10 "$LIMIT" $PY -m specdec_core.bench.gpucheck "$@"
    rc=$?
    echo "# gpu-check exit status $rc (0: all passed; 1: a check failed; 124: stopped at ${LIMIT} s) after $(( $(date +%s) - start )) s"
    return $rc
}

run "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
    for f in results/gpu-*.json results/gpu-*.md; do
        [ -e "$f" ] && cp "$f" "$OUT"/
    done
    ls -l "$OUT"
fi
exit "$rc"
