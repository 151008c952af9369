"""Point-to-point messages of a training loop: sends, receives and their meeting.

A send goes straight to the network model (no dimension queue, no chunking); its receive
completes when both the message has arrived and the receive op was ready. Sends and receives
meet by ``(destination, source, tag)`` in :class:`~flowsim.system.rendezvous.Mailboxes`, in
either order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._weak import weak_method
from ..errors import SimulationError
from ..workload.graph import Op
from .npu_times import Times
from .program_state import ProgramState
from .rendezvous import Mailboxes
from .scheduler import Schedule
from .templates import StepTemplate

#: completes an op of a program at per-NPU times
Complete = Callable[[ProgramState, Op, Times], None]


def peers(st: ProgramState, op: Op) -> np.ndarray:
    """The NPUs a send / recv op of program ``st`` talks to, one per NPU of the program."""
    return _peers(st.npus, op)


def _peers(npus: np.ndarray, op: Op) -> np.ndarray:
    if op.peer is not None:
        return np.array([op.peer], np.int64)
    return npus + int(op.peer_offset or 0)


def mailbox_key(npus: np.ndarray, op: Op, *, sending: bool) -> tuple[int, int, int]:
    """Where a send meets its recv: (destination, source, tag) of the first NPUs of the
    program ``npus`` and of its peers."""
    own = int(npus[0])
    peer = int(op.peer) if op.peer is not None else own + int(op.peer_offset or 0)
    return (peer, own, op.tag) if sending else (own, peer, op.tag)


class PointToPoint:
    """Sends and receives of one run.

    Parameters
    ----------
    schedule : Schedule
        Carries the messages.
    endpoint_delay_ns : float
        Added to every message (ASTRA-sim's endpoint delay).
    complete : callable
        ``complete(state, op, end)`` finishes an op at per-NPU times ``end``.
    """

    def __init__(self, schedule: Schedule, endpoint_delay_ns: float,
                 complete: Complete) -> None:
        self.schedule = schedule
        self.delay = endpoint_delay_ns
        self.complete = weak_method(complete)   # its engine holds this object: no cycle
        self.mailboxes = Mailboxes()
        self._by_program: dict[tuple, tuple[np.ndarray, StepTemplate]] = {}
        #: messages sent (one per NPU of a sending program)
        self.messages = 0

    def send(self, st: ProgramState, op: Op, t: float) -> None:
        """Send ``op``'s message from every NPU of ``st`` at time ``t``."""
        key = mailbox_key(st.npus, op, sending=True)
        self.messages += st.npus.size

        def arrived(t_arrival: float) -> None:
            # one time for every NPU of the step: each receiver takes it in its own shape
            end = t_arrival + self.delay
            self.complete(st, op, st.times.full(end))
            receiver = self.mailboxes.delivered(key, end, st, op)
            if receiver is not None:
                self._deliver(receiver, end, op)

        self.schedule.message(self.route(st.npus, op), float(op.size), t, self.delay, arrived)

    def recv(self, st: ProgramState, op: Op) -> None:
        """Post receive ``op``; it completes now if its message has already arrived."""
        key = mailbox_key(st.npus, op, sending=False)
        message = self.mailboxes.posted(key, st, op)
        if message is not None:
            self._deliver((st, op), *message)

    def check_all_received(self) -> None:
        """Raise if a message was sent that nobody received."""
        self.mailboxes.check_all_received()

    def _deliver(self, receiver: tuple[ProgramState, Op], arrival: float, send: Op) -> None:
        st, op = receiver
        if op.size and op.size != send.size:
            raise SimulationError(
                f"{st.program.source}: recv node {op.id} expects {op.size} B, but the matching "
                f"send (node {send.id}, tag {op.tag}) sends {send.size} B")
        self.complete(st, op, st.times.maximum(st.ready[op.id], arrival))

    def route(self, npus: np.ndarray, op: Op) -> StepTemplate:
        """The messages of send ``op`` from every NPU of ``npus`` (a program's, sorted)."""
        # pipeline stages send the same pairs every micro-batch: a program's sends to one
        # peer are found by the program's NPU array itself (kept alive beside its template,
        # so its id is not reused), without hashing its thousands of ids at every send
        mine = (id(npus), op.peer, int(op.peer_offset or 0))
        known = self._by_program.get(mine)
        if known is not None and known[0] is npus:
            return known[1]
        template = self.schedule.shapes.messages(npus, _peers(npus, op))
        self._by_program[mine] = (npus, template)
        return template
