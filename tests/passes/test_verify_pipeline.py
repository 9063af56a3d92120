"""attn-verify-pipeline (attnc/schedule/verify.py): every plan the pipelines write is
sound, and planted protocol bugs -- a removed or extra arrive, a wrong count, wrong
transaction bytes, a named barrier short of threads -- are caught, also in a plan edited
by hand and checked with `attnc opt`."""
from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from attnc.driver import CompileOptions, compile_mlir
from attnc.ir import attention_ops
from attnc.passes import plan_ir
from attnc.schedule.alloc import Buffer
from attnc.schedule.sync import Barrier
from attnc.schedule.verify import verify

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.attn"))


@functools.lru_cache(maxsize=None)
def plan(example: str, arch: str):
    result = compile_mlir((ROOT / f"examples/{example}.attn").read_text(), f"{example}.attn",
                          CompileOptions(arch=arch))
    op = attention_ops(result.module)[0]
    return (plan_ir.recipe_of(op, "test"), plan_ir.read(op, Barrier), plan_ir.read(op, Buffer),
            plan_ir.tile_of(op, "test"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_plan_is_sound(example, arch):
    recipe, barriers, buffers, tile = plan(example, arch)
    assert verify(recipe, barriers, buffers, tile) == []


def planted(example, arch, name, **change):
    """The verifier's messages for the plan with barrier `name`'s fields moved by `change`
    (an int added to an int, or to every value of tx_bytes)."""
    recipe, barriers, buffers, tile = plan(example, arch)
    assert name in {b.name for b in barriers}
    moved = lambda x, d: tuple(v + d for v in x) if isinstance(x, tuple) else x + d  # noqa: E731
    edit = lambda b: dataclasses.replace(b, **{k: moved(getattr(b, k), d) for k, d in change.items()})  # noqa: E731
    bad = [edit(b) if b.name == name else b for b in barriers]
    return " | ".join(v.message for v in verify(recipe, bad, buffers, tile))


@pytest.mark.parametrize("arch,name,change,expect", [
    # the empty barrier waits for one arrive too many: the producer never refills
    ("sm_90a", "mbar_kv_empty", dict(arrive_count=1), "ring 'kv' deadlocks"),
    # ... or releases after half the consumer warps: a slot is overwritten while read
    ("sm_90a", "mbar_kv_empty", dict(arrive_count=-4), "overwritten by fill 3 before all 8 readers"),  # 3 stages
    # one arrive removed from the producer's side (count 2 for its single arrive)
    ("sm_90a", "mbar_kv_full", dict(arrive_count=1), "ring 'kv' deadlocks"),
    ("sm_90a", "mbar_kv_full", dict(tx_bytes=16), "would never complete"),
    ("sm_90a", "mbar_kv_full", dict(tx_bytes=-16), "before the data lands"),
    ("sm_90a", "bar_o", dict(arrive_count=-32), "release early"),
    ("sm_90a", "mbar_q_full", dict(stages=1), "stages"),
    # sm_100a: P published after 2 of the 4 softmax warps wrote it
    ("sm_100a", "mbar_p0_full", dict(arrive_count=-2), "read from slot 0 before its data landed"),
    ("sm_100a", "mbar_s0_empty", dict(arrive_count=1), "ring 's0' deadlocks"),
    ("sm_100a", "mbar_kv_empty", dict(arrive_count=-1), "ring 'kv'"),
])
def test_planted_bugs_are_caught(arch, name, change, expect):
    assert expect in planted("gemma2", arch, name, **change)


def test_an_alternating_ring_announces_each_tiles_bytes():
    """sm_100a's K, V ring with QK and V head dims of 128 and 64: K fills deliver twice
    V's bytes (32 KiB against 16 KiB at 128-key tiles), so the full barrier announces each in turn (Note [Bytes per fill]). One
    value for both, the larger, as the plan had before, would hang every V fill."""
    recipe, barriers, buffers, tile = plan("diff_head_dims", "sm_100a")
    full = {b.name: b for b in barriers}["mbar_kv_full"]
    k_bytes, v_bytes = (tile.block_n * d * 2 for d in (tile.head_dim_qk, tile.head_dim_v))
    assert (k_bytes, v_bytes) == (2 * v_bytes, v_bytes) and full.tx_bytes == (k_bytes, v_bytes)
    assert verify(recipe, barriers, buffers, tile) == []
    # the old plan: the larger tile's bytes on every fill
    old = [dataclasses.replace(b, tx_bytes=(k_bytes,)) if b is full else b for b in barriers]
    found = " | ".join(v.message for v in verify(recipe, old, buffers, tile))
    assert f"mbar_kv_full expects {k_bytes} bytes on fill 1 but that fill of channel 'kv' (V) " \
           f"delivers {v_bytes}: the phase would never complete" in found
    # K and V swapped: the first fill completes before K has landed
    swapped = [dataclasses.replace(b, tx_bytes=(v_bytes, k_bytes)) if b is full else b for b in barriers]
    assert "complete before the data lands" in verify(recipe, swapped, buffers, tile)[0].message
    # a slot edited smaller than the K tile
    small = [dataclasses.replace(b, size=v_bytes * b.stages) if b.channel == "kv" else b for b in buffers]
    assert f"holds {v_bytes} bytes but a fill delivers {k_bytes}" in verify(recipe, barriers, small, tile)[0].message


def test_equal_tiles_may_share_one_value():
    """An alternating ring whose K and V tiles are alike may announce one value for both."""
    recipe, barriers, buffers, tile = plan("gemma2", "sm_100a")
    full = {b.name: b for b in barriers}["mbar_kv_full"]
    assert len(set(full.tx_bytes)) == 1
    one = [dataclasses.replace(b, tx_bytes=full.tx_bytes[:1]) if b is full else b for b in barriers]
    assert verify(recipe, one, buffers, tile) == []


def test_an_edited_plan_is_refused_by_attnc_opt(tmp_path):
    pre = ("attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,"
           "attn-insert-pipelines")
    run = lambda *args: subprocess.run([sys.executable, "-m", "attnc.cli", *args], cwd=ROOT,  # noqa: E731
                                       capture_output=True, text=True)
    saved = tmp_path / "plan.mlir"
    done = run("compile", "examples/mha.attn", "-arch", "sm_90a", "--emit", "mlir",
               "--pass-pipeline", pre, "-o", str(saved))
    assert done.returncode == 0, done.stderr
    verify_saved = ("opt", str(saved), "-arch", "sm_90a", "--pass-pipeline", "attn-verify-pipeline")
    assert run(*verify_saved).returncode == 0
    text = saved.read_text()
    edited = text.replace('arrive_count = 8 : i64, arrivers = "consumer0,consumer1"',
                          'arrive_count = 4 : i64, arrivers = "consumer0,consumer1"')
    assert edited != text
    saved.write_text(edited)
    done = run(*verify_saved)
    assert done.returncode == 1
    # both rings released by the consumers (q and kv) had their count halved
    assert done.stderr.startswith("examples/mha.attn:2:1: error: attn-verify-pipeline: ring 'q'")
    assert "mbar_kv_empty counts 4" in done.stderr


@pytest.mark.parametrize("change, expect", [
    (lambda buffers, barriers: ([dataclasses.replace(buffers[1], stages=0)] + buffers[2:], barriers),
     "has offset"),                                                   # stages 0: was a ZeroDivisionError
    (lambda buffers, barriers: ([dataclasses.replace(b, size=-b.size) for b in buffers], barriers),
     "the size and the stages at least 1"),
    (lambda buffers, barriers: (buffers, [dataclasses.replace(b, tx_bytes=(-1,)) for b in barriers]),
     "the stages must be at least 1, the others at least 0"),
    (lambda buffers, barriers: (buffers, [dataclasses.replace(b, tx_bytes=()) for b in barriers]),
     "tx_bytes: a list of one or more integers"),
    (lambda buffers, barriers: (buffers, [dataclasses.replace(b, tx_bytes=("a", 1.0)) for b in barriers]),
     "tx_bytes: a list of one or more integers"),                     # was a TypeError
    (lambda buffers, barriers: (buffers, [dataclasses.replace(b, tx_bytes="x") for b in barriers]),
     "tx_bytes: a list of one or more integers"),
])
def test_impossible_values_are_named_not_simulated(change, expect):
    """A plan edited by hand with values no plan holds (found by a review: a crash, or a
    plan of negative sizes that passed)."""
    recipe, barriers, buffers, tile = plan("gemma2", "sm_100a")
    buffers, barriers = change(list(buffers), list(barriers))
    found = verify(recipe, barriers, buffers, tile)
    assert found and any(expect in v.message for v in found)


@pytest.mark.parametrize("edit, expect", [
    (dict(tile=("k", "w")), "channel 'kv' carries tiles ['k', 'w']: one or more of q, k, v, o, s, p"),   # was a KeyError
    (dict(tile=()), "channel 'kv' carries tiles []"),                                             # was a ZeroDivisionError
])
def test_channels_carrying_no_known_tile_are_named(edit, expect):
    recipe, barriers, buffers, tile = plan("gemma2", "sm_100a")
    edited = dataclasses.replace(recipe, channels=tuple(dataclasses.replace(c, **edit) if c.name == "kv" else c
                                                        for c in recipe.channels))
    assert any(expect in v.message for v in verify(edited, barriers, buffers, tile))
    bad_dtype = dataclasses.replace(tile, dtype="f8")
    assert any("the tile's dtype 'f8' is none of" in v.message for v in verify(recipe, barriers, buffers, bad_dtype))


def test_a_tma_ring_announcing_no_bytes_is_caught():
    """A TMA ring is one by its channel's transport, not by its announced bytes: tx_bytes
    edited to 0 would arm expect_tx(0) and let the reader in at once (found by a review:
    it passed as a ring without transactions)."""
    recipe, barriers, buffers, tile = plan("gemma2", "sm_100a")
    zero = [dataclasses.replace(b, tx_bytes=(0,)) if b.name == "mbar_kv_full" else b for b in barriers]
    assert "complete before the data lands" in " | ".join(v.message for v in verify(recipe, zero, buffers, tile))


def test_a_dump_with_one_integer_of_bytes_reads_as_a_list_of_one(tmp_path):
    """Dumps written before Note [Bytes per fill] have `tx_bytes = N : i64`: they still read,
    and diff_head_dims' old plan (the larger tile on every fill) is refused as it must be."""
    pre = ("attn-tile,attn-analyze-masks,attn-warp-specialize,attn-alloc-smem,attn-alloc-tmem,"
           "attn-insert-pipelines")
    run = lambda *args: subprocess.run([sys.executable, "-m", "attnc.cli", *args], cwd=ROOT,  # noqa: E731
                                       capture_output=True, text=True)
    saved = tmp_path / "plan.mlir"
    assert run("compile", "examples/diff_head_dims.attn", "-arch", "sm_100a", "--emit", "mlir",
               "--pass-pipeline", pre, "-o", str(saved)).returncode == 0
    text = saved.read_text()
    assert text.count("tx_bytes = [32768, 16384]") == 1
    saved.write_text(text.replace("tx_bytes = [32768, 16384]", "tx_bytes = 32768 : i64"))
    done = run("opt", str(saved), "-arch", "sm_100a", "--pass-pipeline", "attn-verify-pipeline")
    assert done.returncode == 1 and "mbar_kv_full expects 32768 bytes on fill 1 but that fill of channel " \
                                    "'kv' (V) delivers 16384: the phase would never complete" in done.stderr


def test_register_budgets_an_sm_cannot_hold_are_named():
    recipe, barriers, buffers, tile = plan("gemma2", "sm_100a")
    greedy = dataclasses.replace(recipe, roles=tuple(dataclasses.replace(r, regs=256) if r.regs else r
                                                     for r in recipe.roles))
    assert any("more than the 65536 of the register file" in v.message
               for v in verify(greedy, barriers, buffers, tile))
