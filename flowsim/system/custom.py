"""Custom collective algorithms: a collective run as per-rank Chakra send/recv programs
(ASTRA-sim's ``*-implementation-custom``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from ..errors import SimulationError
from ..workload.graph import Op, Program


class ProgramHost(Protocol):
    """What a custom collective needs of the engine running it."""

    net: Any
    collectives: int
    custom_traces: dict[str, list]

    def add_program(self, program: Program, *, origin: float,
                    on_finish: Callable[[float], None]) -> Any:
        """Run ``program`` from ``origin`` on; ``on_finish(t)`` when it is done."""


def issue_custom(engine: ProgramHost, op: Op, prefix: str, t: float,
                 done: Callable[[float], None]) -> None:
    """Run a custom algorithm (per-rank send/recv traces) for one collective: each rank's
    ops become a one-NPU program starting at ``t``; the collective ends with the last."""
    from ..workload.chakra import read_custom_collective

    ranks = engine.custom_traces.get(prefix)
    if ranks is None:
        ranks = engine.custom_traces[prefix] = read_custom_collective(prefix)
    members = list(op.group) if op.group else list(range(engine.net.npus))
    if len(ranks) != len(members):
        raise SimulationError(f"{prefix}: the custom {op.collective} has {len(ranks)} "
                              f"ranks, the collective {op.name or op.id} spans "
                              f"{len(members)} NPUs")
    instance = engine.collectives
    left = [len(ranks)]
    finish = [t]

    def rank_done(t_end: float) -> None:
        left[0] -= 1
        finish[0] = max(finish[0], t_end)
        if left[0] == 0:
            done(finish[0])


    for rank, ops in enumerate(ranks):
        mapped = [replace(o, peer=None if o.peer is None else members[o.peer],
                          tag=(instance, o.tag)) for o in ops]
        program = Program(mapped, np.array([members[rank]]), f"{prefix}.{rank}.et")
        engine.add_program(program, origin=t, on_finish=rank_done)
        if not mapped:
            rank_done(t)
