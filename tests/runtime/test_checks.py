"""Argument checks: what a launch would do, and every refusal, by its exact message.

All on fake tensors and a fake GPU (attnc_runtime.testing): nothing here needs a GPU,
and a refusal is raised before any allocation or launch.
"""
from __future__ import annotations

import numpy as np
import pytest

from attnc_runtime import Bundle, Kernel
from attnc_runtime.errors import AttncRuntimeError
from attnc_runtime.testing import (FakePlatform, FakeTensor, synthetic_arguments, synthetic_files,
                                   synthetic_manifest)


def make_kernel(manifest=None, platform=None) -> Kernel:
    manifest = manifest or synthetic_manifest()
    return Kernel(Bundle.from_files(manifest, synthetic_files(manifest)), platform or FakePlatform())


def refusal(kernel: Kernel, *args, **kwargs) -> str:
    with pytest.raises(AttncRuntimeError) as info:
        kernel.plan(*args, **kwargs)
    return str(info.value)


def test_plan_binds_dims_computes_grids_and_lists_outputs_to_allocate():
    plan = make_kernel().plan(**synthetic_arguments(B=2, H=8, HKV=2, M=1000, N=1100))
    assert plan.dims == {"B": 2, "H": 8, "HKV": 2, "M": 1000, "N": 1100, "P": 16}
    assert plan.grids == ((9, 8, 2), (8, 8, 2))        # blockmap (cdiv N, cdiv M, B), attention
    assert [(spec.name, shape) for spec, shape in plan.allocate] == \
        [("o", (2, 8, 1000, 128)), ("lse", (2, 8, 1000))]
    assert plan.scratch == {"blockmap": 2 * 8 * 9}
    assert (plan.code_kind, plan.library, plan.device.ordinal) == ("cubin", "other", 0)


def test_a_persistent_grid_is_at_most_one_cta_per_sm():
    """["min_sms", ...] (Note [Persistent CTAs]): the product of its factors, capped at the
    device's SM count."""
    manifest = synthetic_manifest()
    manifest["kernels"][1]["grid"] = [[["min_sms", ["cdiv", "M", 128], "H", "B"]], [1], [1]]
    kernel = make_kernel(manifest, FakePlatform(multiprocessors=132))
    assert kernel.plan(**synthetic_arguments(B=2, H=8, M=2000)).grids[1] == (132, 1, 1)    # not 256
    assert kernel.plan(**synthetic_arguments(B=1, H=2, M=1000)).grids[1] == (16, 1, 1)


def test_a_small_grid_launches_its_own_kernel():
    """`small_grid` (Note [Small grids] in attnc/backend/kernel_abi.py): at most
    up_to_ctas_per_sm CTAs per SM on the kernel's grid launch the other symbol on its grid."""
    manifest = synthetic_manifest()
    manifest["kernels"][1]["small_grid"] = {"symbol": "attnc_synthetic_fwd_tiles_last",
                                            "grid": [["H"], ["B"], [["cdiv", "M", 128]]], "up_to_ctas_per_sm": 2}
    kernel = make_kernel(manifest, FakePlatform(multiprocessors=100))
    small = kernel.plan(**synthetic_arguments(B=2, H=8, M=1000))            # 8 * 8 * 2 = 128 CTAs <= 200
    assert small.grids[1] == (8, 2, 8) and small.symbols == ("attnc_synthetic_blockmap",
                                                             "attnc_synthetic_fwd_tiles_last")
    large = kernel.plan(**synthetic_arguments(B=2, H=8, M=2000))            # 16 * 8 * 2 = 256 CTAs > 200
    assert large.grids[1] == (16, 8, 2) and large.symbols[1] == "attnc_synthetic_fwd"
    # No CTA: the kernel's own grid, which launches nothing (the small one's could break a limit).
    manifest["kernels"][1]["small_grid"]["grid"] = [["H"], ["B"], ["M"]]
    empty = make_kernel(manifest, FakePlatform(multiprocessors=100)).plan(**synthetic_arguments(B=0, M=100_000))
    assert empty.symbols[1] == "attnc_synthetic_fwd" and 0 in empty.grids[1]


@pytest.mark.parametrize("small_grid, message", [
    ({"grid": [[1], [1], [1]], "up_to_ctas_per_sm": 2}, "small_grid: missing field 'symbol'"),
    ({"symbol": "s", "grid": [[1], [1], [1]], "up_to_ctas_per_sm": 0}, "up_to_ctas_per_sm"),
    ({"symbol": "s", "grid": [[1], [1]], "up_to_ctas_per_sm": 2}, "small_grid.grid"),
])
def test_a_malformed_small_grid_is_refused(small_grid, message):
    from attnc_runtime.errors import ManifestError
    manifest = synthetic_manifest()
    manifest["kernels"][1]["small_grid"] = small_grid
    with pytest.raises(ManifestError, match=message):
        make_kernel(manifest)


def test_given_outputs_are_checked_not_allocated():
    plan = make_kernel().plan(**synthetic_arguments(outputs=True))
    assert plan.allocate == () and set(plan.views) == {"q", "k", "v", "slopes", "o", "lse"}


def test_inputs_by_position_and_none_outputs():
    args = synthetic_arguments()
    plan = make_kernel().plan(args["q"], args["k"], args["v"], args["slopes"], P=16, o=None)
    assert [spec.name for spec, _ in plan.allocate] == ["o", "lse"]


def test_ptx_is_chosen_on_a_newer_gpu():
    assert make_kernel(platform=FakePlatform((9, 0))).plan(**synthetic_arguments()).code_kind == "ptx"


def test_empty_sequence_gives_an_empty_grid_and_skips_layout_checks():
    args = synthetic_arguments(M=0)
    args["q"] = FakeTensor((2, 8, 0, 128), "bf16", ptr=0)
    plan = make_kernel().plan(**args)
    assert plan.grids[1] == (0, 8, 2)


def test_strides_of_size_one_dims_are_not_checked():
    args = synthetic_arguments(B=1)
    args["q"] = FakeTensor((1, 8, 1000, 128), "bf16", strides=(3, 128000, 128, 1))
    make_kernel().plan(**args)


# -- refusals ---------------------------------------------------------------------

def test_unknown_argument():
    assert refusal(make_kernel(), **synthetic_arguments(), scale=0.5) == (
        "unknown argument 'scale'; synthetic takes inputs q, k, v, slopes; outputs (optional) "
        "o, lse; dims (ints) B, H, M, HKV, N, P")


def test_missing_input():
    args = synthetic_arguments()
    del args["slopes"]
    assert refusal(make_kernel(), **args) == "missing input 'slopes': f32[H]"


def test_too_many_positional_inputs():
    a = synthetic_arguments()
    assert refusal(make_kernel(), a["q"], a["k"], a["v"], a["slopes"], a["q"], P=1) == \
        "synthetic takes 4 positional inputs (q, k, v, slopes), got 5"


def test_input_given_twice():
    a = synthetic_arguments()
    assert refusal(make_kernel(), a["q"], **a) == "input 'q' given both by position and by name"


@pytest.mark.parametrize("value, message", [
    ("16", "dim P must be an int, got '16'"),
    (True, "dim P must be an int, got True"),
    (2.0, "dim P must be an int, got 2.0"),
    (-1, "dim P must not be negative, got -1"),
])
def test_scalar_dim_must_be_a_non_negative_int(value, message):
    assert refusal(make_kernel(), **{**synthetic_arguments(), "P": value}) == message


def test_numpy_ints_are_ints():
    assert make_kernel().plan(**{**synthetic_arguments(), "P": np.int64(7)}).dims["P"] == 7


def test_missing_scalar_dim():
    args = synthetic_arguments()
    del args["P"]
    assert refusal(make_kernel(), **args) == \
        "dim P is not given by any tensor shape; pass it as an int, e.g. kernel(..., P=...)"


def test_a_dim_nothing_reads_may_be_left_out():
    """A `dim` the variant declares but never uses sizes nothing and no kernel takes it: a
    launch need not pass it (found by a review: it had to), and may."""
    manifest = synthetic_manifest()
    manifest["dims"].append("W")
    assert "W" not in Kernel(Bundle.from_files(manifest, synthetic_files(manifest))).manifest.read_dims
    assert "W" not in make_kernel(manifest).plan(**synthetic_arguments()).dims
    assert make_kernel(manifest).plan(**synthetic_arguments(), W=3).dims["W"] == 3
    # P, which the block map kernel takes, is still required
    assert {"B", "H", "HKV", "M", "N", "P"} <= make_kernel(manifest).manifest.read_dims


@pytest.mark.parametrize("name, tensor, message", [
    ("q", FakeTensor((2, 8, 1000, 128), "f16"), "q: expected dtype bf16, got f16"),
    ("slopes", FakeTensor((8,), "f64"), "slopes: expected dtype f32, got typestr '<f8'"),
    ("slopes", FakeTensor((8, 1), "f32"), "slopes: expected rank 1 (f32[H]), got shape (8, 1)"),
    ("q", np.zeros((2, 8, 1000, 128), np.float16), "q: is on cpu, expected a CUDA device"),
    ("q", FakeTensor((2, 8, 1000, 64), "bf16"),
     "q: shape (2, 8, 1000, 64) does not match bf16[B, H, M, 128]: axis 3 must be 128"),
    ("o", FakeTensor((2, 8, 512, 128), "bf16"), "dim M disagrees: q.shape[2] = 1000 but o.shape[2] = 512"),
    ("v", FakeTensor((2, 2, 1000, 128), "bf16"), "dim N disagrees: k.shape[2] = 1100 but v.shape[2] = 1000"),
    ("slopes", FakeTensor((4,), "f32"), "dim H disagrees: q.shape[1] = 8 but slopes.shape[0] = 4"),
    ("lse", FakeTensor((2, 8, 1000), "f32", readonly=True), "lse: is read-only; outputs must be writable"),
])
def test_tensor_refusals(name, tensor, message):
    assert refusal(make_kernel(), **{**synthetic_arguments(), name: tensor}) == message


def test_dim_argument_disagreeing_with_a_shape():
    assert refusal(make_kernel(), **synthetic_arguments(M=1000), M=5) == \
        "dim M disagrees: argument M=5 but q.shape[2] = 1000"


def test_gqa_divisibility():
    assert refusal(make_kernel(), **synthetic_arguments(H=8, HKV=3)) == "H = 8 must be a multiple of HKV = 3"


def test_no_heads_at_all_is_an_empty_launch():
    """H = HKV = 0: 0 is a multiple of 0, so this is an empty launch as B = 0 is, not a
    refusal of the divisibility (found by a review); H = 8 over no KV heads is refused."""
    sizes = {"B": 2, "H": 0, "HKV": 0, "M": 1000}
    args = {**synthetic_arguments(**sizes), "slopes": FakeTensor((0,), "f32"), "P": 0}
    assert all(0 in grid for grid in slopes_of_p().plan(**args).grids)
    assert refusal(make_kernel(), **synthetic_arguments(H=8, HKV=0)) == "H = 8 must be a multiple of HKV = 0"


def test_equal_constraint():
    manifest = synthetic_manifest()
    manifest["constraints"].append(["equal", "M", "N"])
    assert refusal(make_kernel(manifest), **synthetic_arguments(M=1000, N=1100)) == "M = 1000 must equal N = 1100"


@pytest.mark.parametrize("name, tensor, message", [
    ("q", FakeTensor((2, 8, 1000, 128), "bf16", strides=(1024000, 128000, 128, 2)),
     "q: the last dim must be contiguous (stride 1), got strides (1024000, 128000, 128, 2); "
     "pass a .contiguous() copy"),
    ("q", FakeTensor((2, 8, 1000, 128), "bf16", ptr=0x10008),
     "q: data pointer 0x10008 is not 16-byte aligned"),
    ("q", FakeTensor((2, 8, 1000, 128), "bf16", strides=(1056000, 132000, 132, 1)),
     "q: stride of axis 2 is 132 elements (264 bytes), not a multiple of 16 bytes"),
    ("k", FakeTensor((2, 2, 1100, 128), "bf16", strides=(281600, -140800, 128, 1)),
     "k: axis 1 has a negative stride (-140800)"),
    ("o", FakeTensor((2, 8, 1000, 128), "bf16", strides=(128000, 0, 128, 1)),
     "o: axis 1 has stride 0 (a broadcast view); an output's elements must not overlap"),
    ("slopes", FakeTensor((8,), "f32", ptr=0x10002), "slopes: data pointer 0x10002 is not 4-byte aligned"),
])
def test_layout_refusals(name, tensor, message):
    assert refusal(make_kernel(), **{**synthetic_arguments(), name: tensor}) == message


def test_param_tensors_must_be_contiguous():
    """The kernels read a param at the row-major offset of its indices (hooks.py): a view
    with other strides, a broadcast one included, is refused."""
    manifest = synthetic_manifest()
    slopes = next(t for t in manifest["inputs"] if t["name"] == "slopes")
    slopes["shape"] = ["B", "H"]
    args = synthetic_arguments()
    args["slopes"] = FakeTensor((2, 8), "f32", strides=(0, 1))
    assert refusal(make_kernel(manifest), **args) == (
        "slopes: a param tensor must be contiguous (strides (8, 1)), got strides (0, 1); "
        "pass a .contiguous() copy")
    args["slopes"] = FakeTensor((2, 8), "f32", strides=(16, 1))
    assert "must be contiguous" in refusal(make_kernel(manifest), **args)
    args["slopes"] = FakeTensor((2, 8), "f32")
    make_kernel(manifest).plan(**args)
    args["slopes"] = FakeTensor((1, 8), "f32", strides=(0, 1))      # a size-1 axis: any stride
    make_kernel(manifest).plan(**{**args, "q": FakeTensor((1, 8, 1000, 128), "bf16"),
                                  "k": FakeTensor((1, 2, 1100, 128), "bf16"),
                                  "v": FakeTensor((1, 2, 1100, 128), "bf16")})


def test_broadcast_inputs_are_allowed():
    # k shared by every KV head: stride 0 on an input axis only re-reads memory.
    args = synthetic_arguments()
    args["k"] = FakeTensor((2, 2, 1100, 128), "bf16", strides=(140800, 0, 128, 1))
    make_kernel().plan(**args)


def test_lse_rows_need_only_element_alignment():
    args = synthetic_arguments(M=1001, outputs=True)
    args["lse"] = FakeTensor((2, 8, 1001), "f32", ptr=0x20004)
    make_kernel().plan(**args)


def test_tensors_on_different_devices():
    args = synthetic_arguments()
    args["k"] = FakeTensor((2, 2, 1100, 128), "bf16", device=1)
    args["slopes"] = FakeTensor((8,), "f32", device=None, ptr=0x30000)    # the driver says where
    platform = FakePlatform(devices=2, pointer_devices={0x30000: 1})
    assert refusal(make_kernel(platform=platform), **args) == (
        "tensors are on different devices: q on cuda:0, k on cuda:1, v on cuda:0, slopes on cuda:1")


def test_all_tensors_on_device_one_launch_there():
    args = {name: FakeTensor(t.shape, t.dtype, device=1) if isinstance(t, FakeTensor) else t
            for name, t in synthetic_arguments().items()}
    plan = make_kernel(platform=FakePlatform(devices=2)).plan(**args)
    assert plan.device.ordinal == 1


def test_gpu_architecture():
    assert refusal(make_kernel(platform=FakePlatform((7, 5))), **synthetic_arguments()) == (
        "bundle for sm_80 cannot run on device 0 (compute capability 7.5): its cubin needs compute "
        "capability 8.x with x >= 0; its ptx needs compute capability >= 8.0")
    hopper_only = make_kernel(synthetic_manifest("sm_90a"), FakePlatform((8, 0)))
    assert refusal(hopper_only, **synthetic_arguments()).startswith(
        "bundle for sm_90a cannot run on device 0 (compute capability 8.0)")


def test_shared_memory_beyond_the_device():
    platform = FakePlatform(max_dynamic_smem_bytes=49152, name="Small GPU")
    assert refusal(make_kernel(platform=platform), **synthetic_arguments()) == \
        "kernel attn_fwd needs 65536 bytes of shared memory per block; device 0 (Small GPU) allows 49152"


def test_grid_beyond_the_hardware_limit():
    args = synthetic_arguments(B=1, H=70000, HKV=1, M=1, N=1)
    assert refusal(make_kernel(), **args) == "kernel attn_fwd: grid.y = H = 70000 exceeds the limit 65535"


def test_grid_not_a_multiple_of_the_cluster():
    manifest = synthetic_manifest()
    manifest["kernels"][1]["cluster"] = [2, 1, 1]
    assert refusal(make_kernel(manifest), **synthetic_arguments(M=300)) == \
        "kernel attn_fwd: grid.x = cdiv(M, 128) = 3 is not a multiple of the cluster size 2"


def test_i32_parameters_must_fit():
    manifest = synthetic_manifest()
    for p in manifest["kernels"][1]["params"]:
        if p["kind"] == "stride":
            p["type"] = "i32"
    assert refusal(make_kernel(manifest), **synthetic_arguments(B=2, H=8, M=2**21)) == \
        "q's stride of axis 0 = 2147483648 does not fit the i32 kernel attn_fwd takes it as"


@pytest.mark.parametrize("dims, named", [
    (dict(M=2**30 + 1), "dim M = 1073741825 (in q's shape)"),
    (dict(N=2**30 + 64), "dim N = 1073741888 (in k's shape)"),
])
def test_sizes_above_2_30_are_refused(dims, named):
    # The kernels plan exact integers for sizes up to 2^30 (Note [Exact integers]).
    args = synthetic_arguments(**{"B": 1, "H": 1, "HKV": 1, "M": 128, "N": 128, **dims})
    assert refusal(make_kernel(), **args) == f"{named} is above 2^30, the largest size the kernels are compiled for"


def test_a_fixed_size_above_2_30_is_refused():
    """A shape's fixed size is held to the same bound as a dim's (found by a review: the
    check read named dims only, and a manifest with k: [B, HKV, 1500000000, 128] passed)."""
    manifest = synthetic_manifest()
    for t in manifest["inputs"]:
        if t["name"] in ("k", "v"):
            t["shape"][2] = 1_500_000_000
    args = synthetic_arguments(B=1, H=1, HKV=1, M=128)
    args["k"] = args["v"] = FakeTensor((1, 1, 1_500_000_000, 128), "bf16", strides=(0, 0, 0, 1))
    assert refusal(make_kernel(manifest), **args, N=1_500_000_000) == (
        "the fixed size 1500000000 (in k's shape) is above 2^30, the largest size the kernels are "
        "compiled for")


def test_a_null_data_pointer_is_refused():
    """A tensor with elements at address 0 would fault on the GPU (and spoil the context):
    refused before anything reaches it (found by a review; 0 passed the alignment check)."""
    for protocol in ("cai", "dlpack"):
        args = synthetic_arguments(outputs=True)
        args["lse"] = FakeTensor(args["lse"].shape, "f32", ptr=0, protocol=protocol)
        assert refusal(make_kernel(), **args) == "lse: data pointer is null for 16000 elements"
    args = synthetic_arguments()
    args["q"] = FakeTensor(args["q"].shape, "bf16", ptr=0)          # bf16: DLPack
    assert refusal(make_kernel(), **args) == "q: data pointer is null for 2048000 elements"


def test_a_size_of_2_30_passes_the_size_check():
    # (and then meets the block map's grid limit, a check of its own)
    message = refusal(make_kernel(), **synthetic_arguments(B=1, H=1, HKV=1, M=2**30, N=128))
    assert message == "kernel blockmap: grid.y = cdiv(M, 128) = 8388608 exceeds the limit 65535"


# -- outputs that would be written over something else ----------------------------------

def test_an_output_whose_elements_overlap_is_refused():
    args = synthetic_arguments(outputs=True, B=2, H=8, M=1000)
    args["o"] = FakeTensor((2, 8, 1000, 128), "bf16", strides=(1000 * 128, 128, 128, 1))   # heads overlap
    assert refusal(make_kernel(), **args) == (
        "o: strides (128000, 128, 128, 1) for shape (2, 8, 1000, 128) make elements overlap (or "
        "interleave axes); an output's elements must not overlap: pass a contiguous tensor")
    args["o"] = FakeTensor((2, 8, 1000, 128), "bf16", strides=(8 * 1000 * 128, 1000 * 64, 64, 1))
    assert "make elements overlap" in refusal(make_kernel(), **args)                  # rows overlap


def test_an_output_in_another_dense_order_is_accepted():
    args = synthetic_arguments(outputs=True, B=2, H=8, M=1000)
    args["o"] = FakeTensor((2, 8, 1000, 128), "bf16", strides=(1000 * 8 * 128, 128, 8 * 128, 1))  # [B, M, H, D]
    make_kernel().plan(**args)


@pytest.mark.parametrize("output, other, named", [("o", "k", "o"), ("o", "q", "o"), ("lse", "o", "o"),
                                                 ("o", "slopes", "o"), ("lse", "v", "lse")])
def test_an_output_sharing_memory_with_another_tensor_is_refused(output, other, named):
    args = synthetic_arguments(outputs=True, B=2, H=8, M=1100, N=1100)
    given = args[output]
    args[output] = FakeTensor(given.shape, given.dtype, ptr=args[other].ptr)
    second = other if named == output else output
    assert refusal(make_kernel(), **args) == (
        f"{named}: its memory overlaps {second}'s; an output must not share memory with another "
        "tensor of the launch")


def slopes_of_p():
    """The synthetic kernel with `slopes: f32[P]`: a param whose size no other tensor fixes."""
    manifest = synthetic_manifest()
    next(t for t in manifest["inputs"] if t["name"] == "slopes")["shape"] = ["P"]
    return make_kernel(manifest)


def test_a_param_with_an_empty_axis_is_refused():
    args = {**synthetic_arguments(), "slopes": FakeTensor((0,), "f32"), "P": 0}
    assert refusal(slopes_of_p(), **args) == (
        "slopes: a param tensor needs at least one element per axis (its reads clamp into each axis), "
        "got shape (0)")


@pytest.mark.parametrize("empty", ["B", "H", "M"])
def test_with_no_query_rows_an_empty_param_passes_and_no_kernel_runs(empty):
    """B * H * M = 0: no hook reads a param, so an empty one (documents' doc[B, N] at B = 0)
    is no error, and no kernel runs, the mask kernels included (their grids may not be
    empty: they need not depend on H or M)."""
    sizes = {"B": 2, "H": 8, "HKV": 1, "M": 1000, empty: 0}
    args = {**synthetic_arguments(**sizes), "slopes": FakeTensor((0,), "f32"), "P": 0}
    plan = slopes_of_p().plan(**args)
    assert all(0 in grid for grid in plan.grids)
