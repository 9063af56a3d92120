"""The runtime on a real GPU, with a hand-written PTX kernel (no compiler involved).

The bundle holds two kernels run in order: `mark` adds 1 to a zeroed scratch
counter, `copy` copies q into o row by row and writes the counter into lse. So
o == q checks pointers, strides and the grid; lse == 1 after every call checks
that the kernels ran in order, shared the scratch buffer, and that it is zeroed
before each launch. The PTX is assembled here too (nvJitLink, no GPU needed), so
a typo in it shows up on every machine.

GPU tests need an NVIDIA driver; elsewhere they skip saying why.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from attnc_runtime import AttncRuntimeError, Bundle, Kernel
from attnc_runtime.arch import TARGETS
from attnc_runtime.manifest import FORMAT, source_sha256

PTX = """//
// attnc_test_mark(scratch): scratch[0] += 1.
// attnc_test_copy(q, o, lse, scratch, q_row_stride, o_row_stride): block r of the flattened
//   [B*H*M] rows, thread c of 128 columns: o[r, c] = q[r, c]; lse[r] = float(scratch[0]).
//
.version 7.0
.target sm_80
.address_size 64

.visible .entry attnc_test_mark(
    .param .u64 scratch
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [scratch];
    cvta.to.global.u64 %rd2, %rd1;
    atom.global.add.u32 %r1, [%rd2], 1;
    ret;
}

.visible .entry attnc_test_copy(
    .param .u64 q,
    .param .u64 o,
    .param .u64 lse,
    .param .u64 scratch,
    .param .u64 q_row_stride,
    .param .u64 o_row_stride
)
{
    .reg .pred %p<2>;
    .reg .b16 %h<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<20>;

    ld.param.u64 %rd1, [q];
    ld.param.u64 %rd2, [o];
    ld.param.u64 %rd3, [lse];
    ld.param.u64 %rd4, [scratch];
    ld.param.u64 %rd5, [q_row_stride];
    ld.param.u64 %rd6, [o_row_stride];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %tid.x;
    cvt.u64.u32 %rd7, %r1;
    cvt.u64.u32 %rd8, %r2;

    mad.lo.u64 %rd9, %rd7, %rd5, %rd8;
    shl.b64 %rd10, %rd9, 1;
    add.u64 %rd11, %rd1, %rd10;
    cvta.to.global.u64 %rd12, %rd11;
    ld.global.u16 %h1, [%rd12];
    mad.lo.u64 %rd13, %rd7, %rd6, %rd8;
    shl.b64 %rd14, %rd13, 1;
    add.u64 %rd15, %rd2, %rd14;
    cvta.to.global.u64 %rd16, %rd15;
    st.global.u16 [%rd16], %h1;

    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd17, %rd4;
    ld.global.u32 %r3, [%rd17];
    cvt.rn.f32.u32 %f1, %r3;
    shl.b64 %rd18, %rd7, 2;
    add.u64 %rd19, %rd3, %rd18;
    cvta.to.global.u64 %rd19, %rd19;
    st.global.f32 [%rd19], %f1;
DONE:
    ret;
}
"""

SOURCE = """attention copy {
  q: bf16[B, H, M, 128]
  k: bf16[B, H, N, 128]
  v: bf16[B, H, N, 128]
  out o: bf16[B, H, M, 128]
  out lse: f32[B, H, M]
}
"""


def manifest(target: str, code: dict) -> dict:
    def tensor(name, role, dtype, shape):
        return {"name": name, "role": role, "dtype": dtype, "shape": shape}

    row_q, row_k = ["B", "H", "M", 128], ["B", "H", "N", 128]
    return {
        "format": FORMAT, "compiler": {"name": "attnc", "version": "test"}, "variant": "copy",
        "source_sha256": source_sha256(SOURCE), "source": SOURCE, "target": target, "code": code,
        "dims": ["B", "H", "M", "N"],
        "inputs": [tensor("q", "q", "bf16", row_q), tensor("k", "k", "bf16", row_k),
                   tensor("v", "v", "bf16", row_k)],
        "outputs": [tensor("o", "o", "bf16", row_q), tensor("lse", "lse", "f32", row_q[:3])],
        "kernels": [
            {"name": "mark", "symbol": "attnc_test_mark", "block": [1, 1, 1], "dynamic_smem_bytes": 0,
             "grid": [[], [], []], "params": [{"kind": "scratch", "name": "counter", "bytes": [4]}]},
            {"name": "copy", "symbol": "attnc_test_copy", "block": [128, 1, 1], "dynamic_smem_bytes": 0,
             "grid": [["B", "H", "M"], [], []],
             "params": [{"kind": "ptr", "tensor": "q"}, {"kind": "ptr", "tensor": "o"},
                        {"kind": "ptr", "tensor": "lse"},
                        {"kind": "scratch", "name": "counter", "bytes": [4]},
                        {"kind": "stride", "tensor": "q", "axis": 2, "type": "i64"},
                        {"kind": "stride", "tensor": "o", "axis": 2, "type": "i64"}]},
        ],
    }


def assemble(arch: str) -> bytes:
    """PTX -> cubin with nvJitLink; raises with the assembler's log."""
    from cuda.bindings import nvjitlink
    handle = nvjitlink.create(1, [f"-arch={arch}"])
    try:
        data = PTX.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "test.ptx")
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            raise AssertionError(log.decode(errors="replace")) from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def _nvjitlink_missing() -> str | None:
    try:
        from cuda.bindings import nvjitlink
        nvjitlink.version()
    except Exception as e:
        return f"nvJitLink is not usable: {e}"
    return None


def _no_gpu() -> str | None:
    try:
        from attnc_runtime import driver
        driver.device_info(0)
    except (AttncRuntimeError, ImportError) as e:
        return f"no GPU: {e}"
    return None


NO_GPU = _no_gpu()
NO_NVJITLINK = _nvjitlink_missing()
needs_gpu = pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")


@pytest.mark.skipif(NO_NVJITLINK is not None, reason=NO_NVJITLINK or "")
def test_the_test_kernels_assemble_for_sm_80():
    assert b"attnc_test_copy" in assemble("sm_80")


def bundle(m: dict, files: dict[str, bytes]) -> Bundle:
    """The bundle of manifest `m` and its code `files`, with the code digests attnc writes."""
    m["code_sha256"] = {kind: hashlib.sha256(files[name]).hexdigest() for kind, name in m["code"].items()}
    return Bundle.from_files(m, files)


def ptx_kernel() -> Kernel:
    m = manifest("sm_80", {"ptx": "test.compute_80.ptx"})
    return Kernel(bundle(m, {"test.compute_80.ptx": PTX.encode()}))


def cubin_kernel() -> Kernel:
    from attnc_runtime import driver
    major, minor = driver.device_info(0).capability
    target = f"sm_{major}{minor}"
    if target not in TARGETS:
        pytest.skip(f"no attnc target for compute capability {major}.{minor}")
    m = manifest(target, {"cubin": f"test.{target}.cubin"})
    return Kernel(bundle(m, {f"test.{target}.cubin": assemble(target)}))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("make_kernel", [ptx_kernel, cubin_kernel], ids=["ptx", "cubin"])
def test_device_arrays(make_kernel):
    from attnc_runtime import DeviceArray
    from attnc_runtime.device_array import float32_to_bf16_bits
    kernel = make_kernel()
    rng = np.random.default_rng(0)
    q_host = rng.standard_normal((2, 3, 5, 128)).astype(np.float32)
    q = DeviceArray.from_numpy(q_host, "bf16")
    k = v = DeviceArray.from_numpy(np.zeros((2, 3, 7, 128), np.float32), "bf16")
    for _ in range(2):          # the second call sees a re-zeroed counter
        out = kernel(q=q, k=k, v=v)
        want = (float32_to_bf16_bits(q_host).astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(out["o"].numpy(), want)
        np.testing.assert_array_equal(out["lse"].numpy(), np.ones((2, 3, 5), np.float32))


@pytest.mark.gpu
@needs_gpu
def test_torch_tensors_on_a_side_stream():
    torch = pytest.importorskip("torch")
    kernel = ptx_kernel()
    q = torch.randn(2, 3, 5, 128, dtype=torch.bfloat16, device="cuda")
    k = v = torch.zeros(2, 3, 7, 128, dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = kernel(q, k, v)
    stream.synchronize()
    assert out["o"].dtype == torch.bfloat16 and out["o"].device == q.device
    assert torch.equal(out["o"], q)
    assert torch.equal(out["lse"], torch.ones(2, 3, 5, device="cuda"))


@pytest.mark.gpu
@needs_gpu
def test_refused_before_launch_on_the_gpu():
    torch = pytest.importorskip("torch")
    q = torch.randn(2, 3, 5, 128, dtype=torch.float16, device="cuda")
    with pytest.raises(AttncRuntimeError, match="^q: expected dtype bf16, got torch.float16$"):
        ptx_kernel()(q, q, q)


class _StreamArray:
    """A float32 torch tensor seen only through `__cuda_array_interface__` version 3,
    naming the stream its producer writes it on (as numba's arrays do)."""

    def __init__(self, tensor, stream: int):
        self.tensor, self.stream = tensor, stream

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": tuple(self.tensor.shape), "typestr": "<f4", "version": 3, "strides": None,
                "data": (self.tensor.data_ptr(), False), "stream": self.stream}


@pytest.mark.gpu
@needs_gpu
def test_a_launch_waits_for_the_stream_an_array_names():
    """Note [Producer streams]: lse is still being written on a side stream (after a
    sleep) when the launch is queued on the default stream; the kernel writes 1s, after
    the side stream's 7s only if the launch waited for it."""
    torch = pytest.importorskip("torch")
    kernel, (q, k, v), lse, side = _lse_written_on_a_side_stream(torch)
    kernel(q, k, v, lse=_StreamArray(lse, side.cuda_stream))
    torch.cuda.synchronize()
    assert torch.equal(lse, torch.ones_like(lse))


def _lse_written_on_a_side_stream(torch):
    """The race of the producer-stream tests: the test kernel (which writes lse = 1 on every
    launch: the module docstring) warmed up, and lse being filled with 7s on a new side
    stream after a sleep. Returns (kernel, (q, k, v), lse, side)."""
    q = torch.randn(2, 3, 5, 128, dtype=torch.bfloat16, device="cuda")
    k = v = torch.zeros(2, 3, 7, 128, dtype=torch.bfloat16, device="cuda")
    lse = torch.zeros(2, 3, 5, device="cuda")
    kernel = ptx_kernel()
    kernel(q, k, v)                             # loading the code may synchronize: before the race
    torch.cuda.synchronize()
    side = torch.cuda.Stream()                  # torch's are non-blocking: no implicit order
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)          # about 0.1 s of GPU clocks
        lse.fill_(7.0)
    return kernel, (q, k, v), lse, side


class _DLPackFromSide:
    """A tensor seen only through DLPack (a library other than torch and cupy), being
    written on `side`. Asked for with no stream, it does what the protocol asks of a
    producer: it orders the legacy default stream after its own work."""

    def __init__(self, tensor, side):
        self.tensor, self.side = tensor, side

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None):
        import torch
        assert stream is None
        ready = torch.cuda.Event()
        ready.record(self.side)
        torch.cuda.default_stream().wait_event(ready)       # torch's default: the legacy stream
        return self.tensor.__dlpack__(stream=-1)            # -1: torch adds no order of its own


@pytest.mark.gpu
@needs_gpu
def test_a_launch_on_a_non_blocking_stream_waits_for_a_dlpack_array():
    """Note [Producer streams]: lse is still being written on a side stream when the launch
    is queued on another non-blocking stream, which nothing orders after the legacy
    default stream where the producer made lse ready; the kernel's 1s come after the
    side stream's 7s only if the launch waited for the legacy default stream."""
    torch = pytest.importorskip("torch")
    kernel, (q, k, v), lse, side = _lse_written_on_a_side_stream(torch)
    launch = torch.cuda.Stream()
    with torch.cuda.stream(launch):
        kernel(q, k, v, lse=_DLPackFromSide(lse, side))
    torch.cuda.synchronize()
    assert torch.equal(lse, torch.ones_like(lse))


@pytest.mark.gpu
@needs_gpu
def test_outputs_launched_on_another_stream_are_not_reused_while_it_runs():
    """Note [Memory used on another stream]: o is allocated at the bind on the default
    stream and written by a launch on a side stream held back by a sleep; the binding is
    dropped at once. A tensor allocated next on the default stream must not get o's
    memory before the launch is done, or the launch's write (o = q) lands in it."""
    torch = pytest.importorskip("torch")
    q = torch.randn(2, 3, 5, 128, dtype=torch.bfloat16, device="cuda")
    k = v = torch.zeros(2, 3, 7, 128, dtype=torch.bfloat16, device="cuda")
    kernel = ptx_kernel()
    kernel(q, k, v)                             # loading the code may synchronize: before the race
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    bound = kernel.bind(q=q, k=k, v=v)          # o and lse from torch's pool, default stream
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)          # about 0.1 s of GPU clocks
    bound.launch(stream=side)
    del bound
    fresh = torch.full((2, 3, 5, 128), 5.0, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    assert torch.equal(fresh, torch.full_like(fresh, 5.0))
