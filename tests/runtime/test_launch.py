"""From checked arguments to driver calls: output allocation with the inputs' library,
kernel parameters in ABI order, scratch buffers, and the launch sequence.

torch is faked (a module in sys.modules whose tensors are descriptions) and so is
the driver (its functions recorded), so all of it runs without a GPU.
"""
from __future__ import annotations

import ctypes
import dataclasses
import itertools
import math
import sys
from types import ModuleType, SimpleNamespace

import pytest

from attnc_runtime import Bundle, Kernel, driver
from attnc_runtime.errors import AttncRuntimeError, ManifestError
from attnc_runtime.kernel import BoundLaunch
from attnc_runtime.params import pack, param_values
from attnc_runtime.tensors import contiguous_strides
from attnc_runtime.testing import (FakePlatform, FakeTensor, synthetic_arguments, synthetic_files,
                                   synthetic_manifest)

_ptrs = itertools.count(0x5000_0000, 0x100_0000)


class FakeTorchTensor:
    __module__ = "torch"

    def __init__(self, shape, dtype="torch.bfloat16", device=0):
        self.shape, self.dtype = tuple(shape), dtype
        self.device = SimpleNamespace(type="cuda", index=device)
        self._ptr = next(_ptrs)

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return contiguous_strides(self.shape)

    def record_stream(self, stream):
        sys.modules["torch"].recorded.append((self._ptr, stream.handle))


@pytest.fixture
def fake_torch(monkeypatch):
    torch = ModuleType("torch")
    torch.bfloat16, torch.float16 = "torch.bfloat16", "torch.float16"
    torch.float32, torch.int32 = "torch.float32", "torch.int32"
    torch.allocations = []

    def empty(shape, dtype, device):
        assert device == "cuda:0"
        torch.allocations.append((tuple(shape), dtype))
        return FakeTorchTensor(shape, dtype)

    torch.empty = empty
    torch.recorded = []                 # (pointer, stream) of record_stream calls
    torch.device = lambda kind, index: f"{kind}:{index}"
    torch.cuda = SimpleNamespace(current_stream=lambda device: SimpleNamespace(cuda_stream=0xABC),
                                 ExternalStream=lambda handle, device: SimpleNamespace(handle=handle))
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


@pytest.fixture
def fake_driver(monkeypatch):
    calls = []

    class Context:
        def __init__(self, ordinal):
            calls.append(("context", ordinal))

        def __enter__(self):
            return 77

        def __exit__(self, *exc):
            pass

    def get_function(ctx, image, digest, symbol, smem):
        calls.append(("function", ctx, image, symbol, smem))
        return symbol

    monkeypatch.setattr(driver, "primary_context", Context)
    monkeypatch.setattr(driver, "get_function", get_function)
    monkeypatch.setattr(driver, "memset_async", lambda ptr, nbytes, byte, stream: calls.append(
        ("memset", ptr, nbytes, stream) if byte == 0 else ("poison", ptr, nbytes, byte, stream)))
    monkeypatch.setattr(driver, "launch", lambda func, grid, block, cluster, smem, stream, address:
                        calls.append(("launch", func, grid, block, smem, stream)))
    return calls


def torch_arguments(B=2, H=8, HKV=2, M=1000, N=1100, P=16):
    return {"q": FakeTorchTensor((B, H, M, 128)), "k": FakeTorchTensor((B, HKV, N, 128)),
            "v": FakeTorchTensor((B, HKV, N, 128)), "slopes": FakeTorchTensor((H,), "torch.float32"),
            "P": P}


def kernel(target="sm_80", capability=(8, 0)) -> Kernel:
    manifest = synthetic_manifest(target)
    return Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), FakePlatform(capability))


def read_params(packed, types):
    """The values behind cuLaunchKernel's `void **`, read back as the kernel would."""
    pointers = (ctypes.c_void_p * len(types)).from_address(packed.address)
    return [ctype.from_address(pointers[i]).value for i, ctype in enumerate(types)]


def test_outputs_and_scratch_are_allocated_with_torch(fake_torch):
    bound = kernel().bind(**torch_arguments())
    assert fake_torch.allocations == [((2, 8, 1000, 128), "torch.bfloat16"), ((2, 8, 1000), "torch.float32"),
                                      ((math.ceil(144 / 4),), "torch.int32")]
    assert set(bound.outputs) == {"o", "lse"}
    assert all(type(t) is FakeTorchTensor for t in bound.outputs.values())


def test_given_outputs_are_returned_as_given(fake_torch):
    o = FakeTorchTensor((2, 8, 1000, 128))
    bound = kernel().bind(**torch_arguments(), o=o)
    assert bound.outputs["o"] is o
    assert [shape for shape, _ in fake_torch.allocations] == [(2, 8, 1000), (36,)]


def test_parameters_are_packed_in_abi_order(fake_torch):
    args = torch_arguments()
    bound = kernel().bind(**args)
    scratch = bound._scratch["blockmap"].data_ptr()
    u64, i32, i64 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64
    assert read_params(bound._params[0], [u64, i32, i32, i32]) == [scratch, 1000, 1100, 16]
    o, lse = bound.outputs["o"], bound.outputs["lse"]
    ptrs = [t.data_ptr() for t in (args["q"], args["k"], args["v"], args["slopes"], o, lse)]
    strides = [1024000, 128000, 128, 281600, 140800, 128, 281600, 140800, 128, 1024000, 128000, 128,
               8000, 1000]
    types = [u64] * 7 + [i64] * 14 + [i32] * 5
    assert read_params(bound._params[1], types) == [*ptrs, scratch, *strides, 1000, 1100, 8, 2, 16]


def test_pack_of_no_parameters_is_still_an_address():
    assert pack([]).address != 0


def test_param_values_reads_strides_of_non_contiguous_views():
    manifest = synthetic_manifest()
    k = Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), FakePlatform())
    args = synthetic_arguments(outputs=True)
    args["q"] = FakeTensor((2, 8, 1000, 128), "bf16", strides=(8 * 1000 * 256, 256, 8 * 256, 1))
    plan = k.plan(**args)
    values = param_values(k.manifest.kernels[1], plan.dims, plan.views, {"blockmap": 0})
    assert [v.value for v in values[7:10]] == [8 * 1000 * 256, 256, 8 * 256]


def test_launch_sequence(fake_torch, fake_driver):
    bound = kernel().bind(**torch_arguments())
    bound.launch()
    cubin = b"not a real cubin"
    assert fake_driver == [
        ("context", 0),
        ("function", 77, cubin, "attnc_synthetic_blockmap", 0),
        ("function", 77, cubin, "attnc_synthetic_fwd", 65536),
        ("launch", "attnc_synthetic_blockmap", (9, 8, 2), (128, 1, 1), 0, 0xABC),   # fills the map: no memset
        ("launch", "attnc_synthetic_fwd", (8, 8, 2), (128, 1, 1), 65536, 0xABC),
    ]


def test_launch_on_a_given_stream_with_ptx(fake_torch, fake_driver):
    bound = kernel(capability=(9, 0)).bind(**torch_arguments())
    bound.launch(stream=SimpleNamespace(cuda_stream=0x999))
    images = {call[2] for call in fake_driver if call[0] == "function"}
    assert images == {b"not a real ptx\0"}                  # PTX goes to the driver as a C string
    assert {call[-1] for call in fake_driver if call[0] in ("memset", "launch")} == {0x999}


def test_kernels_with_an_empty_grid_are_not_launched(fake_torch, fake_driver):
    kernel()(**torch_arguments(M=0))
    launched = [call[1] for call in fake_driver if call[0] == "launch"]
    assert launched == []                                   # both grids have cdiv(M, 128) = 0 blocks


def test_call_returns_the_outputs(fake_torch, fake_driver):
    out = kernel()(**torch_arguments())
    assert list(out) == ["o", "lse"] and out["o"].shape == (2, 8, 1000, 128)


def test_kernels_with_dynamic_shared_memory_ask_for_the_largest_carveout(monkeypatch):
    """Note [Shared memory carveout] (driver.py): a kernel that sizes its shared memory opts
    in above 48 KiB and asks for the largest shared-memory carveout; one without asks
    nothing."""
    cu, ok = driver.cu, driver.cu.CUresult.CUDA_SUCCESS
    calls = []
    monkeypatch.setattr(driver, "_functions", {})
    monkeypatch.setattr(driver, "_modules", {})
    monkeypatch.setattr(cu, "cuModuleLoadData", lambda image: (ok, "module"))
    monkeypatch.setattr(cu, "cuModuleGetFunction", lambda module, name: (ok, name.decode()))
    monkeypatch.setattr(cu, "cuFuncSetAttribute", lambda func, attr, value: calls.append((func, attr, value)) or (ok,))
    for symbol, smem in (("big", 80 * 1024), ("small", 16 * 1024), ("none", 0)):
        assert driver.get_function(1, b"code", "digest", symbol, smem) == symbol
    carveout = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    assert calls == [("big", cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 80 * 1024),
                     ("big", carveout, 100), ("small", carveout, 100)]


def test_a_bound_launch_keeps_its_inputs_alive(fake_torch):
    """The packed parameters are raw addresses: a temporary given to bind (here every
    input) must outlive the call, or a later launch reads freed memory."""
    import gc
    import weakref
    args = torch_arguments()
    refs = [weakref.ref(t) for t in args.values() if isinstance(t, FakeTorchTensor)]
    assert refs
    bound = kernel().bind(**args)
    del args
    gc.collect()
    assert all(r() is not None for r in refs)
    del bound
    gc.collect()
    assert all(r() is None for r in refs)


# -- Note [Reused masks] -----------------------------------------------------------

def launches(calls) -> list:
    return [(c[0], c[1]) for c in calls if c[0] in ("memset", "launch")]


def mask_manifest(**changes) -> dict:
    """The synthetic bundle with its block-map kernel reading the param `slopes`, and a
    second scratch (a counter) that only the attention kernel takes."""
    manifest = synthetic_manifest()
    manifest["kernels"][0]["params"].append({"kind": "ptr", "tensor": "slopes"})
    manifest["kernels"][1]["params"].append({"kind": "scratch", "name": "counter", "bytes": [4]})
    manifest.update(changes)
    return manifest


def mask_reading_kernel(**changes) -> Kernel:
    manifest = mask_manifest(**changes)
    return Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), FakePlatform())


def test_the_mask_kernels_are_those_of_role_mask():
    assert mask_reading_kernel().manifest.mask_kernels == (0,)
    manifest = mask_manifest()
    del manifest["kernels"][0]["role"], manifest["kernels"][0]["fills"]
    assert Bundle.from_files(manifest, synthetic_files(manifest)).manifest.mask_kernels == ()


def table_kernel(fills=("table",), reads=None) -> dict:
    """A mask kernel filling scratch 'table' (as the tile table is), and reading `reads`."""
    params = [{"kind": "scratch", "name": "table", "bytes": [16]}, {"kind": "dim", "name": "N", "type": "i32"}]
    if reads:
        params.append({"kind": "scratch", "name": reads, "bytes": ["B", ["cdiv", "M", 128], ["cdiv", "N", 128]]})
    return {"name": "table", "symbol": "attnc_synthetic_table", "block": [32, 1, 1], "dynamic_smem_bytes": 0,
            "grid": [[], [], []], "params": params, "role": "mask", "fills": list(fills)}


def test_a_mask_kernel_may_read_an_earlier_mask_kernels_scratch():
    manifest = mask_manifest()
    manifest["kernels"].insert(0, table_kernel())
    manifest["kernels"][1]["params"].append({"kind": "scratch", "name": "table", "bytes": [16]})
    assert Bundle.from_files(manifest, synthetic_files(manifest)).manifest.mask_kernels == (0, 1)


@pytest.mark.parametrize("change, message", [
    (lambda m: m["kernels"][0]["params"].append({"kind": "ptr", "tensor": "q"}), "reads params only, not q"),
    (lambda m: m["kernels"][0]["params"].append({"kind": "ptr", "tensor": "o"}), "reads params only, not o"),
    (lambda m: m["kernels"][0].update(params=m["kernels"][0]["params"][1:]),
     r"fills: 'blockmap' is not a scratch param"),
    (lambda m: m["kernels"][0].pop("fills"), "names none in 'fills'"),
    (lambda m: m["kernels"].reverse(), "scratch 'blockmap' is taken by an earlier kernel"),
    (lambda m: m["kernels"][0].update(role="prologue"), "role: 'prologue' is not one of"),
    (lambda m: m["kernels"][1].update(fills=["blockmap"]), "only a kernel of role 'mask' fills scratch"),
    # A second mask kernel that reads the first's scratch is fine (below); one that reads
    # scratch no earlier mask kernel filled, or fills the first's again, is not.
    (lambda m: m["kernels"].insert(0, table_kernel(fills=[])), "names none in 'fills'"),
    (lambda m: m["kernels"].insert(0, table_kernel(reads="blockmap")),
     "reads scratch 'blockmap', which no earlier mask kernel fills"),
    (lambda m: m["kernels"].insert(1, table_kernel(fills=["blockmap"], reads="blockmap")),
     "scratch 'blockmap' is taken by an earlier kernel"),
])
def test_mask_kernels_are_checked(change, message):
    manifest = mask_manifest()
    change(manifest)
    with pytest.raises(ManifestError, match=message):
        Bundle.from_files(manifest, synthetic_files(manifest))


def test_mask_from_is_not_a_tensor_name():
    manifest = synthetic_manifest()
    manifest["inputs"][3]["name"] = "mask_from"
    manifest["kernels"][1]["params"][3]["tensor"] = "mask_from"
    with pytest.raises(ManifestError, match="'mask_from' is a keyword of the runtime's Kernel.bind"):
        Bundle.from_files(manifest, synthetic_files(manifest))


def test_reuse_mask_leaves_out_the_mask_kernels_and_their_zeroing(fake_torch, fake_driver):
    bound = mask_reading_kernel().bind(**torch_arguments())
    scratch, counter = bound._scratch_ptrs["blockmap"], bound._scratch_ptrs["counter"]
    bound.launch()
    bound.launch(reuse_mask=True)
    bound.launch(reuse_mask=True)
    bound.launch()
    full = [("memset", counter), ("launch", "attnc_synthetic_blockmap"), ("launch", "attnc_synthetic_fwd")]
    reused = [("memset", counter), ("launch", "attnc_synthetic_fwd")]     # scratch no kernel fills: zeroed
    assert launches(fake_driver) == full + reused + reused + full
    assert scratch not in {c[1] for c in fake_driver if c[0] == "memset"}   # the map kernel fills its own


def test_poisoned_scratch_is_set_before_the_mask_kernels_that_fill_it(fake_torch, fake_driver, monkeypatch):
    """Note [Filled scratch]: ATTNC_POISON_SCRATCH=1 sets the filled scratch to 0xFF bytes
    before each build (the GPU check that every byte read is written); a reused map is
    left as built."""
    monkeypatch.setenv("ATTNC_POISON_SCRATCH", "1")
    bound = mask_reading_kernel().bind(**torch_arguments())
    scratch, counter = bound._scratch_ptrs["blockmap"], bound._scratch_ptrs["counter"]
    bound.launch()
    bound.launch(reuse_mask=True)
    assert [c for c in fake_driver if c[0] in ("memset", "poison", "launch")] == [
        ("poison", scratch, 144, 0xFF, 0xABC), ("memset", counter, 4, 0xABC),
        ("launch", "attnc_synthetic_blockmap", (9, 8, 2), (128, 1, 1), 0, 0xABC),
        ("launch", "attnc_synthetic_fwd", (8, 8, 2), (128, 1, 1), 65536, 0xABC),
        ("memset", counter, 4, 0xABC),
        ("launch", "attnc_synthetic_fwd", (8, 8, 2), (128, 1, 1), 65536, 0xABC)]
    monkeypatch.setenv("ATTNC_POISON_SCRATCH", "0")
    fake_driver.clear()
    mask_reading_kernel().bind(**torch_arguments()).launch()
    assert [c[0] for c in fake_driver if c[0] in ("memset", "poison")] == ["memset"]     # the counter only


def test_a_mask_is_reused_only_once_built_on_the_same_stream(fake_torch, fake_driver):
    bound = mask_reading_kernel().bind(**torch_arguments())
    with pytest.raises(AttncRuntimeError, match="launch this binding once without reuse_mask"):
        bound.launch(reuse_mask=True)
    assert launches(fake_driver) == []
    bound.launch(stream=SimpleNamespace(cuda_stream=0x999))
    with pytest.raises(AttncRuntimeError, match="built on stream 0x999, this launch is on 0xabc"):
        bound.launch(reuse_mask=True)
    bound.launch(reuse_mask=True, stream=0x999)


def test_a_failed_build_leaves_no_mask_to_reuse(fake_torch, fake_driver, monkeypatch):
    bound = mask_reading_kernel().bind(**torch_arguments())
    bound.launch()

    def fail(*args):
        raise AttncRuntimeError("launch failed")
    monkeypatch.setattr(driver, "launch", fail)
    with pytest.raises(AttncRuntimeError, match="launch failed"):
        bound.launch()                   # the map may be half written: it is not kept
    with pytest.raises(AttncRuntimeError, match="launch this binding once without reuse_mask"):
        bound.launch(reuse_mask=True)


def test_mask_from_reads_the_first_bindings_map(fake_torch, fake_driver):
    k = mask_reading_kernel()
    args = torch_arguments()
    first = k.bind(**args)
    layer = torch_arguments()
    layer["slopes"] = args["slopes"]
    second = k.bind(**layer, mask_from=first)
    third = k.bind(**layer, mask_from=second)              # a chain reads the first's map
    assert second._scratch_ptrs["blockmap"] == third._scratch_ptrs["blockmap"] == first._scratch_ptrs["blockmap"]
    assert len({b._scratch_ptrs["counter"] for b in (first, second, third)}) == 3    # not the mask's
    for bound in (second, third):
        with pytest.raises(AttncRuntimeError, match="the first of the mask_from chain.*has not launched"):
            bound.launch()
        with pytest.raises(AttncRuntimeError, match="the first of the mask_from chain.*has not launched"):
            bound.launch(reuse_mask=True)
    first.launch()
    fake_driver.clear()
    second.launch()
    third.launch()
    k(**layer, mask_from=first)
    assert [c for c in launches(fake_driver) if c[0] == "launch"] == [("launch", "attnc_synthetic_fwd")] * 3
    own = [layer[t].data_ptr() for t in ("q", "k", "v", "slopes")]
    assert read_params(second._params[1], [ctypes.c_uint64] * 7) == [
        *own, *(second.outputs[t].data_ptr() for t in ("o", "lse")), first._scratch_ptrs["blockmap"]]


def test_a_reader_keeps_the_map_alive_not_the_first_binding(fake_torch):
    import gc
    import weakref
    k = mask_reading_kernel()
    args = torch_arguments()
    first = k.bind(**args)
    q = weakref.ref(args.pop("q"))
    second = k.bind(**{**torch_arguments(), "slopes": args["slopes"]}, mask_from=first)
    del first
    gc.collect()
    assert q() is None and second._scratch["blockmap"] is second._mask.buffers["blockmap"]


@pytest.mark.parametrize("change, message", [
    ({"M": 999}, r"other dims \(M = 1000 there, 999 here\)"),
    ({"P": 17}, r"other dims \(P = 16 there, 17 here\)"),
    ({}, "built from another 'slopes' tensor"),
])
def test_mask_from_refuses_another_mask(fake_torch, change, message):
    k = mask_reading_kernel()
    args = torch_arguments()
    first = k.bind(**args)
    other = torch_arguments(**change)
    if change:
        other["slopes"] = args["slopes"]
    with pytest.raises(AttncRuntimeError, match=message):
        k.bind(**other, mask_from=first)


def test_mask_from_refuses_another_device(fake_torch):
    k = mask_reading_kernel()
    args = torch_arguments()
    first = k.bind(**args)
    plan = k.plan(**args)
    moved = dataclasses.replace(plan, device=dataclasses.replace(plan.device, ordinal=1))
    with pytest.raises(AttncRuntimeError, match="bound on device 0, this launch on device 1"):
        BoundLaunch(k.bundle, moved, args, mask_from=first)


def test_mask_from_refuses_another_bundle_and_other_objects(fake_torch):
    first = mask_reading_kernel().bind(**torch_arguments())
    other = mask_reading_kernel(variant="another")
    with pytest.raises(AttncRuntimeError, match=r"another bundle \(synthetic for sm_80; this is another for sm_80\)"):
        other.bind(**torch_arguments(), mask_from=first)
    with pytest.raises(AttncRuntimeError, match="expected a bound launch"):
        other.bind(**torch_arguments(), mask_from="the map")


def test_without_mask_kernels_reuse_is_a_no_op(fake_torch, fake_driver):
    manifest = synthetic_manifest()
    del manifest["kernels"][0]["role"], manifest["kernels"][0]["fills"]
    k = Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), FakePlatform())
    assert k.manifest.mask_kernels == ()
    first = k.bind(**torch_arguments())
    first.launch(reuse_mask=True)
    k(**torch_arguments(M=500), mask_from=first)
    assert [c[1] for c in launches(fake_driver) if c[0] == "launch"] == [
        "attnc_synthetic_blockmap", "attnc_synthetic_fwd"] * 2


def test_scratch_is_not_written_again_on_another_stream(fake_torch, fake_driver):
    """A build on another stream would overwrite the map (and the zeroed counter) while the
    first stream's launches, this binding's or a mask_from reader's, may still read it."""
    k = mask_reading_kernel()
    args = torch_arguments()
    first = k.bind(**args)
    reader = k.bind(**{**torch_arguments(), "slopes": args["slopes"]}, mask_from=first)
    first.launch(stream=0x999)
    reader.launch(stream=0x999)
    with pytest.raises(AttncRuntimeError, match="^the mask was built on stream 0x999; writing its scratch "
                                                "again on 0xabc could overwrite it"):
        first.launch()
    with pytest.raises(AttncRuntimeError, match="^the mask was built on stream 0x999; .* launch on "
                                                "0x999, or bind again for this stream$"):
        first.launch(stream=0xABC)
    first.launch(stream=0x999)                      # the same stream: ordered after the readers
    k.bind(**torch_arguments()).launch()            # a new binding has its own scratch


def test_own_scratch_is_not_zeroed_again_on_another_stream(fake_torch, fake_driver):
    """Without mask kernels, the scratch is every kernel's own (zeroed before each launch):
    the same rule holds for it."""
    manifest = mask_manifest()
    del manifest["kernels"][0]["role"], manifest["kernels"][0]["fills"]
    bound = Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), FakePlatform()).bind(**torch_arguments())
    bound.launch(stream=0x999)
    bound.launch(stream=0x999)
    with pytest.raises(AttncRuntimeError, match="^this binding last launched on stream 0x999; writing its "
                                                "scratch again on 0xabc"):
        bound.launch()


def test_the_default_and_the_legacy_stream_count_as_one(fake_torch, fake_driver):
    """Handles 0 (the default stream: the legacy one, or a per-thread one) and 1 (the legacy
    stream) order their work both ways, so scratch and a kept mask pass between them; any
    other stream is still refused."""
    bound = mask_reading_kernel().bind(**torch_arguments())
    bound.launch(stream=0)
    bound.launch(stream=1)
    bound.launch(reuse_mask=True, stream=0)
    bound.launch(reuse_mask=True, stream=1)
    with pytest.raises(AttncRuntimeError, match="built on stream 0x1, this launch is on 0x2"):
        bound.launch(reuse_mask=True, stream=2)
    with pytest.raises(AttncRuntimeError, match="^the mask was built on stream 0x1; writing its scratch"):
        bound.launch(stream=2)


def test_a_binding_without_scratch_launches_on_any_stream(fake_torch, fake_driver):
    manifest = synthetic_manifest()
    for kernel in manifest["kernels"]:
        kernel["params"] = [p for p in kernel["params"] if p["kind"] != "scratch"]
        kernel.pop("role", None), kernel.pop("fills", None)
    bound = Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), FakePlatform()).bind(**torch_arguments())
    assert bound.plan.scratch == {}
    bound.launch(stream=0x999)
    bound.launch()


def test_a_launch_waits_for_the_streams_its_arrays_are_made_on(fake_torch, fake_driver, monkeypatch):
    """Note [Producer streams]: a `__cuda_array_interface__` stream (a param's, a given
    output's) is waited for on the launch's stream before anything is queued there, and
    not where it is that stream."""
    monkeypatch.setattr(driver, "wait_for", lambda producer, consumer: fake_driver.append(
        ("wait", producer, consumer)))

    def bound_with_streams():
        args = torch_arguments()
        args["slopes"] = FakeTensor((8,), "f32", stream=0x55)
        return kernel().bind(**args, lse=FakeTensor((2, 8, 1000), "f32", stream=0x66))

    bound_with_streams().launch()                       # torch's current stream, 0xABC
    queued = [c for c in fake_driver if c[0] in ("wait", "memset", "launch")]
    assert queued[:2] == [("wait", 0x55, 0xABC), ("wait", 0x66, 0xABC)]
    assert [c[0] for c in queued[2:]] == ["launch", "launch"]
    fake_driver.clear()
    bound_with_streams().launch(stream=0x55)
    assert [c for c in fake_driver if c[0] == "wait"] == [("wait", 0x66, 0x55)]
    fake_driver.clear()
    kernel().bind(**torch_arguments()).launch()          # torch tensors: the call's stream is theirs
    assert [c for c in fake_driver if c[0] == "wait"] == []
    # A DLPack array, asked for with no stream, is ready on the legacy default stream (1).
    fake_driver.clear()
    args = torch_arguments()
    args["slopes"] = FakeTensor((8,), "f32", protocol="dlpack")
    kernel().bind(**args).launch()
    assert [c for c in fake_driver if c[0] == "wait"] == [("wait", 1, 0xABC)]
    fake_driver.clear()
    kernel().bind(**args).launch(stream=0)              # the default stream: ordered already
    assert [c for c in fake_driver if c[0] == "wait"] == []


def test_memory_the_runtime_allocated_is_recorded_on_another_stream(fake_torch, fake_driver):
    """Note [Memory used on another stream] (found by a review): outputs and scratch
    allocated at the bind on torch's current stream (0xABC) and launched on another are
    recorded there once, so that freeing them does not hand their memory to a new tensor
    while the launch still writes it; on the allocating stream nothing is recorded."""
    kernel().bind(**torch_arguments()).launch()
    assert fake_torch.recorded == []
    bound = kernel().bind(**torch_arguments())
    bound.launch(stream=0x999)
    allocated = {t.data_ptr() for t in bound.outputs.values()} | {t.data_ptr() for t in bound._scratch.values()}
    assert {ptr for ptr, _ in fake_torch.recorded} == allocated and len(allocated) == 3     # o, lse, the map
    assert {stream for _, stream in fake_torch.recorded} == {0x999}
    bound.launch(stream=0x999)
    assert len(fake_torch.recorded) == 3                # once a stream
    given = kernel().bind(**torch_arguments(), o=FakeTorchTensor((2, 8, 1000, 128)))
    fake_torch.recorded.clear()
    given.launch(stream=0x999)
    assert given.outputs["o"].data_ptr() not in {ptr for ptr, _ in fake_torch.recorded}    # the caller's


def test_a_param_may_be_named_self(fake_torch):
    """bind and __call__ take `self` by position only, so a param of that name (which the
    language allows) is passed by keyword like any other (found by a review)."""
    manifest = synthetic_manifest()
    manifest["inputs"][3]["name"] = "self"
    manifest["kernels"][1]["params"][3]["tensor"] = "self"
    k = Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), FakePlatform())
    args = torch_arguments()
    args["self"] = args.pop("slopes")
    bound = k.bind(**args)
    assert read_params(bound._params[1], [ctypes.c_uint64] * 4)[3] == args["self"].data_ptr()


def test_a_torch_tensor_whose_memory_changed_since_the_bind_is_refused(fake_torch, fake_driver):
    """`t.data = u` or `resize_` frees the memory the bind packed (found by a review: the
    launch would then read or write freed memory)."""
    args = torch_arguments()
    bound = kernel().bind(**args)
    bound.launch()
    old = args["slopes"].data_ptr()
    args["slopes"]._ptr = old + 0x100000
    with pytest.raises(AttncRuntimeError, match=f"^slopes: its memory changed since the bind \\({old:#x} -> "):
        bound.launch()


def test_a_torch_tensor_whose_layout_changed_since_the_bind_is_refused(fake_torch, fake_driver):
    """An in-place view op (transpose_, as_strided_, resize_ to fewer elements) keeps the
    data pointer but not the shape and strides the bind packed (found by a review: only
    the pointer was compared, and the kernels read with the old strides)."""
    args = torch_arguments()
    bound = kernel().bind(**args)
    bound.launch()
    q = args["q"]
    b, h, m, d = q.shape
    q.shape = (b, m, h, d)                  # as q.transpose_(1, 2) leaves it
    q.stride = lambda: (h * m * d, d, m * d, 1)
    with pytest.raises(AttncRuntimeError, match=r"^q: its shape or strides changed since the bind \(shape "
                                                r"\(2, 8, 1000, 128\), strides \(1024000, 128000, 128, 1\) -> "
                                                r"shape \(2, 1000, 8, 128\), strides \(1024000, 128, 128000, 1\)"):
        bound.launch()
