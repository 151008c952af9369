"""Where programs meet: one-NPU programs (per-rank traces) in a collective, and a send with
its recv."""

from __future__ import annotations

from collections import defaultdict, deque

from ..errors import SimulationError
from ..workload.graph import Op
from .program_state import ProgramState

Member = tuple[ProgramState, Op]


class CollectiveRendezvous:
    """Collectives of one-NPU programs, matched as NCCL matches them.

    Per communicator (an explicit group, or a set of dimensions), each rank's collectives pair
    up in that rank's issue order as its trace records it: ascending node id (what PyTorch's
    converter writes, and the order in which ASTRA-sim's feeder issues ready nodes). The k-th
    collective of a rank on a communicator is the same collective as the k-th of every other
    member, whatever order they become ready in at run time; matching in run-time arrival
    order instead pairs different collectives as soon as timing differs between ranks (e.g.
    on Ring and Switch networks).

    When node order is an issue order (every dependency of every member points to a lower
    node id), an instance is issued once every member has reached it *and* the earlier
    instances of its communicator have been issued: a ready collective waits for the earlier
    ones, as on one NCCL communicator, while independent communicators proceed independently.
    Traces whose node order is not an issue order (symbolic_tensor_graph writes tensor order,
    with dependencies pointing both ways: a backward collective can precede in node order the
    forward ones it depends on) are matched the same way but each instance is issued as soon
    as its members have reached it; waiting for node order there would deadlock.

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
        #: per ordered communicator, the position of the next instance to issue
        self._next: dict[tuple, int] = defaultdict(int)
        #: per communicator: are its instances issued in order (see the class docstring)?
        self._ordered: dict[tuple, bool] = {}
        #: per program, op id -> (communicator, position among its collectives on it)
        self._positions: dict[int, dict[int, tuple[tuple, int]]] = {}
        #: per program, whether its node order is an issue order
        self._issue_order: dict[int, bool] = {}

    def position(self, st: ProgramState, op: Op) -> tuple[tuple, int]:
        """The communicator of collective ``op`` and its position among the program's
        collectives on that communicator, in ascending node id."""
        table = self._positions.get(st.index)
        if table is None:
            table = self._positions[st.index] = {}
            counts: dict[tuple, int] = defaultdict(int)
            for other in sorted((o for o in st.ops.values() if o.kind == "collective"),
                                key=lambda o: o.id):
                comm = _communicator(other)
                table[other.id] = (comm, counts[comm])
                counts[comm] += 1
            self._issue_order[st.index] = all(d < o.id for o in st.ops.values()
                                              for d in (*o.deps, *o.ctrl_deps))
        return table[op.id]

    def arrive(self, st: ProgramState, op: Op
               ) -> list[tuple[Op, list[Member], tuple[int, ...]]]:
        """Rank ``st`` reaches ``op``; returns the instances that can now be issued, in their
        communicator's order: (the op that completed it, its members, its scope).

        Raises
        ------
        SimulationError
            Ranks meeting at one collective disagree on its type or size.
        """
        comm, k = self.position(st, op)
        entry = self._instances.setdefault((comm, k), [])
        if entry:
            _check_same(entry[0], (st, op), k)
        entry.append((st, op))
        if not self._complete(comm, k):
            return []
        ordered = self._ordered.get(comm)
        if ordered is None:
            ordered = self._ordered[comm] = all(self._issue_order[s.index] for s, _ in entry)
        if not ordered:
            return [self._take(comm, k)]
        ready = []
        while self._complete(comm, self._next[comm]):
            ready.append(self._take(comm, self._next[comm]))
            self._next[comm] += 1
        return ready

    def _complete(self, comm: tuple, k: int) -> bool:
        members = len(comm[1]) if comm[0] == "group" else self.programs
        entry = self._instances.get((comm, k), ())
        return sum(s.npus.size for s, _ in entry) >= members

    def _take(self, comm: tuple, k: int) -> tuple[Op, list[Member], tuple[int, ...]]:
        entry = self._instances.pop((comm, k))
        whole = comm[0] == "group" or len(entry) == self.npus
        scope = () if whole else tuple(sorted(int(s.npus[0]) for s, _ in entry))
        return entry[-1][1], entry, scope

    def arrived_at(self, op: Op) -> set[int]:
        """NPUs waiting at the collective ``op`` waits in."""
        return {int(s.npus[0]) for entry in self._instances.values()
                if any(o is op for _, o in entry) for s, _ in entry}

    def earlier_pending(self, st: ProgramState, op: Op) -> int | None:
        """The position of the earlier instance on ``op``'s communicator that ``op`` waits for
        (``None`` if it waits for none)."""
        comm, k = self.position(st, op)
        if not self._ordered.get(comm, False):
            return None
        return self._next[comm] if self._next[comm] < k else None


def _communicator(op: Op) -> tuple:
    return ("group", op.group) if op.group else ("dims", op.dims)


def _check_same(first: Member, other: Member, k: int) -> None:
    """Ranks meeting at one collective issue the same type and size."""
    (first_st, a), (st, b) = first, other
    if (a.collective, a.size) != (b.collective, b.size):
        raise SimulationError(
            f"{st.program.source}: node {b.id} ({b.collective} of {b.size} B) on NPU "
            f"{int(st.npus[0])} meets node {a.id} of {first_st.program.source} ({a.collective} "
            f"of {a.size} B) on NPU {int(first_st.npus[0])} as collective #{k} on the same "
            "communicator; the NPUs of one collective must issue the same type and size in "
            "the same order")


class Mailboxes:
    """Sends and recvs matched per (destination, source, tag), in order."""

    def __init__(self) -> None:
        self._mailbox: dict[tuple, deque] = defaultdict(deque)
        self._receivers: dict[tuple, deque[Member]] = defaultdict(deque)

    def delivered(self, key: tuple, arrival: float, sender: ProgramState,
                  send: Op) -> Member | None:
        """A message has arrived; returns the recv waiting for it (or keeps the message)."""
        waiting = self._receivers[key]
        if waiting:
            return waiting.popleft()
        self._mailbox[key].append((arrival, sender, send))
        return None

    def posted(self, key: tuple, st: ProgramState, op: Op) -> tuple[float, Op] | None:
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
