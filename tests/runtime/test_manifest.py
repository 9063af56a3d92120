"""Manifest validation: the synthetic manifest parses; each malformation is refused
with a message naming the field."""
from __future__ import annotations

import copy

import pytest

from attnc_runtime.errors import ManifestError
from attnc_runtime.manifest import (Cdiv, DimParam, PtrParam, Resources, ScratchParam, StrideParam,
                                    parse_manifest)
from attnc_runtime.testing import synthetic_manifest


def test_synthetic_manifest_parses_into_value_objects():
    m = parse_manifest(synthetic_manifest())
    assert m.variant == "synthetic" and m.target == "sm_80"
    assert [t.name for t in m.inputs] == ["q", "k", "v", "slopes"]
    assert [(t.name, t.role) for t in m.outputs] == [("o", "o"), ("lse", "lse")]
    assert m.scalar_dims == ("P",)
    assert m.tensor("q").shape == ("B", "H", "M", 128)
    assert (m.tensor("q").align, m.tensor("slopes").align, m.tensor("lse").align) == (16, 4, 4)
    blockmap, attn = m.kernels
    assert blockmap.grid == ((Cdiv("N", 128),), (Cdiv("M", 128),), ("B",))
    assert blockmap.cluster == (1, 1, 1)
    assert blockmap.params[0] == ScratchParam("blockmap", ("B", Cdiv("M", 128), Cdiv("N", 128)))
    assert attn.params[0] == PtrParam("q")
    assert StrideParam("q", 0, "i64") in attn.params and DimParam("P", "i32") in attn.params
    assert m.specialization["block_n"] == 64


def test_output_role_defaults_to_its_name():
    raw = synthetic_manifest()
    for t in raw["outputs"]:
        del t["role"]
    assert [t.role for t in parse_manifest(raw).outputs] == ["o", "lse"]


def _set(path, value):
    """A mutation: set (or with value=DELETE remove) the item at `path` of the manifest."""
    def mutate(raw):
        *parents, last = path
        node = raw
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return mutate


DELETE = object()

MALFORMED = [
    (_set(["format"], "attnc-bundle/5"),
     "manifest: format: 'attnc-bundle/5' is not supported by this runtime (it reads 'attnc-bundle/1' and "
     "'attnc-bundle/2' and 'attnc-bundle/3' and 'attnc-bundle/4')"),
    (lambda m: m.update({"format": "attnc-bundle/1", "code_sha256": {"ptx": "0" * 64}}),
     "manifest: code_sha256: not a field of format 'attnc-bundle/1'"),
    (_set(["kernels"], DELETE), "manifest: manifest: missing field 'kernels'"),
    (_set(["colour"], "blue"), "manifest: manifest: unknown field 'colour'"),
    (_set(["source"], "attention x {}"), "manifest: source_sha256: does not match the sha256 of source"),
    (_set(["target"], "sm_75"), "manifest: target: 'sm_75' is not one of sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100a"),
    (_set(["code"], {}), "manifest: code: names no code object (expected cubin and/or ptx)"),
    (_set(["code", "cubin"], "../evil.cubin"), "manifest: code.cubin: '../evil.cubin' is not a plain file name"),
    (_set(["code", "sass"], "x.sass"), "manifest: code: unknown field 'sass'"),
    (_set(["dims", 5], "B"), "manifest: dims[5]: 'B' is listed twice"),
    (_set(["dims", 0], "2B"), "manifest: dims[0]: '2B' is not an identifier"),
    (_set(["inputs", 0, "dtype"], "fp8"), "manifest: inputs[0].dtype: 'fp8' is not one of f16, bf16, f32, i32"),
    (_set(["inputs", 1, "shape", 1], "G"),
     "manifest: inputs[1].shape[1]: 'G' is not a declared dim (dims: B, H, M, HKV, N, P)"),
    (_set(["inputs", 1, "shape", 3], 0), "manifest: inputs[1].shape[3]: 0 is less than 1"),
    (_set(["inputs", 1, "shape", 3], 1.5), "manifest: inputs[1].shape[3]: expected a dim name or a positive int, got 1.5"),
    (_set(["inputs", 3, "role"], DELETE), "manifest: inputs[3]: missing field 'role'"),
    (_set(["inputs", 2, "role"], "k"), "manifest: inputs: expected exactly one tensor with role 'k', found 2"),
    (_set(["outputs", 0, "role"], "lse"), "manifest: outputs: expected exactly one tensor with role 'o', found 0"),
    (_set(["outputs", 1, "name"], "q"), "manifest: outputs[1].name: tensor 'q' is declared twice"),
    (_set(["inputs", 3, "align"], 12), "manifest: inputs[3].align: 12 is not a power of two"),
    (_set(["inputs", 3, "align"], 2), "manifest: inputs[3].align: 2 is less than 4"),
    (_set(["kernels"], []), "manifest: kernels: expected at least 1 entries, got 0"),
    (_set(["kernels", 1, "block"], [1024, 2, 1]), "manifest: kernels[1].block: [1024, 2, 1] has more than 1024 threads"),
    (_set(["kernels", 1, "block"], [128, 1]), "manifest: kernels[1].block: expected 3 entries, got 2"),
    (_set(["kernels", 1, "block"], [1, 1, 128]), "manifest: kernels[1].block: z = 128 exceeds the hardware's 64"),
    (_set(["kernels", 1, "params", 0], {"kind": "const", "value": 2 ** 31, "type": "i32"}),
     "manifest: kernels[1].params[0].value: 2147483648 does not fit i32"),
    (_set(["kernels", 1, "cluster"], [0, 1, 1]), "manifest: kernels[1].cluster[0]: 0 is less than 1"),
    (_set(["kernels", 1, "dynamic_smem_bytes"], -1), "manifest: kernels[1].dynamic_smem_bytes: -1 is less than 0"),
    (_set(["kernels", 1, "symbol"], DELETE), "manifest: kernels[1]: missing field 'symbol'"),
    (_set(["kernels", 1, "grid"], [["M"], ["H"]]), "manifest: kernels[1].grid: expected 3 entries, got 2"),
    (_set(["kernels", 1, "grid", 0, 0], ["floor", "M", 128]),
     "manifest: kernels[1].grid[0][0][0]: expected 'cdiv' or 'min_sms', got 'floor'"),
    (_set(["kernels", 1, "grid", 0, 0], ["min_sms"]), "manifest: kernels[1].grid[0][0]: expected at least 2 entries, got 1"),
    (_set(["kernels", 1, "grid", 0, 0], ["min_sms", "X"]),
     "manifest: kernels[1].grid[0][0][1]: 'X' is not a declared dim"),
    (_set(["kernels", 1, "params", 6, "bytes"], [["min_sms", "M"]]),
     "manifest: kernels[1].params[6].bytes[0]: expected 3 entries, got 2"),
    (_set(["kernels", 1, "grid", 0, 0], ["cdiv", "M", 0]), "manifest: kernels[1].grid[0][0][2]: 0 is less than 1"),
    (_set(["kernels", 1, "params", 0], {"kind": "tma", "tensor": "q"}),
     "manifest: kernels[1].params[0].kind: 'tma' is not one of ptr, dim, stride, scratch"),
    (_set(["kernels", 1, "params", 0, "tensor"], "x"),
     "manifest: kernels[1].params[0].tensor: unknown tensor 'x' (tensors: q, k, v, slopes, o, lse)"),
    (_set(["kernels", 1, "params", 0, "type"], "i64"), "manifest: kernels[1].params[0]: unknown field 'type'"),
    (_set(["kernels", 1, "params", 7], {"kind": "stride", "tensor": "lse", "axis": 3, "type": "i64"}),
     "manifest: kernels[1].params[7].axis: 3 is out of range for 'lse' of rank 3"),
    (_set(["kernels", 0, "params", 1, "type"], "u32"), "manifest: kernels[0].params[1].type: 'u32' is not one of i32, i64"),
    (_set(["kernels", 1, "params", 6, "bytes"], [4096]),
     "manifest: kernels[1].params[6].bytes: scratch 'blockmap' is sized differently by another param"),
    (_set(["constraints", 0], ["less", "H", "HKV"]), "manifest: constraints[0][0]: 'less' is not one of divisible, equal"),
    (_set(["constraints", 0], ["divisible", "H"]), "manifest: constraints[0]: expected 3 entries, got 2"),
    (_set(["specialization"], [1, 2]), "manifest: specialization: expected an object, got list"),
    (_set(["kernels", 1, "resources"], {"registers": 168, "spill_stores": -4, "spill_loads": 0, "stack_frame": 0}),
     "manifest: kernels[1].resources.spill_stores: -4 is less than 0"),
    (_set(["kernels", 1, "resources"], {"registers": 168, "spill_stores": 0, "spill_loads": 0}),
     "manifest: kernels[1].resources: missing field 'stack_frame'"),
    (_set(["kernels", 1, "resources"], {"registers": 168, "spill_stores": 0, "spill_loads": 0, "stack_frame": 0,
                                        "occupancy": 2}),
     "manifest: kernels[1].resources: unknown field 'occupancy'"),
]


@pytest.mark.parametrize("mutate, message", MALFORMED, ids=[f"case{i}" for i in range(len(MALFORMED))])
def test_malformed_manifest_is_refused_naming_the_field(mutate, message):
    raw = synthetic_manifest()
    mutate(raw)
    with pytest.raises(ManifestError) as info:
        parse_manifest(raw)
    assert str(info.value).startswith(message), str(info.value)


def test_output_without_role_or_role_name_is_refused():
    raw = synthetic_manifest()
    raw["outputs"][1]["name"] = "m"
    del raw["outputs"][1]["role"]
    with pytest.raises(ManifestError, match=r"^manifest: outputs\[1\]\.role: missing \(one of o, lse\)$"):
        parse_manifest(raw)


def test_manifest_must_be_an_object():
    with pytest.raises(ManifestError, match="^manifest: manifest: expected an object, got list$"):
        parse_manifest([])


def test_parsing_does_not_modify_its_input():
    raw = synthetic_manifest()
    before = copy.deepcopy(raw)
    parse_manifest(raw)
    assert raw == before


def test_format_1_bundles_are_still_read():
    """attnc-bundle/2 added code_sha256; a /1 manifest, without it, still loads."""
    raw = {**synthetic_manifest(), "format": "attnc-bundle/1"}
    del raw["code_sha256"]
    m = parse_manifest(raw)
    assert m.code_sha256 == {} and m.variant == "synthetic"


@pytest.mark.parametrize("digests", [{}, "ptx only"])
def test_format_2_needs_a_digest_of_every_code_file(digests):
    """A digest of some code files only (or none) would let the others load unchecked
    (found by a review)."""
    raw = synthetic_manifest()
    raw["code_sha256"] = {} if digests == {} else {"ptx": raw["code_sha256"]["ptx"]}
    with pytest.raises(ManifestError, match=r"^manifest: code_sha256: no digest of the cubin"):
        parse_manifest(raw)


def test_format_2_needs_the_code_digests():
    """Without code_sha256 a /2 bundle's code files would load unchecked (found by a
    review: the field was optional)."""
    raw = synthetic_manifest()
    del raw["code_sha256"]
    with pytest.raises(ManifestError, match=r"^manifest: code_sha256: required in format 'attnc-bundle/4'$"):
        parse_manifest(raw)


RESOURCES = {"registers": 168, "spill_stores": 8, "spill_loads": 12, "stack_frame": 16}


def test_a_kernels_resources_are_read():
    raw = synthetic_manifest()
    raw["kernels"][1]["resources"] = dict(RESOURCES)
    kernels = parse_manifest(raw).kernels
    assert kernels[0].resources is None and kernels[1].resources == Resources(168, 8, 12, 16)


def test_format_3_bundles_are_still_read_without_resources():
    """attnc-bundle/4 added a kernel's resources (what the assembler reported for it)."""
    raw = {**synthetic_manifest(), "format": "attnc-bundle/3"}
    assert parse_manifest(raw).variant == "synthetic"
    raw["kernels"][1]["resources"] = dict(RESOURCES)
    with pytest.raises(ManifestError, match=r"resources: not a field of format 'attnc-bundle/3'"):
        parse_manifest(raw)


def test_format_2_bundles_are_still_read_without_small_grids():
    """attnc-bundle/3 added a kernel's small_grid (Note [Small grids] in attnc/backend/kernel_abi.py)."""
    raw = {**synthetic_manifest(), "format": "attnc-bundle/2"}
    assert parse_manifest(raw).variant == "synthetic"
    raw["kernels"][1]["small_grid"] = {"symbol": "s", "grid": [[1], [1], [1]], "up_to_ctas_per_sm": 2}
    with pytest.raises(ManifestError, match=r"small_grid: not a field of format 'attnc-bundle/2'"):
        parse_manifest(raw)


@pytest.mark.parametrize("kernel, small, message", [
    (0, {"symbol": "s"}, "only a kernel without a role"),                   # the mask kernel
    (1, {"symbol": "attnc_synthetic_blockmap"}, "names another kernel too"),
    (1, {"symbol": "attnc_synthetic_fwd"}, "names another kernel too"),
])
def test_a_small_grid_is_a_plain_kernels_and_its_own_symbol(kernel, small, message):
    raw = synthetic_manifest()
    raw["kernels"][kernel]["small_grid"] = {"grid": [[1], [1], [1]], "up_to_ctas_per_sm": 2, **small}
    with pytest.raises(ManifestError, match=message):
        parse_manifest(raw)


def test_a_dim_read_only_by_a_small_grid_is_read():
    raw = synthetic_manifest()
    raw["dims"].append("U")
    assert "U" not in parse_manifest(raw).read_dims
    raw["kernels"][1]["small_grid"] = {"symbol": "s", "grid": [["U"], [1], [1]], "up_to_ctas_per_sm": 2}
    assert "U" in parse_manifest(raw).read_dims
