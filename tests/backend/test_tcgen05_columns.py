"""tcgen05.ld and .st of the 32x32b shape move a power of two of columns a thread, 1 to
128 (their .num): a count without that form is refused where the instruction is built,
not left to ptxas (a block_n of 48 on sm_100a stored P as .x24: found by a review)."""
import pytest
from mlir import ir

from attnc.backend.nvgpu_builders import Emit
from attnc.backend.tcgen05 import Tmem
from attnc.errors import AttncError
from attnc.ir import make_context


@pytest.mark.parametrize("count", [3, 24, 48, 256])
def test_a_column_count_without_a_form_is_refused(count):
    with make_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            e = Emit()
            with pytest.raises(AttncError, match=f"moves 1, 2, 4, ... or 128 columns a thread, not {count}"):
                Tmem(e).store(e.c32(0), [e.c32(1)] * count)
            with pytest.raises(AttncError, match=f"not {count}"):
                Tmem(e).load(e.c32(0), count)
            Tmem(e).store(e.c32(0), [e.c32(1)] * 16)       # a form it has
