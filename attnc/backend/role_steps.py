"""The steps of a kernel's roles as the L5 IR holds them (`RoleSteps`): one part of the
lowering's record (kernel_spec.py), each lowered op by op. Which of them a kernel has is
its target's and its plan's: sm_80's compute role's KV loops (Note [Steps op by op] in
kv_steps.py); sm_90a's consumer warpgroups' overlapped trips and its producer's loads
(Notes [Overlapped steps op by op] in wgmma_steps.py and [Loads op by op] in
load_steps.py); or sm_90a's cooperative role's trips (Note [Cooperative steps op by op]
in coop_steps.py). sm_90a's are read only from roles whose GEMMs attn-overlap-gemms
overlapped; without them the part is empty and the kernel is refused where it is built
(`missing`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from attnc.backend.coop_steps import CoopSteps, coop_steps
from attnc.backend.kv_steps import KvSteps, choices_in, kv_steps, with_choices
from attnc.backend.load_steps import LoadSteps, load_steps
from attnc.backend.wgmma_steps import WgmmaSteps, wgmma_steps
from attnc.ir import roles as R


@dataclass(frozen=True)
class RoleSteps:
    """The steps of the kernel's roles, those its target and plan have (the others None)."""
    kv: Optional[KvSteps] = None            # sm_80: the compute role's KV loops and what stands around them
    trips: Optional[WgmmaSteps] = None      # sm_90a: the consumer warpgroups' overlapped trips
    loads: Optional[LoadSteps] = None       # sm_90a: the producer's loads
    coop: Optional[CoopSteps] = None        # sm_90a: the cooperative role's trips

    def missing(self, target: str, producer: bool) -> list[str]:
        """The steps a kernel of `target` (with a producer warpgroup or not) needs and
        this part lacks."""
        needed = ("kv",) if target == "sm_80" else ("trips", "loads") if producer else ("coop",)
        return [name for name in needed if getattr(self, name) is None]

    def choice_values(self, attr: str) -> set:
        """The values of the choice of its own `attr` (Note [Choices op by op] in
        attnc/passes/kernel_choices.py) that the steps' ops hold."""
        return choices_in(self, attr)

    def with_defaults(self, defaults: dict) -> "RoleSteps":
        """These steps with every op that lacks a choice of `defaults` ({(op name,
        what): {attribute: value}}) given it."""
        return with_choices(self, defaults)

    @property
    def guesses_first_block(self) -> bool:
        """Whether the role's prologue guesses its first key block (attn.first_block_guess:
        Note [The guessed first block in the IR] in attnc/schedule/first_guess.py)."""
        steps = self.kv or self.coop
        return steps is not None and any(op.name == "first_block_guess" for op in steps.prologue)


def role_steps(kernel, target: str, producer: bool) -> RoleSteps:
    """The steps of `kernel`'s roles, read from the L5 IR."""
    if target == "sm_80":
        return RoleSteps(kv=kv_steps(R.role_named(kernel, "compute"), kernel))
    if target != "sm_90a" or not R.ops_in(kernel.regions[0].blocks[0], (R.MMA_WAIT,)):
        return RoleSteps()
    if producer:
        return RoleSteps(trips=wgmma_steps(kernel), loads=load_steps(kernel))
    return RoleSteps(coop=coop_steps(kernel))
