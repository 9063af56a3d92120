"""Tensor adapters: what the runtime reads off torch, __cuda_array_interface__ and DLPack objects."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.tensors import dlpack_capsule_view, view
from attnc_runtime.testing import FakeTensor


class _CAI:
    def __init__(self, **cai):
        self.__cuda_array_interface__ = {"version": 3, "data": (0x1000, False), **cai}


def test_cuda_array_interface_strides_become_elements():
    v = view(FakeTensor((2, 3, 4), "f16", strides=(24, 8, 1), ptr=0x2000, device=1), "q")
    assert (v.ptr, v.shape, v.strides, v.dtype, v.device, v.location) == \
        (0x2000, (2, 3, 4), (24, 8, 1), "f16", 1, "cuda")
    assert v.library == "other" and not v.readonly


def test_cuda_array_interface_without_strides_is_c_contiguous():
    v = view(_CAI(shape=(2, 3, 4), typestr="<f4", strides=None), "x")
    assert v.strides == (12, 4, 1) and v.dtype == "f32"
    assert v.device is None        # no .device: the launcher asks the driver about the pointer


def test_cuda_array_interface_byte_strides_must_divide_by_the_item_size():
    with pytest.raises(AttncRuntimeError, match=r"^x: strides \(6, 1\) \(bytes\) are not multiples "
                                                r"of the element size 2$"):
        view(_CAI(shape=(2, 3), typestr="<f2", strides=(6, 1)), "x")


def test_masked_arrays_are_refused():
    with pytest.raises(AttncRuntimeError, match="^x: masked arrays are not supported$"):
        view(_CAI(shape=(2,), typestr="<f2", mask=object()), "x")


@pytest.mark.parametrize("typestr, dtype", [("<f2", "f16"), ("<f4", "f32"), ("<i4", "i32"),
                                            ("|f2", "f16"), ("<f8", None), (">f4", None),
                                            ("<u2", None)])
def test_typestr_mapping(typestr, dtype):
    assert view(_CAI(shape=(4,), typestr=typestr), "x").dtype == dtype


def test_cupy_arrays_are_recognised_by_their_module():
    cupy_like = type("ndarray", (_CAI,), {"__module__": "cupy._core.core"})
    arr = cupy_like(shape=(4,), typestr="<f2")
    arr.device = SimpleNamespace(id=3)
    v = view(arr, "x")
    assert (v.library, v.device) == ("cupy", 3)


def test_readonly_flag_is_kept():
    assert view(FakeTensor((4,), "f32", readonly=True), "x").readonly


def test_bf16_through_dlpack():
    v = view(FakeTensor((2, 8, 16, 64), "bf16", strides=(8192, 1024, 64, 1), ptr=0x4000, device=2), "q")
    assert (v.ptr, v.shape, v.strides, v.dtype, v.device, v.location) == \
        (0x4000, (2, 8, 16, 64), (8192, 1024, 64, 1), "bf16", 2, "cuda")
    assert v.stream == 1        # asked with no stream: ready on the legacy default stream


def test_dlpack_capsule_of_a_numpy_view():
    a = np.zeros((3, 5), np.float32)[:, ::2]
    v = dlpack_capsule_view(a.__dlpack__())
    assert (v.shape, v.strides, v.dtype, v.location, v.ptr) == \
        ((3, 3), (5, 2), "f32", "cpu", a.ctypes.data)


def test_a_read_only_dlpack_array_is_read_only():
    """DLPack 1.0's versioned capsule carries the read-only flag (an output must be writable)."""
    a = np.zeros(4, np.float32)
    assert not dlpack_capsule_view(a.__dlpack__(max_version=(1, 0))).readonly
    a.flags.writeable = False
    assert dlpack_capsule_view(a.__dlpack__(max_version=(1, 0))).readonly


def test_dlpack_unknown_dtype_is_described():
    v = dlpack_capsule_view(np.zeros(3, np.float64).__dlpack__())
    assert v.dtype is None and v.dtype_text == "DLPack dtype (code=2, bits=64, lanes=1)"


def test_a_numpy_array_is_seen_on_the_cpu_without_taking_its_capsule():
    v = view(np.zeros((2, 2), np.float32), "q")
    assert v.location == "cpu"


def test_torch_tensors_are_read_through_their_own_attributes():
    class Tensor:
        __module__ = "torch"
        dtype = "torch.bfloat16"
        shape = (2, 4, 8, 64)
        device = SimpleNamespace(type="cuda", index=1)

        def data_ptr(self):
            return 0x8000

        def stride(self):
            return (2048, 512, 64, 1)

    v = view(Tensor(), "q")
    assert (v.ptr, v.shape, v.strides, v.dtype, v.device, v.library, v.location) == \
        (0x8000, (2, 4, 8, 64), (2048, 512, 64, 1), "bf16", 1, "torch", "cuda")


def test_non_tensors_are_refused_by_name():
    with pytest.raises(AttncRuntimeError, match=r"^slopes: expected a CUDA tensor \(torch, cupy, or "
                                                r"an object with __cuda_array_interface__ or "
                                                r"__dlpack__\), got list$"):
        view([1.0, 2.0], "slopes")


def test_a_tensor_subclass_defined_elsewhere_is_its_librarys(monkeypatch):
    """A torch.Tensor subclass of another module is read as torch's (not through
    __cuda_array_interface__, which torch refuses for tensors that require grad)."""
    from types import ModuleType

    from attnc_runtime.tensors import library_of
    fake = ModuleType("torch")
    fake.Tensor = type("Tensor", (), {"__module__": "torch"})
    monkeypatch.setitem(sys.modules, "torch", fake)
    Mine = type("Mine", (fake.Tensor,), {"__module__": "my_project.tensors"})
    assert library_of(Mine()) == "torch"
    assert library_of(FakeTensor((2,))) == "other"


def test_the_stream_of_a_version_3_interface_is_kept():
    """Note [Producer streams] (kernel.py): the launch waits for it."""
    assert view(FakeTensor((4,), "f32", stream=0x55), "x").stream == 0x55
    assert view(FakeTensor((4,), "f32", stream=1), "x").stream == 1       # the legacy default stream
    assert view(FakeTensor((4,), "f32"), "x").stream is None


def test_an_interface_before_version_3_has_no_stream():
    class Old:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "version": 2, "data": (0x1000, False),
                                    "stream": 0x55}
    assert view(Old(), "x").stream is None


@pytest.mark.parametrize("stream, words", [(0, "stream 0, which the protocol does not allow"),
                                           (-3, "stream -3, not a stream handle"),
                                           ("0x55", "stream '0x55', not a stream handle")])
def test_an_interface_stream_that_is_no_handle_is_refused(stream, words):
    with pytest.raises(AttncRuntimeError, match="x: __cuda_array_interface__ has " + words.replace("(", r"\(")):
        view(FakeTensor((4,), "f32", stream=stream), "x")


def test_a_device_array_is_waited_for_on_the_legacy_stream():
    """DeviceArray.from_numpy copies on the legacy default stream, and the copy may still be
    landing when it returns: a launch on another stream waits for that one (found by a review)."""
    from attnc_runtime.device_array import DeviceArray
    a = DeviceArray.__new__(DeviceArray)            # no GPU here: the fields alone
    a.ptr, a.shape, a.dtype, a.device = 0x1000, (2, 3), "f32", 0
    assert view(a, "x").stream == 1
    a.ptr = None                                    # nothing to free


@pytest.mark.parametrize("values, words", [([2**31 + 5, 7], "holds 7 to 2147483653, outside its range"),
                                           ([0.7, 2.5], "float64 array holds values that are not integers"),
                                           ([float("nan")], "not integers")])
def test_a_device_array_of_i32_keeps_its_values(values, words):
    """Document ids must reach the GPU as the reference reads them: no wrapping or truncation
    on the way to i32 (the copy itself needs a GPU; the conversion does not)."""
    from attnc_runtime.device_array import _to_storage
    with pytest.raises(AttncRuntimeError, match=words):
        _to_storage(np.array(values), "i32")
    assert _to_storage(np.array([1.0, -3.0]), "i32").tolist() == [1, -3]


def test_a_device_array_takes_ml_dtypes_bf16():
    import ml_dtypes
    from attnc_runtime.device_array import _dtype_of, _to_storage
    x = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    assert _dtype_of(x) == "bf16"
    assert _to_storage(x, "bf16").tolist() == x.view(np.uint16).tolist()


@pytest.mark.parametrize("layout, nested, words", [("torch.sparse_coo", False, "a torch.sparse_coo tensor"),
                                                   ("torch.strided", True, "a nested tensor")])
def test_a_sparse_or_nested_torch_tensor_is_refused_by_name(layout, nested, words):
    """torch's own error from stride() escaped before (found by a review)."""
    class Tensor:
        __module__ = "torch"
        is_nested = nested

        def data_ptr(self):
            return 0x1000

        def stride(self):
            raise RuntimeError("Sparse tensors do not have strides")
    Tensor.layout = layout
    with pytest.raises(AttncRuntimeError, match=f"^k: {words}; expected a dense \\(torch.strided\\) one$"):
        view(Tensor(), "k")
