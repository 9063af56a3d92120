"""The emulator's launches take their arguments as a GPU launch does: the caller's arrays
with their layout (strided views read through their strides, views of one array
overlapping, an array over a bytes-like buffer as aligned as its address), the runtime's
refusals (positional inputs, an output that is an input, a read-only output, masked
arrays), empty launches, and checked CTA ids; and `python -m attnc_sim`'s
command line (dims, saved inputs, tolerances, refusals as messages)."""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import attnc
from attnc.testing import ptx_bundle
from attnc_runtime.errors import AttncRuntimeError
from attnc_sim.__main__ import main
from attnc_sim.device import SimKernel

ROOT = Path(__file__).resolve().parents[2]
BF16 = ml_dtypes.bfloat16
SMALL = """attention small {
  q: QT[B, H, M, 64]
  k: QT[B, H, N, 64]
  v: QT[B, H, N, 64]
  OTHER
  out o: OT[B, H, M, 64]
}"""


def _source(qt="bf16", ot="bf16", other="") -> str:
    return SMALL.replace("OTHER", other).replace("QT", qt).replace("OT", ot)


@pytest.fixture(scope="module")
def kernel():
    return SimKernel(ptx_bundle(_source(), arch="sm_80"))


def _write(source: str, folder: Path) -> Path:
    """The sm_80 bundle of `source` without its cubin, written to `folder`."""
    from attnc.backend.bundle import write_bundle
    from attnc.backend.lowering import build
    from attnc.driver import CompileOptions, compile_mlir

    art = build(compile_mlir(source, "<test>", CompileOptions(arch="sm_80")), cubin=False)
    write_bundle(folder, art.manifest, art.files)
    return folder


def _random(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32).astype(BF16)


def _reference(q, k, v):
    return attnc.reference(_source(), q=q.astype(np.float32), k=k.astype(np.float32), v=v.astype(np.float32))


def test_strided_views_and_an_output_written_in_place(kernel):
    """q every other head of a larger array, o the first half of a wider one: the kernel reads
    and writes through the strides, o is the caller's array, and the rest of it is untouched."""
    rng = np.random.default_rng(1)
    wide_q = _random(rng, 1, 4, 5, 64)
    k, v = _random(rng, 1, 2, 7, 64), _random(rng, 1, 2, 7, 64)
    wide_o = np.full((1, 2, 5, 128), 7.0, BF16)
    q, o = wide_q[:, ::2], wide_o[..., :64]
    out = kernel(q, k, v, o=o)
    assert out["o"] is o
    assert np.abs(o.astype(np.float32) - _reference(q, k, v)["o"]).max() < 3e-2
    assert (wide_o[..., 64:].astype(np.float32) == 7.0).all()


def test_refusals_of_a_gpu_launch(kernel):
    rng = np.random.default_rng(2)
    q, k, v = _random(rng, 1, 2, 5, 64), _random(rng, 1, 2, 7, 64), _random(rng, 1, 2, 7, 64)
    readonly = np.zeros((1, 2, 5, 64), BF16)
    readonly.flags.writeable = False
    cases = [
        (lambda: kernel(q, k, v, o=q), "o: its memory overlaps q's"),
        (lambda: kernel(q, k, v, o=readonly), "o: is read-only"),
        (lambda: kernel(q, k, v, q), "takes 3 positional inputs (q, k, v), got 4"),
        (lambda: kernel(q, k, v, q=q), "input 'q' given both by position and by name"),
        (lambda: kernel(q.astype(np.float32).astype(">f4"), k, v), "not in this machine's byte order"),
        (lambda: kernel(q, k, v, ctas=[(3, 0, 0)]), "CTA (3, 0, 0) is outside the attention kernel's grid (1, 2, 1)"),
        (lambda: kernel(q, k, v, ctas=[(0, 0)]), "(0, 0) is not a CTA id"),
        (lambda: kernel(q, k, v, ctas=5), "ctas: expected CTA ids (x, y, z) of the attention kernel, got 5"),
        (lambda: kernel(np.ma.masked_array(q), k, v), "q: masked arrays are not supported"),
        (lambda: kernel(q, k, v, mask_from=object()), "mask_from: the emulator builds every launch's mask data"),
    ]
    before = q.copy()
    for call, message in cases:
        with pytest.raises(AttncRuntimeError) as e:
            call()
        assert message in str(e.value)
    assert (q.view(np.uint16) == before.view(np.uint16)).all()


def test_arrays_of_one_buffer_through_two_owners(kernel):
    """Two np.frombuffer arrays of one buffer have different owners: an output inside an
    input's bytes is refused as on a GPU (the emulator copied each owner apart), and an
    input whose bytes lie inside another's is read from the same memory (found by a review)."""
    rng = np.random.default_rng(5)
    k, v = _random(rng, 1, 2, 7, 64), _random(rng, 1, 2, 7, 64)
    raw = bytearray(2 * 2 * 5 * 64 * 2)
    q = np.frombuffer(raw, BF16).reshape(2, 2, 5, 64)[:1]
    q[...] = _random(rng, 1, 2, 5, 64)
    o = np.frombuffer(raw, BF16, count=2 * 5 * 64).reshape(1, 2, 5, 64)
    with pytest.raises(AttncRuntimeError, match="o: its memory overlaps q's"):
        kernel(q, k, v, o=o)
    tail = np.frombuffer(raw, BF16, offset=2 * 5 * 64 * 2).reshape(1, 2, 5, 64)
    out = kernel(np.ascontiguousarray(q), k, v, o=tail)
    assert np.abs(out["o"].astype(np.float32) - _reference(q, k, v)["o"]).max() < 3e-2
    assert out["o"] is tail and (q == np.frombuffer(raw, BF16)[:2 * 5 * 64].reshape(q.shape)).all()
    same = np.ascontiguousarray(q)              # one array three times: one owner, one allocation
    assert np.abs(kernel(same, same, same)["o"].astype(np.float32) - _reference(same, same, same)["o"]).max() < 3e-2


def test_an_array_over_a_buffer_keeps_its_alignment(kernel):
    """np.frombuffer over a bytearray at 2 bytes from 16 is its own owner: the emulator
    places it 2 bytes from 16 too, so it is refused as a GPU launch refuses it (it was
    taken as aligned: found by a review), and at 16 bytes it runs."""
    rng = np.random.default_rng(8)
    k, v = _random(rng, 1, 2, 7, 64), _random(rng, 1, 2, 7, 64)
    raw = bytearray(2 * 5 * 64 * 2 + 64)
    start = -np.frombuffer(raw, np.uint8).ctypes.data % 16
    for offset, refused in ((start + 2, True), (start + 16, False)):
        q = np.frombuffer(raw, BF16, count=2 * 5 * 64, offset=offset).reshape(1, 2, 5, 64)
        if refused:
            with pytest.raises(AttncRuntimeError, match="16-byte aligned"):
                kernel(q, k, v)
        else:
            q[...] = _random(rng, 1, 2, 5, 64)
            assert np.abs(kernel(q, k, v)["o"].astype(np.float32) - _reference(q, k, v)["o"]).max() < 3e-2


def test_written_elements_are_those_of_the_last_call(kernel):
    rng = np.random.default_rng(6)
    q, k, v = _random(rng, 1, 2, 5, 64), _random(rng, 1, 2, 7, 64), _random(rng, 1, 2, 7, 64)
    kernel(q, k, v, ctas=[(0, 0, 0)])
    assert set(kernel.last_written) == {"o"} and kernel.last_written["o"].sum() == 5 * 64
    kernel(q, k, v, o=np.zeros_like(q))
    assert kernel.last_written == {}


def test_a_param_named_self():
    """A param may be named as the launch's own argument (`self`, positional only)."""
    source = _source(other="param self: f32[H]\n  score_mod(s, b, h, i, j) = s + self[h]")
    rng = np.random.default_rng(7)
    q, k, v = _random(rng, 1, 2, 5, 64), _random(rng, 1, 2, 7, 64), _random(rng, 1, 2, 7, 64)
    bias = np.array([0.5, -1.0], np.float32)
    out = SimKernel(ptx_bundle(source, arch="sm_80"))(q, k, v, self=bias)
    want = attnc.reference(source, q=q.astype(np.float32), k=k.astype(np.float32), v=v.astype(np.float32),
                           self=bias)
    assert np.abs(out["o"].astype(np.float32) - want["o"]).max() < 3e-2


@pytest.mark.parametrize("shape", [(1, 2, 0), (0, 2, 3), (1, 0, 3)], ids=["M0", "B0", "H0"])
def test_empty_launches(kernel, shape):
    """No rows: nothing runs and o is empty, as the reference says."""
    q = np.zeros((*shape, 64), BF16)
    k = v = np.zeros((shape[0], shape[1], 4, 64), BF16)
    out = kernel(q, k, v)
    assert out["o"].shape == q.shape
    assert _reference(q, k, v)["o"].shape == q.shape


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_no_keys(arch):
    """N = 0: every row is empty (o = 0), on every target; an empty K has no strides to
    speak of (numpy's are all 0), which sm_100a's tensor maps do not refuse."""
    q = _random(np.random.default_rng(4), 1, 2, 5, 64)
    k = v = np.zeros((1, 2, 0, 64), BF16)
    out = SimKernel(ptx_bundle(_source(), arch=arch))(q, k, v)
    assert (out["o"].astype(np.float32) == 0).all() and out["o"].shape == q.shape
    assert (_reference(q, k, v)["o"] == 0).all()


def test_command_line(tmp_path, capsys):
    """--dim for a dim no shape carries, saved float inputs rounded to the declared dtype,
    an f32 o compared at its inputs' tolerance, and refusals as messages (exit 2)."""
    prefix = _write(_source(ot="f32", other="dim P\n  mask_mod(b, h, i, j) = j < P or j <= i"), tmp_path / "prefix")
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "in.npz", q=rng.standard_normal((1, 2, 5, 64)), k=rng.standard_normal((1, 2, 7, 64)),
             v=rng.standard_normal((1, 2, 7, 64)))
    assert main([str(prefix), "--inputs", str(tmp_path / "in.npz"), "--dim", "P=3",
                 "--save", str(tmp_path / "out.npz")]) == 0
    assert "o: 10 of 10 rows compared" in capsys.readouterr().out
    assert np.load(tmp_path / "out.npz")["o"].shape == (1, 2, 5, 64)
    assert main([str(prefix), "--B", "1", "--H", "1", "--M", "3", "--N", "4", "--dim", "P=2",
                 "--ctas", "5,0,0"]) == 2
    assert "error: ctas: CTA (5, 0, 0) is outside" in capsys.readouterr().err
    sizes = ["--B", "1", "--H", "1", "--M", "3", "--N", "4"]
    for argv, message in [(["--B", "1", "--H", "1", "--M", "3"], "give sizes for dims ['N', 'P']"),
                          ([*sizes, "--dim", "P"], "expected NAME=VALUE"),
                          ([*sizes, "--dim", "P=-1"], "expected NAME=VALUE, VALUE an int >= 0"),
                          ([*sizes, "--dim", "P=2", "--dim", "Q=1"], "--dim: the bundle has no dim Q (its dims: "
                                                                   "B, H, M, N, P)"),
                          ([*sizes, "--dim", "P=2", "--dim", "M=5"], "--dim M=5: M is also given as 3"),
                          ([*sizes, "--dim", "P=2", "--HKV", "2"], "--HKV: small's k has q's heads, H"),
                          ([*sizes, "--dim", "P=2", "--B", "-1"], "argument --B: '-1': expected an int >= 0"),
                          ([*sizes, "--dim", "P=2", "--seed", "-5"], "argument --seed: '-5': expected an int >= 0")]:
        with pytest.raises(SystemExit):
            main([str(prefix), *argv])
        assert message in capsys.readouterr().err
    assert main([str(prefix), "--inputs", str(tmp_path / "none.npz"), "--dim", "P=3"]) == 2
    assert "error: --inputs " in capsys.readouterr().err
    # a saved output is left out, not taken as an input of the reference
    np.savez(tmp_path / "with_o.npz", **np.load(tmp_path / "in.npz"), o=np.zeros((1, 2, 5, 64)))
    assert main([str(prefix), "--inputs", str(tmp_path / "with_o.npz"), "--dim", "P=3"]) == 0
    assert "--inputs: o left out (outputs: the launch allocates them)" in capsys.readouterr().out


def test_command_line_leaves_out_an_unused_dim(tmp_path, capsys):
    unused = _write(_source(qt="f16", ot="f16", other="dim Q"), tmp_path / "unused")
    assert main([str(unused), "--B", "1", "--H", "1", "--M", "3", "--N", "4"]) == 0
    assert "o: 3 of 3 rows compared" in capsys.readouterr().out


def test_command_line_reports_a_stopped_launch(tmp_path, capsys, monkeypatch):
    """Without --collect the first report stops the launch (as a fault or a deadlock does):
    one line and exit status 1, not a traceback."""
    from attnc_sim.errors import SimError

    def stopped(self, *args, **kwargs):
        raise SimError("read-before-complete: CTA (0, 0, 0) warp 9: ld.shared at line 120")

    bundle = _write(_source(), tmp_path / "plain")
    monkeypatch.setattr(SimKernel, "__call__", stopped)
    assert main([str(bundle), "--B", "1", "--H", "1", "--M", "3", "--N", "4"]) == 1
    assert capsys.readouterr().err == ("python -m attnc_sim: the launch stopped: read-before-complete: "
                                       "CTA (0, 0, 0) warp 9: ld.shared at line 120\n")
