"""The report of a workload run that could not finish: which ops of which NPUs wait for what."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import SimulationError
from ..workload.graph import Op
from .program_state import ProgramState
from .rendezvous import CollectiveRendezvous

#: programs and ops per program named in the report
_PROGRAMS_SHOWN = 8
_OPS_SHOWN = 4


def deadlock_error(states: Sequence[ProgramState], programs: int,
                   rendezvous: CollectiveRendezvous,
                   peers: Callable[[ProgramState, Op], np.ndarray]) -> SimulationError | None:
    """The error describing ops that never finished (``None`` if every op finished).

    Parameters
    ----------
    states : sequence of ProgramState
        Every program run (the workload's first, then custom collectives' ranks).
    programs : int
        How many of ``states`` are the workload's own programs.
    rendezvous : CollectiveRendezvous
        Where one-NPU programs wait for each other at collectives.
    peers : callable
        The peer NPUs of a send or recv op.
    """
    stuck = [(st, st.unfinished()) for st in states if not st.finished]
    if not stuck:
        return None
    lines = []
    for st, left in stuck[:_PROGRAMS_SHOWN]:
        blocked = [f"node {op.id} ({op.name or op.kind}) "
                   f"{_why(st, op, states[:programs], rendezvous, peers)}"
                   for op in left[:_OPS_SHOWN]]
        npus = st.npus.tolist()
        who = f"NPU {npus[0]}" if len(npus) == 1 else \
            f"NPUs {npus[:4]}" + ("..." if len(npus) > 4 else "")
        lines.append(f"{who} ({st.program.source}): " + "; ".join(blocked))
    count = sum(len(x) * st.npus.size for st, x in stuck)
    return SimulationError(f"deadlock: {count} op(s) never finished (counted per NPU)\n  "
                           + "\n  ".join(lines))


def _why(st: ProgramState, op: Op, own: Sequence[ProgramState],
         rendezvous: CollectiveRendezvous, peers) -> str:
    if op.id in st.ready and op.kind == "recv":
        return f"waits for a message from NPU {int(peers(st, op)[0])} tag {op.tag}"
    if op.id in st.ready and op.kind == "collective":
        expected = set(op.group) if op.group else {int(s.npus[0]) for s in own}
        absent = sorted(expected - rendezvous.arrived_at(op))
        earlier = rendezvous.earlier_pending(st, op) if st.npus.size == 1 else None
        if not absent and earlier is not None:
            return f"waits for collective #{earlier} of its communicator to be issued first"
        return "waits for the other NPUs of its collective" + \
            (f" (never reached by NPU(s) {absent[:8]})" if absent else "")
    if op.id in st.ready:
        return "was never started"
    deps = [d for d in (*op.deps, *op.ctrl_deps) if d not in st.end]
    return f"waits for node(s) {deps[:5]}"
