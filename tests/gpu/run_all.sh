#!/usr/bin/env bash
# Every GPU check on a GPU machine in one go: the benchmark (bench/bench_variants.py), then every
# GPU suite (tests/gpu) in parallel workers. Run from the repository root, with lark, the
# repository and runtime/ on PYTHONPATH and the bundles of tools/build_gpu_bundles.py in
# $ATTNC_GPU_BUNDLES (default .bundles/gpu), or unpacked there from the tarball PACK.
# Logs, JSON and JUnit XML go to $OUT (default: the current folder). BENCH_TIMEOUT and
# TEST_TIMEOUT (seconds) bound the two steps where a machine's lease is short; unset, no
# bound.
set -u
out=${OUT:-.}
bundles=${ATTNC_GPU_BUNDLES:-.bundles/gpu}
if [ -n "${PACK:-}" ]; then
  mkdir -p "$(dirname "$bundles")" && tar -xf "$PACK" -C "$(dirname "$bundles")" || exit 1
fi
export ATTNC_GPU_BUNDLES=$bundles
# One BLAS thread per test worker: a thread per core in each of them oversubscribes the
# cores many times over (results/sm80_h200.md, "GPU test suites").
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bound() { if [ -n "${1:-}" ]; then echo timeout "$1"; fi; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } 2>&1 | tee "$out/gpu.txt"
$(bound "${BENCH_TIMEOUT:-}") python3 bench/bench_variants.py --bundles "$bundles" --json "$out/bench_variants.json" 2>&1 \
  | tee "$out/bench.log"
flags=()      # pytest-xdist and pytest-timeout where the machine has them
python3 -c "import xdist" 2>/dev/null && flags+=(-n "${WORKERS:-14}" --dist loadgroup)
python3 -c "import pytest_timeout" 2>/dev/null && flags+=(--timeout 300)
$(bound "${TEST_TIMEOUT:-}") python3 -m pytest -q -m gpu tests/gpu \
  "${flags[@]}" --tb=short -rfs -p no:cacheprovider --junitxml "$out/junit.xml" 2>&1 | tee "$out/tests.log"
