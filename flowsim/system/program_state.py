"""The run-time state of one program of a workload (per-NPU time arrays of its ops)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..workload.graph import Op, Program, topological_order
from .npu_times import ArrayTimes, ScalarTimes, Times, npu_times
from .phases import NpuSet


@dataclass
class ProgramState:
    """Run-time state of one program.

    Attributes
    ----------
    index : int
        Position among the engine's programs.
    program : Program
    npus : ndarray
        The program's NPUs, sorted; every time array below has one entry per NPU.
    scope : tuple of int
        The NPUs, when the program runs on part of the network (empty: all of it).
    order : dict
        Op id -> position in a dependency-respecting order (ties by id).
    ops, users, remaining : dict
        Ops by id, their dependants, and how many dependencies each still waits for.
    end, seen, start, ready : dict of op id -> times
        When an op ended, when its dependants see it end (a collective's update delay added),
        when it started and when it was ready: an array over ``rep``, or a float when
        ``rep`` is one NPU (see :mod:`.npu_times`).
    waits : dict
        Compute ops waiting for communication: (other inputs ready, comm finishes, comm ids).
    inflight : int
        Collectives issued and not finished.
    waiting : deque
        Collectives held back by the cap on collectives in flight.
    origin : float
        No op starts earlier (the ops of a custom collective start when it is issued).
    on_finish : callable or None
        Called with the time when every op has finished.
    """

    index: int
    program: Program
    npus: np.ndarray
    scope: tuple[int, ...]
    order: dict[int, int]
    ops: dict[int, Op]
    users: dict[int, list[int]]
    remaining: dict[int, int]
    end: dict[int, Times] = field(default_factory=dict)
    seen: dict[int, Times] = field(default_factory=dict)
    start: dict[int, Times] = field(default_factory=dict)
    ready: dict[int, Times] = field(default_factory=dict)
    waits: dict[int, tuple] = field(default_factory=dict)
    #: per communication op fed by point-to-point receives: when the last of them arrived
    #: (the part of a wait on it that is pipeline bubble)
    pipeline: dict[int, Times] = field(default_factory=dict)
    inflight: int = 0
    waiting: deque = field(default_factory=deque)
    origin: float = 0.0
    on_finish: Callable[[float], None] | None = None
    #: the NPUs whose times are tracked: all of them, or only the first of a *uniform*
    #: program, whose NPUs run at one speed with nothing to tell them apart (every time array
    #: above has one entry per NPU of ``rep``)
    rep: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    #: the arithmetic of the time values above: floats when ``rep`` is one NPU, else arrays
    times: ArrayTimes | ScalarTimes = field(init=False)
    #: compute speed factor of the tracked NPUs (set by the engine), in that representation
    speed: Times = 1.0

    def __post_init__(self) -> None:
        if self.rep.size == 0:
            self.rep = self.npus
        self.times = npu_times(self.rep)

    @property
    def weight(self) -> int:
        """NPUs each tracked NPU stands for."""
        return self.npus.size // self.rep.size

    @property
    def finished(self) -> bool:
        return len(self.end) == len(self.ops)

    def unfinished(self) -> list[Op]:
        """Ops that never finished, in dependency order."""
        return sorted((op for op in self.ops.values() if op.id not in self.end),
                      key=lambda o: self.order[o.id])


def program_state(index: int, program: Program, total_npus: int, *, uniform: bool = False
                  ) -> ProgramState:
    """The initial state of ``program`` (run on a network of ``total_npus`` NPUs); a
    ``uniform`` one tracks the times of its first NPU only."""
    order = topological_order(program)
    npus = np.sort(program.npus)
    scope = () if npus.size == total_npus else NpuSet(int(n) for n in npus)
    users: dict[int, list[int]] = {op.id: [] for op in order}
    remaining = {}
    for op in order:
        deps = {*op.deps, *op.ctrl_deps}
        remaining[op.id] = len(deps)
        for d in deps:
            users[d].append(op.id)
    return ProgramState(index, program, npus, scope, {op.id: k for k, op in enumerate(order)},
                        {op.id: op for op in order}, users, remaining,
                        rep=npus[:1] if uniform else npus)


def uniform_program(program: Program, speed: np.ndarray, system) -> bool:
    """Whether every NPU of a program does the same thing at the same time: one speed, no
    memory ops (remote memories serve NPUs in turn), and no custom collectives (whose ranks
    run programs of their own on the same NPUs). What other programs do cannot tell its NPUs
    apart: a message arrives at one time for every NPU of its step."""
    npus = np.asarray(program.npus)
    if npus.size < 2 or system.custom:
        return False
    if np.any(speed[npus] != speed[npus[0]]):
        return False
    return not any(op.kind == "memory" for op in program.ops)
