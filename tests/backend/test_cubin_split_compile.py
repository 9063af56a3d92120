"""Note [Split compile] in attnc/backend/cubin.py: PTX of several kernels is assembled
with ptxas's --split-compile, which leaves every kernel's code as it was; PTX of one
kernel is assembled as before."""
from __future__ import annotations

import struct

from mlir import ir

from attnc.backend import cubin, ptx

KERNELS = """
module attributes {gpu.container_module} { gpu.module @m {
  gpu.func @first(%p: !llvm.ptr<1>, %x: f32) kernel {
    %a = math.exp %x : f32
    llvm.store %a, %p : f32, !llvm.ptr<1>
    gpu.return }
  gpu.func @second(%p: !llvm.ptr<1>, %x: f32) kernel {
    %a = math.tanh %x : f32
    llvm.store %a, %p : f32, !llvm.ptr<1>
    gpu.return } } }
"""


def sections(elf: bytes) -> dict[str, bytes]:
    """The contents of an ELF64 file's sections, by name."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * entsize) for i in range(count)]
    strtab = elf[headers[names][4]:headers[names][4] + headers[names][5]]
    return {strtab[h[0]:strtab.index(b"\0", h[0])].decode(): elf[h[4]:h[4] + h[5]] for h in headers}


def two_kernels() -> str:
    with ir.Context():
        return ptx.to_ptx(ir.Module.parse(KERNELS), "sm_80")


def test_several_kernels_are_split_and_keep_their_code():
    text = two_kernels()
    assert cubin.default_options(text) == cubin.OPTIONS + cubin.SPLIT
    split = sections(cubin.ptx_to_cubin(text, "sm_80").cubin)
    whole = sections(cubin.ptx_to_cubin(text, "sm_80", options=cubin.OPTIONS).cubin)
    code = sorted(name for name in whole if name.startswith(".text."))
    assert code == [".text.first", ".text.second"]
    assert [split[name] for name in code] == [whole[name] for name in code]


def test_one_kernel_is_assembled_as_before():
    one = two_kernels()
    second = one.index(".visible .entry second")
    one = one[:second]
    assert cubin.default_options(one) == cubin.OPTIONS


def test_advisories_of_a_split_assembly_reach_its_log_not_the_terminal(capfd):
    """ptxas's threads write a split assembly's advisories to file descriptor 2, where an
    `attnc compile` showed a discarded trial's (C7512) and the log had none: they go to
    the log. Here C7504, of a setmaxnreg that nvJitLink's unit of a link ignores."""
    with ir.Context():
        text = ptx.to_ptx(ir.Module.parse(KERNELS), "sm_90a")
    body = text.index("{", text.index(".visible .entry first"))
    text = text[:body + 1] + "\n\tsetmaxnreg.inc.sync.aligned.u32 240;\n" + text[body + 1:]
    assert cubin.default_options(text) == cubin.OPTIONS + cubin.SPLIT
    log = cubin._nvjitlink(text, "sm_90a", True, cubin.default_options(text)).info_log
    assert "(C7504)" in log
    assert "C7504" not in capfd.readouterr().err
