"""`tensor_map` parameters (Note [Tensor maps] in attnc_runtime/params.py): the manifest's
rules, the bind's checks, and two hand-written TMA kernels run through the emulator and,
where there is one, a GPU with TMA (sm_90 and newer). data/tma_copy.ptx copies each 64 x 64
box of q, as TMA wrote it into shared memory with the 128-byte swizzle, to o: so o holds q's
rows with their 16-byte chunks permuted (chunk c of row r at c ^ (r mod 8)), and the rows
past M that the box covers are not written. data/tma_store.ptx writes q's rows into shared
memory swizzled as sm_100a's correction warpgroup writes O (Note [O through TMA] in
attnc/backend/sm100a.py) and stores each box to o through o's tensor map: o == q. The same
bundles on the GPU check the driver's encoding and the emulator's TMA against the hardware."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from attnc_runtime import AttncRuntimeError, Bundle, Kernel, ManifestError
from attnc_runtime.manifest import FORMAT, parse_manifest, source_sha256

PTX = (Path(__file__).parent / "data" / "tma_copy.ptx").read_bytes()
STORE_PTX = (Path(__file__).parent / "data" / "tma_store.ptx").read_bytes()
SOURCE = """attention copy {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  out o: bf16[B, H, M, 64]
}
"""
TMAP = {"kind": "tensor_map", "tensor": "q", "box": [1, 1, 64, 64], "swizzle": 128}


def manifest(tmap: dict = TMAP) -> dict:
    def tensor(name, role, shape):
        return {"name": name, "role": role, "dtype": "bf16", "shape": shape}

    rows_q, rows_k = ["B", "H", "M", 64], ["B", "H", "N", 64]
    m = {
        "format": FORMAT, "compiler": {"name": "attnc", "version": "test"}, "variant": "copy",
        "source_sha256": source_sha256(SOURCE), "source": SOURCE, "target": "sm_90a",
        "code": {"ptx": "tma_copy.compute_90a.ptx"}, "dims": ["B", "H", "M", "N"],
        "inputs": [tensor("q", "q", rows_q), tensor("k", "k", rows_k), tensor("v", "v", rows_k)],
        "outputs": [tensor("o", "o", rows_q)],
        "kernels": [{"name": "copy", "symbol": "tma_copy", "block": [128, 1, 1], "dynamic_smem_bytes": 8200,
                     "grid": [[["cdiv", "M", 64]], ["H"], ["B"]],
                     "params": [tmap, {"kind": "ptr", "tensor": "o"}, {"kind": "dim", "name": "H", "type": "i32"},
                                {"kind": "dim", "name": "M", "type": "i32"}]}],
    }
    m["code_sha256"] = {"ptx": hashlib.sha256(PTX).hexdigest()}
    return m


def bundle() -> Bundle:
    return Bundle.from_files(manifest(), {"tma_copy.compute_90a.ptx": PTX})


def store_bundle() -> Bundle:
    """tma_store.ptx's bundle: o's tensor map, q's pointer, H and M."""
    m = manifest({**TMAP, "tensor": "o"})
    kernel = m["kernels"][0]
    kernel.update(symbol="tma_store", dynamic_smem_bytes=8192, block=[64, 1, 1],     # a thread a row
                  params=[kernel["params"][0], {"kind": "ptr", "tensor": "q"}, *kernel["params"][2:]])
    m["code"] = {"ptx": "tma_store.compute_90a.ptx"}
    m["code_sha256"] = {"ptx": hashlib.sha256(STORE_PTX).hexdigest()}
    return Bundle.from_files(m, {"tma_store.compute_90a.ptx": STORE_PTX})


def swizzled(q: np.ndarray) -> np.ndarray:
    """What the kernel writes: each row's 16-byte chunks (8 bf16) permuted by the 128B swizzle."""
    rows = q.reshape(*q.shape[:-1], 8, 8)
    r = np.arange(q.shape[2]) % 8
    chunk = np.arange(8)[None, :] ^ r[:, None]            # the chunk that lands at position c
    return np.take_along_axis(rows, chunk[None, None, :, :, None], axis=3).reshape(q.shape)


def inputs(B=2, H=3, M=100, N=7):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, H, M, 64)).astype(ml_dtypes.bfloat16)
    k = v = np.zeros((B, H, N, 64), ml_dtypes.bfloat16)
    return q, k, v


def test_the_emulator_runs_a_tma_load_through_a_tensor_map_param():
    from attnc_sim.device import SimKernel
    q, k, v = inputs()
    out = SimKernel(bundle())(q=q, k=k, v=v)
    np.testing.assert_array_equal(out["o"].view(np.uint16), swizzled(q).view(np.uint16))


def test_the_emulator_runs_a_tma_store_of_swizzled_rows():
    """M = 100: the second box's rows 100..127 lie outside o and are not written."""
    from attnc_sim.device import SimKernel
    q, k, v = inputs()
    out = SimKernel(store_bundle())(q=q, k=k, v=v)
    np.testing.assert_array_equal(out["o"].view(np.uint16), q.view(np.uint16))


@pytest.mark.parametrize("edit,message", [
    (dict(box=[1, 64, 64]), "kernels[0].params[0].box: expected 4"),
    (dict(box=[1, 1, 64, 128]), "its innermost row is 256 bytes; TMA takes a multiple of 16, at most the 128-byte swizzle"),
    (dict(box=[1, 1, 300, 64]), "a TMA box spans at most 256 elements an axis"),
    (dict(swizzle=16), "kernels[0].params[0].swizzle"),
    (dict(tensor="x"), "kernels[0].params[0].tensor: unknown tensor 'x'"),
])
def test_the_manifest_refuses_a_tensor_map_tma_cannot_take(edit, message):
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest({**TMAP, **edit}))
    assert message in str(err.value)


@pytest.mark.parametrize("strides,ptr,message", [
    ((384, 128, 1, 2), 0x1000, "needs the last axis contiguous"),
    ((6400, 6400, 65, 1), 0x1000, "needs a 16-byte aligned base and strides"),
    ((19200, 6400, 64, 1), 0x1008, "needs a 16-byte aligned base and strides"),
])
def test_the_bind_refuses_a_tensor_tma_cannot_map(strides, ptr, message):
    from attnc_runtime.params import check_tensor_map
    from attnc_runtime.manifest import TensorMapParam
    from attnc_runtime.tensors import TensorView
    view = TensorView(ptr, (2, 3, 100, 64), strides, "bf16", "bf16", 0, "cuda", "other")
    with pytest.raises(AttncRuntimeError) as err:
        check_tensor_map(TensorMapParam("q", (1, 1, 64, 64), 128), view)
    assert message in str(err.value)


def test_an_axis_of_one_element_gets_a_stride_tma_takes():
    """H = 1: its stride, whatever the tensor says, is not read; the map gets a valid one."""
    from attnc_runtime.params import tensor_map_geometry
    from attnc_runtime.manifest import TensorMapParam
    from attnc_runtime.tensors import TensorView
    view = TensorView(0x1000, (2, 1, 100, 64), (6400, 1, 64, 1), "bf16", "bf16", 0, "cuda", "other")
    assert tensor_map_geometry(TensorMapParam("q", (1, 1, 64, 64), 128), view) == \
        ([64, 100, 1, 2], [128, 12800, 12800], [64, 64, 1, 1])


def _no_tma_gpu() -> str | None:
    try:
        from attnc_runtime import driver
        major, _ = driver.device_info(0).capability
    except (AttncRuntimeError, ImportError) as e:
        return f"no GPU: {e}"
    return None if major >= 9 else "TMA needs compute capability 9.0 or newer"


@pytest.mark.gpu
@pytest.mark.skipif(_no_tma_gpu() is not None, reason=_no_tma_gpu() or "")
def test_the_gpu_lands_the_tile_as_the_emulator_does():
    """cuTensorMapEncodeTiled's map, TMA's copy and the 128B swizzle on the hardware, against
    the emulator's on the same inputs."""
    from attnc_runtime import DeviceArray
    q, k, v = inputs()
    kernel = Kernel(bundle())
    out = kernel(q=DeviceArray.from_numpy(q.astype(np.float32), "bf16"),
                 k=DeviceArray.from_numpy(k.astype(np.float32), "bf16"),
                 v=DeviceArray.from_numpy(v.astype(np.float32), "bf16"))
    got = out["o"].numpy()
    np.testing.assert_array_equal(got, swizzled(q).astype(np.float32))


@pytest.mark.gpu
@pytest.mark.skipif(_no_tma_gpu() is not None, reason=_no_tma_gpu() or "")
def test_the_gpu_stores_the_swizzled_rows_as_the_emulator_does():
    """The address-bit swizzle sm_100a's O is written with, read back by a TMA store through
    an output's tensor map on the hardware: o == q."""
    from attnc_runtime import DeviceArray
    q, k, v = inputs()
    out = Kernel(store_bundle())(q=DeviceArray.from_numpy(q.astype(np.float32), "bf16"),
                                 k=DeviceArray.from_numpy(k.astype(np.float32), "bf16"),
                                 v=DeviceArray.from_numpy(v.astype(np.float32), "bf16"))
    np.testing.assert_array_equal(out["o"].numpy(), q.astype(np.float32))


@pytest.mark.parametrize("name", ["tma_copy", "tma_store"])
def test_the_kernels_assemble_for_sm_90a(tmp_path, name):
    """ptxas takes the kernels (the tensor map by its generic address, cvta.param): the
    emulator and the GPU run the same PTX."""
    import shutil
    import subprocess
    try:
        from attnc.backend.cubin import whole_program_ptxas
        ptxas = whole_program_ptxas()
    except ImportError:             # the runtime's tests run without the compiler too
        ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas")
    done = subprocess.run([ptxas, "-arch=sm_90a", str(Path(__file__).parent / "data" / f"{name}.ptx"),
                           "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
