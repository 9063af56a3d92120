"""The frontend imports and checks a variant with the MLIR bindings unavailable.

The GPU machine runs the frontend and the reference without MLIR (frontend
package docstring), so a child interpreter blocks `mlir` with a meta-path finder.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import sys

class BlockMlir:
    def find_spec(self, name, path=None, target=None):
        if name == "mlir" or name.startswith("mlir."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, BlockMlir())
try:
    import mlir.ir
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("the blocker did not block mlir")

import attnc.frontend
from attnc.errors import AttncError

variant = attnc.frontend.load_file(sys.argv[1])
try:
    attnc.frontend.load("attention broken {", "broken.attn")
except AttncError as e:
    print(e.render().splitlines()[0])
loaded = sorted(m for m in sys.modules if m == "mlir" or m.startswith("mlir."))
print(variant.name, loaded)
"""


def test_frontend_imports_without_mlir():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "examples" / "gemma2.attn")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "broken.attn:1:19: error: unexpected end of file, expected 'dim' or 'out' or 'param' "
        "or 'scale' or '}' or a name",
        "gemma2 []",
    ]
