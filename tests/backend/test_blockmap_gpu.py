"""The block map on a GPU, from bundles built here (design.md section 8).

Build (MLIR machine):  python tests/backend/test_blockmap_gpu.py build [OUT]
Run (GPU, torch):      python3 tests/backend/test_blockmap_gpu.py run [OUT]   (or pytest this file)

OUT defaults to .bundles/blockmap (git-ignored). Every case is a bundle launched through
attnc_runtime: `map` cases hold only the block-map kernel, and the test reads the scratch
buffer back and compares it with a torch brute force of the same mask, at ragged M and N;
the `attention` case is its variant compiled through the sm_80 pipeline at the case's
tiles on the grid's query blocks (aligned_tiles off, so that a map is built): its bundle
holds the block-map kernel and the attention kernel that reads the map, whose map is
checked as the `map` cases' and whose output is compared with a torch softmax.
Without a GPU, torch or the bundles, the tests skip and say why.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("ATTNC_BLOCKMAP_BUNDLES", ROOT / ".bundles" / "blockmap"))

HEADER = """
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  out o: bf16[B, H, M, 64]"""

DOCS = """
  param doc: i32[B, N]
  mask_mod(b, h, i, j) = doc[b, i] == doc[b, j] and j <= i
}"""
PER_HEAD = """
  param win: i32[H]
  mask_mod(b, h, i, j) = j <= i and i - j < win[h]
}"""
FLOATS = """
  param t: f32[B, N]
  param u: i32[4]
  mask_mod(b, h, i, j) = (t[b, j] + float(u[h % 4]) > 0.5 and ((j - i) // 7) % 3 != 1) or i == j + (N - M)
}"""
# name -> (source, kind, (block_m, block_n)[, attn-mask-kernels's options]); the mask of `name`
# is that of its part before "_map".
CASES = {
    "docs": ("attention docs {" + HEADER + DOCS, "attention", (128, 64)),
    "docs_map": ("attention docs_map {" + HEADER + DOCS, "map", (128, 64)),
    "per_head": ("attention per_head {" + HEADER + PER_HEAD, "map", (64, 128)),
    "floats": ("attention floats {" + HEADER + FLOATS, "map", (64, 48)),
    # The map program's steps and groups other than the defaults (Note [The block map's program])
    "docs_map_steps": ("attention docs_map_steps {" + HEADER + DOCS, "map", (128, 64),
                       {"groups": 1, "samples": False}),
    "per_head_map_g8": ("attention per_head_map_g8 {" + HEADER + PER_HEAD, "map", (64, 128),
                        {"groups": 8, "intervals": False}),
    "floats_map_g2": ("attention floats_map_g2 {" + HEADER + FLOATS, "map", (64, 48),
                      {"groups": 2, "samples": False}),
}
# A map byte's fields, as blockmap.py defines them (test_blockmap.py checks they agree;
# this file runs where MLIR is not installed).
CLASS_BITS, RESIDUAL_HOLDS, INTERVAL_HOLDS = 3, 4, 8
SHAPES = [(2, 3, 1000, 1000), (2, 3, 700, 1300), (1, 2, 129, 65), (3, 1, 1, 1), (1, 5, 333, 2049)]


# ---------------------------------------------------------------- build (needs MLIR)

def build(out: Path) -> None:
    from attnc.backend.bundle import write_bundle
    from attnc.backend.cubin import resource_usage

    index = {}
    for name, (source, kind, (block_m, block_n), *options) in CASES.items():
        if kind == "attention":
            plan, manifest, files, text = _attention_bundle(name, source, block_m, block_n)
        else:
            plan, manifest, files, text = _map_bundle(name, source, block_m, block_n, *options)
        write_bundle(out / name, manifest, files)
        usage = resource_usage(text, "sm_80")
        index[name] = {"kind": kind, "block_m": block_m, "block_n": block_n, "per_head": plan.per_head,
                       "holds": plan.holds,
                       "registers": {k: u.registers for k, u in usage.items()},
                       "spills": {k: u.spill_stores + u.spill_loads for k, u in usage.items()}}
        print(name, index[name])
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")


def _map_bundle(name: str, source: str, block_m: int, block_n: int, options: dict | None = None):
    """(the map's plan, manifest, files, PTX) of a bundle of the block-map kernel alone,
    its program written by attn-mask-kernels with `options`."""
    from attnc.backend.blockmap import blockmap_plan
    from attnc.backend.blockmap_kernel import build_blockmap_module
    from attnc.backend.bundle import code_files, variant_manifest
    from attnc.backend.cubin import ptx_to_cubin
    from attnc.backend.ptx import to_ptx
    from attnc.driver import CompileOptions, compile_mlir
    from attnc.passes.pipelines import pipeline_with

    pipeline = pipeline_with("sm_80", {"attn-mask-kernels": options or {}})
    result = compile_mlir(source, f"{name}.attn", CompileOptions(arch="sm_80", pass_pipeline=pipeline))
    plan = blockmap_plan(result, block_m, block_n)
    with result.module.context:
        text = to_ptx(build_blockmap_module(plan, result), "sm_80")
    files = code_files(name, "sm_80")
    blobs = {"cubin": ptx_to_cubin(text, "sm_80").cubin, "ptx": text.encode()}
    manifest = variant_manifest(result.variant, target="sm_80", kernels=[plan.kernel], code=files, blobs=blobs)
    return plan, manifest, {files[kind]: blob for kind, blob in blobs.items()}, text


def _attention_bundle(name: str, source: str, block_m: int, block_n: int):
    """(the map's plan, manifest, files, PTX) of the variant's sm_80 bundle, whose
    attention kernel reads the block map it launches first (Note [Block map ABI])."""
    from attnc.backend.blockmap import blockmap_plan
    from attnc.testing import build_with

    art = build_with(source, f"{name}.attn", "sm_80", block_m=block_m, block_n=block_n, aligned_tiles=False)
    kernels = art.manifest["kernels"]
    assert [k["name"] for k in kernels] == ["blockmap", "attn_fwd"], kernels
    plan = blockmap_plan(art.result, block_m, block_n)
    # The map as the run step reads it: the scratch of the case's tiles, filled by the
    # map kernel and read by the attention kernel.
    assert kernels[0]["params"][0] == plan.scratch and plan.scratch in kernels[1]["params"]
    return plan, art.manifest, art.files, art.ptx


# ---------------------------------------------------------------- run (GPU, torch)

def _skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    if not (OUT / "index.json").exists():
        return f"no block-map bundles at {OUT} (python tests/backend/test_blockmap_gpu.py build)"
    return None


@pytest.fixture(scope="module")
def index():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    return json.loads((OUT / "index.json").read_text())


def _inputs(name: str, B: int, H: int, M: int, N: int, gen):
    import torch
    name = name.split("_map")[0]
    dev = "cuda"
    qkv = {"q": torch.randn(B, H, M, 64, generator=gen, device=dev).bfloat16(),
           "k": torch.randn(B, H, N, 64, generator=gen, device=dev).bfloat16(),
           "v": torch.randn(B, H, N, 64, generator=gen, device=dev).bfloat16()}
    if name == "docs":
        # Packed documents: nondecreasing ids from B x N random cuts (most documents are a
        # few keys long; the tiles below the diagonal between cuts are FULL).
        cuts = torch.randint(1, 600, (B, N), generator=gen, device=dev).cumsum(1) % (N + 700)
        ids = torch.arange(N, device=dev)
        doc = (ids[None, :, None] >= cuts[:, None, :]).sum(-1).int()
        return {**qkv, "doc": doc.contiguous()}
    if name == "per_head":
        return {**qkv, "win": torch.randint(1, 400, (H,), generator=gen, device=dev).int()}
    return {**qkv, "t": torch.rand(B, N, generator=gen, device=dev),
            "u": torch.randint(-1, 2, (4,), generator=gen, device=dev).int()}


def _mask(name: str, args: dict, M: int, N: int):
    """The mask as a bool tensor [B, H_m, M, N], in torch (clamped param indices)."""
    import torch
    name = name.split("_map")[0]
    i = torch.arange(M, device="cuda")[:, None]
    j = torch.arange(N, device="cuda")[None, :]
    if name == "docs":
        doc = args["doc"]
        di = doc[:, i.clamp(max=N - 1)[:, 0]]
        return ((di[:, :, None] == doc[:, None, :]) & (j <= i))[:, None]
    if name == "per_head":
        win = args["win"][None, :, None, None]
        return (j <= i) & (i - j < win)
    H = args["q"].shape[1]
    u = args["u"][torch.arange(H, device="cuda") % 4].float()
    cond = (args["t"][:, None, None, :] + u[None, :, None, None] > 0.5) & (((j - i) // 7) % 3 != 1)
    return cond | (i == j + (N - M))


def _docs_part(part: str, args: dict, M: int, N: int):
    """One conjunct group of the documents mask as a [B, 1, M, N] bool tensor: the
    residual doc[b, i] == doc[b, j], or the row interval j <= i."""
    import torch
    i = torch.arange(M, device="cuda")[:, None]
    j = torch.arange(N, device="cuda")[None, :]
    if part == "interval":
        return (j <= i).expand(args["doc"].shape[0], 1, M, N)
    doc = args["doc"]
    di = doc[:, i.clamp(max=N - 1)[:, 0]]
    return (di[:, :, None] == doc[:, None, :])[:, None]


def _classes(mask, block_m: int, block_n: int):
    """Tile classes of a [B, H_m, M, N] mask: rows >= M and keys >= N do not count."""
    import torch
    B, Hm, M, N = mask.shape
    mb, nb = -(-M // block_m), -(-N // block_n)
    pad = (0, nb * block_n - N, 0, mb * block_m - M)
    tiles = lambda x: x.reshape(B, Hm, mb, block_m, nb, block_n)
    kept = mask.to(torch.uint8)
    any_kept = tiles(torch.nn.functional.pad(kept, pad, value=0)).amax((3, 5)).bool()
    all_kept = tiles(torch.nn.functional.pad(kept, pad, value=1)).amin((3, 5)).bool()
    return torch.where(any_kept, torch.where(all_kept, 2, 1), 0).to(torch.uint8)


def _launch(name: str, args: dict):
    import attnc_runtime
    import torch
    bound = attnc_runtime.load(OUT / name).bind(**args)
    bound.launch()
    torch.cuda.synchronize()
    return bound


def _read_map(bound, shape):
    import torch
    raw = bound._scratch["blockmap"]          # the runtime's scratch buffer (i32 words)
    n = shape[0] * shape[1] * shape[2] * shape[3]
    return raw.view(torch.uint8)[:n].reshape(shape)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_map_matches_brute_force(index, name):
    import torch
    info = index[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    seen, bits_seen = set(), {"residual": 0, "interval": 0}
    cases = [(shape, _inputs(name, *shape, gen)) for shape in SHAPES
             if not (name.startswith("docs") and shape[2] > shape[3])]
    if name.startswith("docs"):
        # Documents of 300 keys: diagonal tiles inside one document (the random cuts
        # above give documents of a few keys), as well as boundaries below the diagonal.
        args = _inputs(name, 2, 3, 1000, 1000, gen)
        args["doc"] = (torch.arange(1000, device="cuda") // 300).int().expand(2, 1000).contiguous()
        cases.append(((2, 3, 1000, 1000), args))
    for (B, H, M, N), args in cases:
        want = _classes(_mask(name, args, M, N).expand(B, H if info["per_head"] else 1, M, N),
                        info["block_m"], info["block_n"])
        byte = _read_map(_launch(name, args), tuple(want.shape))
        got = byte & CLASS_BITS
        bad = (got != want).nonzero()
        assert bad.numel() == 0, f"{name} {B, H, M, N}: {bad.shape[0]} tiles differ, first at " \
                                 f"{bad[0].tolist()}: got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}"
        seen |= set(want.unique().tolist())
        holds = byte & (0xFF ^ CLASS_BITS)
        assert not (holds & (0xFF ^ RESIDUAL_HOLDS ^ INTERVAL_HOLDS)).any(), f"{name}: a byte has unknown bits"
        assert not holds[want != 1].any(), f"{name}: holds bits on a tile that is not MIXED"
        if not info["holds"]:
            assert not holds.any(), f"{name}: the map records no conjuncts here"
            continue
        # Note [Conjuncts a tile holds]: each bit set is a proof over the tile's elements.
        for bit, part in ((RESIDUAL_HOLDS, "residual"), (INTERVAL_HOLDS, "interval")):
            proven = _classes(_docs_part(part, args, M, N), info["block_m"], info["block_n"]) == 2
            where = (byte & bit).bool()
            assert not (where & ~proven).any(), f"{name} {B, H, M, N}: a tile's {part} bit is not true"
            bits_seen[part] += int(where.sum())
    assert seen == {0, 1, 2}, f"{name}: the shapes only gave classes {seen}"
    if info["holds"]:
        assert all(bits_seen.values()), f"{name}: no tile recorded a conjunct it holds: {bits_seen}"


@pytest.mark.gpu
def test_attention_reads_the_map(index):
    import torch
    gen = torch.Generator(device="cuda").manual_seed(1)
    for B, H, M, N in [(2, 3, 1000, 1000), (1, 2, 333, 1300), (2, 2, 129, 129)]:
        args = _inputs("docs", B, H, M, N, gen)
        o = _launch("docs", args).outputs["o"].float()
        q, k, v = (args[x].float() for x in "qkv")
        s = (q @ k.transpose(-1, -2)) * 64 ** -0.5
        s = s.masked_fill(~_mask("docs", args, M, N), float("-inf"))
        want = torch.softmax(s, -1) @ v
        err = (o - want).abs().max().item()
        print(f"      attention docs {B, H, M, N}: max |o - reference| = {err:.2e}")
        assert err < 4e-2, f"docs {B, H, M, N}: max |o - reference| = {err}"


def time_map(name: str = "docs", B: int = 4, H: int = 16, M: int = 8192, N: int = 8192) -> dict:
    """Mean time of the bundle's launch (scratch memset + block map [+ attention]), in us."""
    import attnc_runtime
    import torch
    gen = torch.Generator(device="cuda").manual_seed(2)
    args = _inputs(name, B, H, M, N, gen)
    if name.startswith("docs"):
        args["doc"] = (torch.arange(N, device="cuda") // 1000).int().expand(B, N).contiguous()
    bound = attnc_runtime.load(OUT / name).bind(**args)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        bound.launch()
    start.record()
    for _ in range(20):
        bound.launch()
    stop.record()
    torch.cuda.synchronize()
    return {"case": name, "B": B, "H": H, "M": M, "N": N, "us": start.elapsed_time(stop) / 20 * 1e3}


def run() -> int:
    """Every check without pytest's runner (the GPU machine may lack it), then timings."""
    reason = _skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return 1
    info = json.loads((OUT / "index.json").read_text())
    checks = [(f"map {n}", lambda n=n: test_map_matches_brute_force(info, n)) for n in CASES]
    checks.append(("attention docs", lambda: test_attention_reads_the_map(info)))
    failures = 0
    for label, check in checks:
        try:
            check()
            print(f"ok    {label}")
        except AssertionError as e:
            failures += 1
            print(f"FAIL  {label}: {e}")
    for name, shape in (("docs_map", (4, 16)), ("docs", (4, 16)), ("per_head", (4, 16)), ("floats", (4, 16))):
        print(json.dumps(time_map(name, *shape)))
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    global OUT
    mode = argv[1] if len(argv) > 1 else "run"
    OUT = Path(argv[2]) if len(argv) > 2 else OUT
    if mode == "build":
        build(OUT)
        return 0
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
