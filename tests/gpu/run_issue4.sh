#!/usr/bin/env bash
# Issue 4 on a GPU machine in one go: the benchmark (bench/bench_variants.py), then the
# examples and property tests (tests/gpu/test_examples.py, test_property.py) in parallel
# workers. Run from the repository root, with lark, the repository and runtime/ on
# PYTHONPATH and the bundles of tools/build_gpu_bundles.py in .bundles/gpu (or unpacked
# from PACK). Logs, JSON and JUnit XML go to $OUT (default: the current folder).
set -u
out=${OUT:-.}
if [ -n "${PACK:-}" ]; then
  mkdir -p .bundles && tar -xf "$PACK" -C .bundles || exit 1
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } 2>&1 | tee "$out/gpu.txt"
timeout "${BENCH_TIMEOUT:-400}" python3 bench/bench_variants.py --json "$out/bench_variants.json" 2>&1 \
  | tee "$out/bench.log"
flags=()      # pytest-xdist and pytest-timeout where the machine has them
python3 -c "import xdist" 2>/dev/null && flags+=(-n "${WORKERS:-8}" --dist loadgroup)
python3 -c "import pytest_timeout" 2>/dev/null && flags+=(--timeout 120)
timeout "${TEST_TIMEOUT:-270}" python3 -m pytest -q -m gpu tests/gpu/test_examples.py tests/gpu/test_property.py \
  "${flags[@]}" --tb=short -rfs -p no:cacheprovider --junitxml "$out/junit.xml" 2>&1 | tee "$out/tests.log"
