"""attnc_sim: a functional emulator of the PTX attnc emits; runs a bundle with no GPU.

    import attnc_runtime
    kernel = attnc_runtime.load("bundles/gemma2.sm_80", device="sim")
    out = kernel(q=q, k=k, v=v)                 # numpy in, numpy out

    python -m attnc_sim BUNDLE --B 1 --H 2 --M 200 --N 333    # random inputs vs the reference
    python -m attnc_sim.sweep .bundles/gpu --jobs 2          # every bundle of an index.json

Numpy only (no MLIR, no cuda-python). It is functional: every lane's values are what
the PTX ISA says, but there is no timing, no bank conflicts, no caches.

Modules, one concern each:
  ptx         the parser: `Module` -> `Kernel` -> `Instruction` (opcode, operands, guard, line)
  state       machine state: `GlobalMemory`, `Cta` (shared memory bytes, barriers), `Warp`
              (32-lane register files with typed views, active mask, SIMT stack)
  isa         the handler registry (`register`, `lookup`) and operand accessors (`Context`)
  program     decoding a kernel once: a handler per instruction, reconvergence points
  engine      `Launch`: runs CTAs, interleaves warps, SIMT stack, exits, exit checks, deadlock
  scheduler   seeded warp order and slices (`quantum`), completion of `AsyncOp`s; `Report`s
  isa_*       the instruction families (control, int, float, cvt, mem, warp, sync, mma, sm90,
              bulk: TMA and bulk copies, sm100: tcgen05 and tensor memory)
  device      the launch of a bundle's kernels on numpy arrays (attnc_runtime's device="sim")
  sweep       every bundle of a tools/build_gpu_bundles.py index against attnc.reference

How an instruction family plugs in. A module registers a factory per opcode prefix:

    from attnc_sim import isa

    @isa.register("tcgen05.ld")
    def tcgen05_ld(ins, ctx):                  # once per instruction, at decode
        dst = [ctx.writer(r, "b32") for r in ctx.vec(ins.operands[0])]
        taddr = ctx.reader(ins.operands[1], "b32")
        def run(w):                            # every execution: one call per warp
            ...; return None                   # or isa.JUMP / isa.BLOCK / isa.EXIT
        return run

and is named in `families.FAMILIES`. `lookup` takes the longest registered prefix of the opcode's components.
A handler writes registers only in the lanes `w.wmask` (ctx.writer does). Asynchronous
operations subclass `scheduler.AsyncOp` and go to `w.cta.launch.scheduler.issue(op)`;
the handler of the instruction that guarantees completion calls `op.complete()`.
Races and protocol errors go to `w.cta.launch.report(kind, w, ins.where(), message)`.
Per-CTA state a family needs lives in `cta.__dict__` under the family's own names
(`Cta.mbarriers` is shared: mbarriers are used by cp.async, wgmma, TMA and tcgen05).

What the core offers every family:

  pending registers   an asynchronous operation that writes registers marks them with
                      `w.mark_pending(keys, op)` at issue and `w.release_pending(keys, op)`
                      in its `_run` (keys: `ctx.reg(operand)` pairs, the shape of
                      `w.pending_regs`). Every `ctx.reader` / `ctx.writer` checks the mark:
                      a read is a 'read-before-complete' report, a write a
                      'write-before-complete' report, naming the warp, the accessing PTX
                      line and the issuing one; the operation then completes. A handler
                      that indexes register rows itself calls `ctx.pending_check(operands,
                      reading)` (mma.sync, ldmatrix, wgmma's A). wgmma's accumulators and
                      tcgen05.ld's destinations use it (Note [Pending registers], state.py).
  exit checks         a family module may define `check_exit(cta) -> [(kind, message)]`;
                      the engine runs it after the CTA's last warp exited and every
                      pending operation landed, and reports each pair at "CTA (x, y, z) at
                      exit" (families.EXIT_CHECKS). isa_sm100's reports tensor memory
                      still allocated.
  tensor operands     `[tmap, {%r1, %r3}]` parses as `ptx.Addr(base, 0, coords)`: `base`
                      the tensor map (Reg or Sym), `coords` the vector's items (Reg, Imm).
"""
from __future__ import annotations

from attnc_sim.errors import SimError

__all__ = ["SimError"]
