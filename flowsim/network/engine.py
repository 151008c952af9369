"""The flow engine: flows with release times, delays and dependencies, advanced from event
to event under one of the two network models.

``analytical``
    Congestion-unaware, as ASTRA-sim's analytical backend: every flow runs alone at its path's
    bottleneck bandwidth, so it takes ``bytes / bottleneck + path latency``.
``flow``
    Congestion-aware: the sending flows share links max-min fairly; rates are recomputed
    whenever the set of sending flows changes.

In both, a flow starts ``delay`` after the later of its release time and the arrival of its
last dependency, and its data arrives one path latency after its last byte left.
"""

from __future__ import annotations

import numpy as np

from .._arrays import gather_segments, segment_min, segment_sum
from ..errors import SimulationError
from . import _kernels
from .maxmin import NO_COPIES, MaxMinWorkspace
from .models import NetworkModel, check_model

_MODEL_CODES = {"analytical": _kernels.MODEL_ANALYTICAL, "flow": _kernels.MODEL_FLOW}


class _Growable:
    """A set of same-length 1-D buffers grown by doubling; ``n`` entries are in use."""

    def __init__(self, spec: dict[str, tuple[type, float]], capacity: int = 1024) -> None:
        self.spec = spec
        self.n = 0
        self.arrays: dict[str, np.ndarray] = {name: np.full(capacity, fill, dtype)
                                              for name, (dtype, fill) in spec.items()}

    def reserve(self, extra: int) -> None:
        need = self.n + extra
        cap = next(iter(self.arrays.values())).size
        if need <= cap:
            return
        cap = max(need, 2 * cap)
        for name, (dtype, fill) in self.spec.items():
            grown: np.ndarray = np.full(cap, fill, dtype)
            grown[: self.n] = self.arrays[name][: self.n]
            self.arrays[name] = grown

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


_FLOW_FIELDS: dict[str, tuple[type, float]] = {
    "nbytes": (np.float64, 0.0), "latency": (np.float64, 0.0), "release": (np.float64, 0.0),
    "delay": (np.float64, 0.0), "bottleneck": (np.float64, np.inf), "group": (np.int64, -1),
    "pending": (np.int64, 0), "ready": (np.float64, 0.0), "state": (np.int8, 0),
    "start": (np.float64, np.nan), "send_end": (np.float64, np.nan),
    "finish": (np.float64, np.nan), "remaining": (np.float64, 0.0), "rate": (np.float64, 0.0),
    "time_to_go": (np.float64, np.inf), "active": (np.int64, 0), "active_pos": (np.int64, 0),
    "sched_keys": (np.float64, 0.0), "sched_ids": (np.int64, 0), "sched_tags": (np.int64, 0),
    "arr_keys": (np.float64, 0.0), "arr_ids": (np.int64, 0), "arr_tags": (np.int64, 0),
    "dep_head": (np.int64, -1), "mult": (np.float64, 1.0),
}


#: per-flow fields (indexed by flow id); the others are pools indexed by position
_PER_FLOW_FIELDS = ("nbytes", "latency", "release", "delay", "bottleneck", "group", "pending",
                    "ready", "state", "start", "send_end", "finish", "remaining", "rate",
                    "time_to_go", "dep_head", "mult")


class FlowEngine:
    """Incremental event-driven engine over flows on one set of links.

    Flows can be added between runs (the system layer adds a collective's next step when the
    previous one completes); dependencies may point at any flow added earlier.

    Parameters
    ----------
    capacity : ndarray of float64, shape (L,)
        Link capacities (bytes/ns).
    link_latency : ndarray of float64, shape (L,)
        Link latencies (ns); a flow's latency is the sum over its path.
    model : {"analytical", "flow"}
    retire : bool
        Drop finished flows once they are the majority and more than 65 536 (their bytes are
        kept in :meth:`link_bytes`), so memory follows the flows in flight. Only while no flow has
        dependencies; per-flow results then cover the flows still held.
    """

    def __init__(self, capacity: np.ndarray, link_latency: np.ndarray,
                 model: NetworkModel = "flow", *, retire: bool = False) -> None:
        self.model = check_model(model)
        self.retire = retire
        self.capacity = np.ascontiguousarray(capacity, dtype=np.float64)
        self.link_latency = np.ascontiguousarray(link_latency, dtype=np.float64)
        L = self.capacity.size
        self._flows = _Growable(_FLOW_FIELDS)
        self._links = np.zeros(1024, np.int32)
        self._indptr = np.zeros(1025, np.int64)
        self._n_incidences = 0
        # dependants as linked lists: dep_head per flow, then edge_next / edge_succ per edge
        self._edges = _Growable({"next": (np.int64, -1), "succ": (np.int64, -1)})
        self._groups = _Growable({"pending": (np.int64, 0), "done": (np.float64, np.nan),
                                  "watch": (np.uint8, 0)}, capacity=64)
        self._watched: list[int] = []
        self.link_count = np.zeros(max(L, 1), np.int64)
        self.active_links = np.zeros(max(L, 1), np.int64)
        self.link_pos = np.zeros(max(L, 1), np.int64)
        self.link_busy = np.zeros(max(L, 1), np.float64)
        self._ws = MaxMinWorkspace(L, 1024, 1024)
        # scheduled, arrivals, active, active links, done, dirty, events, rate computations
        self.counters = np.zeros(8, np.int64)
        self.clock = np.zeros(1, np.float64)
        self._first_new = 0
        self._retired_link_bytes = np.zeros(max(L, 1), np.float64)
        self._copies = False   # whether some flow stands for copies (twins merged)

    # ------------------------------------------------------------------ building
    @property
    def now(self) -> float:
        """Current simulated time (ns)."""
        return float(self.clock[0])

    @property
    def num_flows(self) -> int:
        return self._flows.n

    def new_group(self, *, watch: bool = True) -> int:
        """Register a group of flows; when all its flows have arrived the group is done, and if
        ``watch`` the next :meth:`run` returns so the caller can react."""
        self._groups.reserve(1)
        g = self._groups.n
        self._groups.n += 1
        self._groups["watch"][g] = watch
        self._groups["done"][g] = np.nan
        if watch:
            self._watched.append(g)
        return g

    def add(self, indptr: np.ndarray, links: np.ndarray, nbytes: np.ndarray | float, *,
            release: np.ndarray | float | None = None, delay: np.ndarray | float | None = None,
            dep_indptr: np.ndarray | None = None, dep_ids: np.ndarray | None = None,
            group: int | np.ndarray | None = None, path_latency: np.ndarray | None = None,
            path_bottleneck: np.ndarray | None = None,
            multiplicity: np.ndarray | None = None) -> np.ndarray:
        """Add flows; returns their engine ids.

        Parameters
        ----------
        indptr, links : CSR path incidence of the new flows (link ids into ``capacity``).
        nbytes : bytes of every flow (>= 0).
        release : earliest start time (ns), default ``now``.
        delay : wait between readiness and start (ns), default 0.
        dep_indptr, dep_ids : CSR of engine ids each new flow waits for (any earlier flow).
        group : group id (from :meth:`new_group`) per flow or for all.
        path_latency, path_bottleneck : each flow's path latency and smallest capacity, when
            the caller already has them (routed templates are reused many times).
        multiplicity : copies each flow stands for (default 1): they share its links as
            that many flows of its rate and bytes.
        """
        n = indptr.size - 1
        flows = self._flows
        flows.reserve(n)
        first = flows.n
        if first + n + 1 > self._indptr.size:
            grown: np.ndarray = np.zeros(max(first + n + 1, 2 * self._indptr.size), np.int64)
            grown[: first + 1] = self._indptr[: first + 1]
            self._indptr = grown
        ids = np.arange(first, first + n, dtype=np.int64)
        m = int(indptr[-1])
        if self._n_incidences + m > self._links.size:
            grown = np.zeros(max(self._n_incidences + m, 2 * self._links.size), np.int32)
            grown[: self._n_incidences] = self._links[: self._n_incidences]
            self._links = grown
        self._links[self._n_incidences: self._n_incidences + m] = links
        self._indptr[first + 1: first + n + 1] = self._n_incidences + indptr[1:]
        self._n_incidences += m
        a = flows.arrays
        span = slice(first, first + n)
        a["nbytes"][span] = nbytes
        a["latency"][span] = segment_sum(self.link_latency[links], indptr) \
            if path_latency is None else path_latency
        a["bottleneck"][span] = segment_min(self.capacity[links], indptr) \
            if path_bottleneck is None else path_bottleneck
        a["release"][span] = self.now if release is None else release
        a["delay"][span] = 0.0 if delay is None else delay
        a["mult"][span] = 1.0 if multiplicity is None else multiplicity
        self._copies = self._copies or multiplicity is not None
        a["state"][span] = _kernels.WAITING
        if group is None:
            a["group"][span] = -1
        elif np.ndim(group) == 0:
            a["group"][span] = group
            self._groups["pending"][group] += n
        else:
            a["group"][span] = group
            np.add.at(self._groups["pending"], np.asarray(group, np.int64), 1)
        a["dep_head"][span] = -1
        pending = np.zeros(n, np.int64)
        ready = np.zeros(n, np.float64)
        if dep_indptr is not None and dep_ids is not None and dep_ids.size:
            dep_ids = np.asarray(dep_ids, np.int64)
            owner = np.repeat(ids, np.diff(dep_indptr))
            state = flows["state"][dep_ids]
            done = state == _kernels.DONE
            pending = np.bincount(owner[~done] - first, minlength=n).astype(np.int64)
            if done.any():
                np.maximum.at(ready, owner[done] - first, flows["finish"][dep_ids[done]])
            preds, succs = dep_ids[~done], owner[~done]
            self._edges.reserve(preds.size)
            _kernels.append_edges(flows["dep_head"], self._edges["next"], self._edges["succ"],
                                  self._edges.n, preds, succs)
            self._edges.n += preds.size
        flows["pending"][first: first + n] = pending
        flows["ready"][first: first + n] = ready
        flows.n += n
        return ids

    # ------------------------------------------------------------------ running
    @property
    def idle(self) -> bool:
        """Whether every flow added so far has arrived."""
        return int(self.counters[4]) == self._flows.n

    def skip_to(self, t: float) -> None:
        """Move the clock of an idle engine forward to ``t``."""
        if t > self.clock[0]:
            self.clock[0] = t

    def run(self, until: float = np.inf) -> tuple[int, np.ndarray]:
        """Advance until every flow is done, watched groups complete, or the next event lies
        beyond ``until`` (the clock then stands at ``until``).

        Returns
        -------
        status : int
            ``_kernels.STATUS_DONE``, ``STATUS_STOPPED`` or ``STATUS_HORIZON``.
        groups : ndarray of int64
            Watched groups completed since the last call, in completion order.

        Raises
        ------
        SimulationError
            On a deadlock (flows waiting forever) or a stall (zero-rate flows).
        """
        flows = self._flows
        n = flows.n
        self._ws.ensure(n, self._n_incidences)
        indptr = self._indptr
        a = flows.arrays
        g = self._groups.arrays
        status = _kernels.run_events(
            _MODEL_CODES[self.model], self.capacity, indptr, self._links,
            a["mult"] if self._copies else NO_COPIES,
            a["nbytes"], a["latency"], a["release"], a["delay"], a["bottleneck"], a["group"],
            a["pending"], a["ready"], a["dep_head"], self._edges["next"], self._edges["succ"],
            a["state"], a["start"], a["send_end"], a["finish"], a["remaining"], a["rate"],
            a["time_to_go"], g["pending"], g["done"], g["watch"],
            a["active"], a["active_pos"], self.link_count, self.active_links, self.link_pos,
            self.link_busy, a["sched_keys"], a["sched_ids"], a["sched_tags"],
            a["arr_keys"], a["arr_ids"], a["arr_tags"], *self._ws.kernel_args(),
            self.counters, self.clock, self._first_new, n, float(until))
        self._first_new = n
        if self.retire and self._edges.n == 0 and self.counters[4] > max(1 << 16, n // 2):
            self._compact()
        if status == _kernels.STATUS_DEADLOCK:
            waiting = np.nonzero(a["state"][:n] == _kernels.WAITING)[0]
            raise SimulationError(
                f"deadlock at t={self.now:.6g} ns: {waiting.size} flow(s) wait on dependencies "
                f"that never complete (first: {waiting[:5].tolist()})")
        if status == _kernels.STATUS_STALLED:
            raise SimulationError(f"stalled at t={self.now:.6g} ns: sending flows have zero rate")
        done_groups = np.zeros(0, np.int64)
        if self._watched:
            watched = np.asarray(self._watched, np.int64)
            finished = ~np.isnan(g["done"][watched])
            if finished.any():
                done_groups = watched[finished]
                done_groups = done_groups[np.argsort(g["done"][done_groups], kind="stable")]
                self._watched = watched[~finished].tolist()
        return int(status), done_groups

    def _compact(self) -> None:
        """Remove finished flows (no dependencies exist), keeping their link bytes."""
        flows = self._flows
        n = flows.n
        a = flows.arrays
        keep = a["state"][:n] != _kernels.DONE
        indptr, links = self.incidence()
        counts = np.diff(indptr)
        done = np.nonzero(~keep)[0]
        self._retired_link_bytes += np.bincount(
            links[gather_segments(indptr[done], counts[done])],
            weights=np.repeat(a["nbytes"][done] * a["mult"][done], counts[done]),
            minlength=self._retired_link_bytes.size)
        kept = np.nonzero(keep)[0]
        new_links = links[gather_segments(indptr[kept], counts[kept])]
        m = kept.size
        new_id = np.cumsum(keep) - 1
        for name in _PER_FLOW_FIELDS:
            a[name][:m] = a[name][:n][keep]
        self._links[: new_links.size] = new_links
        self._n_incidences = new_links.size
        self._indptr[0] = 0
        np.cumsum(counts[kept], out=self._indptr[1: m + 1])
        n_sched, n_arr, n_act = (int(c) for c in self.counters[:3])
        a["sched_ids"][:n_sched] = new_id[a["sched_ids"][:n_sched]]
        a["arr_ids"][:n_arr] = new_id[a["arr_ids"][:n_arr]]
        active = new_id[a["active"][:n_act]]
        a["active"][:n_act] = active
        a["active_pos"][active] = np.arange(n_act)
        flows.n = m
        self._first_new = m
        self.counters[4] -= n - m

    def group_done_time(self, group: int) -> float:
        return float(self._groups["done"][group])

    # ------------------------------------------------------------------ results
    def flow_arrays(self, name: str) -> np.ndarray:
        """A per-flow array (``start``, ``send_end``, ``finish``, ``nbytes``, ...)."""
        return self._flows[name][: self._flows.n]

    def incidence(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR path incidence of every flow added so far."""
        return self._indptr[: self._flows.n + 1], self._links[: self._n_incidences]

    def link_bytes(self) -> np.ndarray:
        """Bytes carried by every link so far (finished flows count fully)."""
        indptr, links = self.incidence()
        done = self.flow_arrays("state") == _kernels.DONE
        per_flow = np.where(done, self.flow_arrays("nbytes") * self.flow_arrays("mult"), 0.0)
        held = np.bincount(links, weights=np.repeat(per_flow, np.diff(indptr)),
                           minlength=self.capacity.size).astype(np.float64)
        return held + self._retired_link_bytes[: self.capacity.size]

    @property
    def events(self) -> int:
        return int(self.counters[6])

    @property
    def rate_computations(self) -> int:
        return int(self.counters[7])
