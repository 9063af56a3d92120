"""Notes [Two query blocks in the IR] (attnc/schedule/walk.py) and [The next block's loads in
the IR] (attnc/schedule/walk_pairs.py): sm_80's two query blocks per CTA stand in the IR as
the walk over the pair, attn-verify-pipeline checks what crosses from one block to the next,
and the lowering builds the walk the IR states or refuses it at the op."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mlir import ir

from attnc.driver import CompileOptions, compile_mlir, optimize_mlir
from attnc.errors import AttncError
from attnc.ir import attention_ops
from attnc.ir import roles as R
from attnc.passes.lower_kernel import KERNELS_ATTR, lowered_gpu_module
from attnc.passes.pipelines import LOWERING, pipeline_with
from attnc.schedule.walk import PAIRS, walk_order

ROOT = Path(__file__).resolve().parents[2]
# softcap 30 in bf16 at head dim 64 (128-key tiles), causal: two blocks per CTA by default
SOFTCAP64 = """attention sc64 {
  q: bf16[B, H, M, 64]
  k: bf16[B, H, N, 64]
  v: bf16[B, H, N, 64]
  score_mod(s, b, h, i, j) = 30.0 * tanh(s / 30.0)
  mask_mod(b, h, i, j) = j <= i
  out o: bf16[B, H, M, 64]
}
"""
_KEPT = []


def _compiled(source: str, filename: str, options: dict | None = None, upto: str | None = None):
    pipeline = pipeline_with("sm_80", options or {})
    if upto is not None:
        pipeline = pipeline[:pipeline.index(upto) + len(upto)]
    result = compile_mlir(source, filename, CompileOptions(arch="sm_80", pass_pipeline=pipeline))
    _KEPT.append(result)
    return result


def _dump(upto: str = "attn-insert-pipelines") -> list[str]:
    """The L5 IR of the default softcap kernel, as lines without locations (an edited
    dump's errors then point at its own lines)."""
    module = _compiled(SOFTCAP64, "sc64.attn", upto=upto).module
    return module.operation.get_asm(enable_debug_info=False).split("\n")


def _refusal(lines: list[str], pipeline: str) -> str:
    with pytest.raises(AttncError) as info:
        optimize_mlir("\n".join(lines), "pairs.mlir", CompileOptions(arch="sm_80", pass_pipeline=pipeline))
    return info.value.render()


@pytest.mark.parametrize("source, filename, options, pairs", [
    (SOFTCAP64, "sc64.attn", {}, True),
    (SOFTCAP64, "sc64.attn", {"attn-warp-specialize": {"q_blocks_per_cta": 1}}, False),
    ((ROOT / "examples/mha.attn").read_text(), "mha.attn", {}, False),
    ((ROOT / "examples/mha.attn").read_text(), "mha.attn", {"attn-warp-specialize": {"q_blocks_per_cta": 2}}, True),
])
def test_the_option_and_its_default_put_the_walk_in_the_ir(source, filename, options, pairs):
    """The walk stands in the role from attn-warp-specialize on, and the kernel's grid is
    the pairs' (cdiv(M, 2 block_m) CTAs along x) exactly where it does."""
    result = _compiled(source, filename, options)
    kernel = attention_ops(result.module)[0]
    role = R.role_ops(kernel)[0]
    assert (walk_order(role) == PAIRS) is pairs
    kernels = json.loads(ir.StringAttr(lowered_gpu_module(result.module).attributes[KERNELS_ATTR]).value)
    block_m = R.attrs_of(kernel)["block_m"]
    assert kernels[0]["grid"][0] == [["cdiv", "M", block_m * (2 if pairs else 1)]]


def test_the_pair_changes_the_kernel():
    mha = (ROOT / "examples/mha.attn").read_text()
    one = _compiled(mha, "mha.attn")
    two = _compiled(mha, "mha.attn", {"attn-warp-specialize": {"q_blocks_per_cta": 2}})
    assert str(lowered_gpu_module(one.module)) != str(lowered_gpu_module(two.module))


def test_a_round_without_its_last_cta_barrier_is_refused_at_the_next_rounds_copy():
    """Without the CTA barrier that ends a round, the next round's first copies fill a slot
    (V's slot 0, read by the last step's P.V) other threads may still read: the verifier
    refuses that copy's slot write, at its line in the edited dump."""
    lines = _dump()
    wait = next(k for k, line in enumerate(lines) if "attn.cp_async_wait" in line and "pending = 0" in line)
    assert "attn.cta_barrier" in lines[wait + 1]
    rendered = _refusal(lines[:wait + 1] + lines[wait + 2:], "attn-verify-pipeline")
    at = re.match(r"pairs\.mlir:(\d+):\d+: error: attn-verify-pipeline: compute overwrites slot 0 of 'kv' \(v\) "
                  r"with fill \d+ before compute released fill \d+", rendered)
    assert at, rendered
    edited = lines[:wait + 1] + lines[wait + 2:]
    assert '"attn.slot_write"' in edited[int(at.group(1)) - 1] and 'tile = "v"' in edited[int(at.group(1)) - 1]


def test_the_sound_dump_verifies_and_lowers():
    lines = _dump()
    module = optimize_mlir("\n".join(lines), "pairs.mlir", CompileOptions(
        arch="sm_80", pass_pipeline=f"attn-verify-pipeline,attn-kernel-choices,{LOWERING['sm_80']}"))
    assert lowered_gpu_module(module) is not None


def _move_epilogue_after_loops(lines: list[str]) -> list[str]:
    """The carried epilogue's scf.if (with the cmpi before it), moved from before the first
    KV loop to after the round's CTA barrier."""
    start = next(k for k, line in enumerate(lines) if "arith.cmpi sge" in line)
    depth, end = 0, start + 1
    for end in range(start + 1, len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        if depth == 0 and lines[end].strip() == "}":
            break
    block = lines[start:end + 1]
    rest = lines[:start] + lines[end + 1:]
    barrier = next(k for k, line in enumerate(rest) if "attn.cta_barrier" in line
                   and "pending = 0" in rest[k - 1])
    return rest[:barrier + 1] + block + rest[barrier + 1:]


def _swap_m_and_l_after_the_walk(lines: list[str]) -> list[str]:
    """The last block's finalize, after the walk, given its l for m and its m for l."""
    at = max(k for k, line in enumerate(lines) if '"attn.finalize"' in line)
    lines = list(lines)
    lines[at] = re.sub(r'"attn\.finalize"\((%\w+#\d+), (%\w+#\d+), (%\w+#\d+),',
                       r'"attn.finalize"(\1, \3, \2,', lines[at])
    return lines


def _round_without_its_last_wait(lines: list[str]) -> list[str]:
    """The round's wait for every copy removed (its copies have all landed by its last read:
    sound, but not the round the kernel ends)."""
    return [line for line in lines if not ("attn.cp_async_wait" in line and "pending = 0" in line)]


def _last_epilogue_past_round_zero(lines: list[str]) -> list[str]:
    """The test of the epilogue after the walk edited to round > 0."""
    at = max(k for k, line in enumerate(lines) if "arith.cmpi sge" in line)
    return lines[:at] + [lines[at].replace("arith.cmpi sge", "arith.cmpi sgt")] + lines[at + 1:]


def _walk_in_steps_of_two(lines: list[str]) -> list[str]:
    """The walk over the pair taking every other round."""
    at = next(k for k, line in enumerate(lines) if "attn.walk_rounds" in line)
    loop = next(k for k in range(at, len(lines)) if "scf.for" in lines[k])
    indent = lines[loop][:len(lines[loop]) - len(lines[loop].lstrip())]
    edited = re.sub(r"step %\w+", "step %two", lines[loop], count=1)
    return lines[:loop] + [f"{indent}%two = arith.constant 2 : i32", edited] + lines[loop + 1:]


def _an_op_in_the_walk(lines: list[str]) -> list[str]:
    """A dim read between the round's attn.walk_block and its branch."""
    at = next(k for k, line in enumerate(lines) if '"attn.walk_block"' in line)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    return lines[:at + 1] + [f'{indent}%stray = "attn.dim"() {{name = "N"}} : () -> i32'] + lines[at + 1:]


@pytest.mark.parametrize("edit, message", [
    (lambda lines: [line.replace('order = "pairs"', 'order = "snake"') for line in lines],
     "role 'compute' walks query blocks in the order 'snake', and attn.warp_specialize is not persistent = true"),
    (_move_epilogue_after_loops,
     "a round of the pair's walk runs the last round's epilogue right before its KV loops"),
    (_swap_m_and_l_after_the_walk,
     "the finalize takes O, m and l from the walk's carried values"),
    (_round_without_its_last_wait,
     "a round of the pair's walk ends after its KV loops with a wait for every copy and a CTA barrier"),
    (_last_epilogue_past_round_zero,
     "the epilogue of the carried round's block runs where that round is >= 0"),
    (_walk_in_steps_of_two,
     "the pair's walk runs its rounds from 0 to attn.walk_rounds in steps of 1"),
    (_an_op_in_the_walk,
     "a round of the pair's walk takes its block, runs the program where there is one"),
])
def test_an_edited_pair_is_refused_by_the_lowering(edit, message):
    """What the kernel builds as its own is checked op by op: the walk's order and rounds,
    where the carried epilogue stands, how a round ends, what the last epilogue
    finalizes."""
    lines = edit(_dump("attn-kernel-choices"))
    rendered = _refusal(lines, LOWERING["sm_80"])
    assert message in rendered, rendered
    assert re.match(r"\S+:\d+:\d+: error: ", rendered), rendered


def test_two_blocks_are_sm_80s():
    with pytest.raises(AttncError, match=re.escape("q_blocks_per_cta=2: two query blocks per CTA are sm_80's")):
        compile_mlir(SOFTCAP64, "sc64.attn", CompileOptions(arch="sm_90a", pass_pipeline=pipeline_with(
            "sm_90a", {"attn-warp-specialize": {"q_blocks_per_cta": 2}})))


def test_insert_pipelines_moves_only_the_epilogue():
    """Another op after the KV loops of the pair's round (here a dim read) is not the
    epilogue attn-insert-pipelines moves to the next round: refused at it."""
    lines = _dump("attn-alloc-tmem")
    at = next(k for k, line in enumerate(lines) if '"attn.finalize"' in line)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    lines.insert(at, f'{indent}%extra = "attn.dim"() {{name = "N"}} : () -> i32')
    rendered = _refusal(lines, "attn-insert-pipelines")
    assert re.match(r"pairs\.mlir:\d+:\d+: error: attn-insert-pipelines moves the cooperative role's epilogue "
                    r"\(attn.finalize and the stores after its KV loops\) to the next block; this block has "
                    r"attn.dim there", rendered), rendered
