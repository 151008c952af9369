"""Where programs meet: one-NPU programs (per-rank traces) in a collective, and a send with
its recv."""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from ..errors import SimulationError
from ..workload.graph import Op
from .program_state import ProgramState

Member = tuple[ProgramState, Op]


class CollectiveRendezvous:
    """Collectives of one-NPU programs: the k-th collective a rank reaches on a communicator
    (an explicit group, or a set of dimensions) meets the other ranks' k-th.

    Parameters
    ----------
    programs : int
        One-NPU programs of the workload (a communicator of dimensions spans all of them).
    npus : int
        NPUs of the network.
    """

    def __init__(self, programs: int, npus: int) -> None:
        self.programs = programs
        self.npus = npus
        self._instances: dict[tuple, list[Member]] = {}

    def arrive(self, st: ProgramState, op: Op) -> tuple[list[Member], tuple[int, ...]] | None:
        """Rank ``st`` reaches ``op``; returns the members and scope of the collective once
        every rank of its communicator has reached it (``None`` until then).

        Raises
        ------
        SimulationError
            Ranks meeting at one collective disagree on its type or size.
        """
        key: tuple = ("group", op.group) if op.group else ("dims", op.dims)
        members = len(op.group) if op.group else self.programs
        k = st.counters[key]
        st.counters[key] = k + 1
        entry = self._instances.setdefault((key, k), [])
        if entry:
            first_st, first = entry[0]
            if (first.collective, first.size) != (op.collective, op.size):
                raise SimulationError(
                    f"{st.program.source}: node {op.id} ({op.collective} of {op.size} B) meets "
                    f"node {first.id} of {first_st.program.source} ({first.collective} of "
                    f"{first.size} B) as collective #{k} on the same communicator; the NPUs "
                    "of one collective must issue the same type and size")
        entry.append((st, op))
        if sum(s.npus.size for s, _ in entry) < members:
            return None
        del self._instances[(key, k)]
        scope = () if members == self.npus or op.group else \
            tuple(sorted(int(s.npus[0]) for s, _ in entry))
        return entry, scope

    def arrived_at(self, op: Op) -> set[int]:
        """NPUs waiting at the collective ``op`` waits in."""
        return {int(s.npus[0]) for entry in self._instances.values()
                if any(o is op for _, o in entry) for s, _ in entry}


class Mailboxes:
    """Sends and recvs matched per (destination, source, tag), in order."""

    def __init__(self) -> None:
        self._mailbox: dict[tuple, deque] = defaultdict(deque)
        self._receivers: dict[tuple, deque[Member]] = defaultdict(deque)

    def delivered(self, key: tuple, arrival: np.ndarray, sender: ProgramState,
                  send: Op) -> Member | None:
        """A message has arrived; returns the recv waiting for it (or keeps the message)."""
        waiting = self._receivers[key]
        if waiting:
            return waiting.popleft()
        self._mailbox[key].append((arrival, sender, send))
        return None

    def posted(self, key: tuple, st: ProgramState, op: Op) -> tuple[np.ndarray, Op] | None:
        """A recv is posted; returns the arrival and send of a message already there (or
        keeps the recv waiting)."""
        box = self._mailbox[key]
        if box:
            arrival, _, send = box.popleft()
            return arrival, send
        self._receivers[key].append((st, op))
        return None

    def check_all_received(self) -> None:
        """Raise if a message arrived that no recv took."""
        for (dst, src, tag), box in self._mailbox.items():
            if box:
                _, st, op = box[0]
                raise SimulationError(
                    f"{st.program.source}: send node {op.id} ({op.name or 'send'}) from NPU "
                    f"{src} to NPU {dst} with tag {tag} has no matching recv on NPU {dst}")
