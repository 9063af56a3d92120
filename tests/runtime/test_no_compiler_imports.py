"""The runtime works where the compiler cannot be installed (design.md section 2).

A fresh interpreter whose import system refuses mlir, lark, attnc, torch and cupy
imports every runtime module, loads a bundle, plans a launch on fake tensors,
refuses a bad one, and runs the command line far enough to say torch is missing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from attnc_runtime.testing import synthetic_files, synthetic_manifest

RUNTIME_ROOT = Path(__file__).resolve().parents[2] / "runtime"

SCRIPT = textwrap.dedent("""
    import sys

    BLOCKED = ("mlir", "lark", "attnc", "torch", "cupy")

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked import of {name}")
            return None

    sys.meta_path.insert(0, Refuse())

    import attnc_runtime
    import attnc_runtime.device_array, attnc_runtime.driver, attnc_runtime.run
    from attnc_runtime import AttncRuntimeError, Kernel, read_bundle
    from attnc_runtime.testing import FakePlatform, FakeTensor, synthetic_arguments

    kernel = Kernel(read_bundle(sys.argv[1]), FakePlatform())
    plan = kernel.plan(**synthetic_arguments(M=1000, N=1100))
    print("grids", plan.grids)
    try:
        kernel.plan(**{**synthetic_arguments(), "q": FakeTensor((2, 8, 1000, 128), "f16")})
    except AttncRuntimeError as e:
        print("refused:", e)
    print("run exit", attnc_runtime.run.main([sys.argv[1], "--P", "16", "--no-check"]))
    print("loaded", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
""")


def test_runtime_imports_and_works_without_the_compiler(tmp_path):
    manifest = synthetic_manifest()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    for name, blob in synthetic_files(manifest).items():
        (tmp_path / name).write_bytes(blob)
    env = {**os.environ, "PYTHONPATH": str(RUNTIME_ROOT)}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "grids ((9, 8, 2), (8, 8, 2))",
        "refused: q: expected dtype bf16, got f16",
        "run exit 2",
        "loaded []",
    ]
    assert "builds its inputs with torch, which is not installed" in result.stderr
