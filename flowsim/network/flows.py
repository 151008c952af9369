"""``simulate_flows``: a whole flow set (a DAG of flows with release times and delays) run to
completion on the flow engine, with its inputs validated."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import gather_segments
from ..errors import FlowSetError, public_api
from .engine import FlowEngine, NetworkModel, check_model
from .maxmin import validate_incidence


@dataclass(frozen=True)
class FlowResult:
    """Timing of a flow set.

    Attributes
    ----------
    start_ns, send_end_ns, finish_ns : ndarray, shape (F,)
        When each flow started sending, when its last byte left, and when it arrived.
    link_bytes : ndarray, shape (L,)
        Bytes carried per link.
    link_busy_ns : ndarray, shape (L,)
        Time during which each link carried at least one sending flow.
    time_ns : float
        Arrival of the last flow.
    events, rate_computations : int
        Engine statistics.
    """

    start_ns: np.ndarray
    send_end_ns: np.ndarray
    finish_ns: np.ndarray
    link_bytes: np.ndarray
    link_busy_ns: np.ndarray
    time_ns: float
    events: int
    rate_computations: int


def _check_dependencies(n: int, dep_indptr: np.ndarray, dep_ids: np.ndarray) -> None:
    if dep_indptr.size != n + 1 or dep_indptr[0] != 0 or np.any(np.diff(dep_indptr) < 0) \
            or dep_indptr[-1] != dep_ids.size:
        raise FlowSetError(f"dependencies: dep_indptr must have {n + 1} non-decreasing entries "
                           f"from 0 to len(dep_ids)")
    if dep_ids.size and (dep_ids.min() < 0 or dep_ids.max() >= n):
        raise FlowSetError(f"dependencies: flow ids must be in 0..{n - 1}, "
                           f"found {int(dep_ids.min() if dep_ids.min() < 0 else dep_ids.max())}")
    # Kahn's algorithm, vectorized by levels: a cycle leaves flows with unmet dependencies.
    owner = np.repeat(np.arange(n), np.diff(dep_indptr))
    indeg = np.bincount(owner, minlength=n)
    order = np.argsort(dep_ids, kind="stable")
    succ_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dep_ids, minlength=n), out=succ_ptr[1:])
    succ = owner[order]
    frontier = np.nonzero(indeg == 0)[0]
    seen = frontier.size
    while frontier.size:
        counts = succ_ptr[frontier + 1] - succ_ptr[frontier]
        targets = succ[gather_segments(succ_ptr[frontier], counts)]
        np.subtract.at(indeg, targets, 1)
        frontier = np.unique(targets[indeg[targets] == 0])
        seen += frontier.size
    if seen < n:
        stuck = np.nonzero(indeg > 0)[0]
        raise FlowSetError(f"dependencies: cycle among flows {stuck[:10].tolist()}"
                           + (" ..." if stuck.size > 10 else ""))


@public_api
def simulate_flows(capacity: np.ndarray, link_latency: np.ndarray, indptr: np.ndarray,
                   links: np.ndarray, nbytes: np.ndarray, *, model: NetworkModel = "flow",
                   release_ns: np.ndarray | None = None, delay_ns: np.ndarray | None = None,
                   dep_indptr: np.ndarray | None = None,
                   dep_ids: np.ndarray | None = None) -> FlowResult:
    """Run a whole flow set (a DAG of flows) to completion.

    Parameters
    ----------
    capacity, link_latency : ndarray, shape (L,)
        Link capacity (bytes/ns, > 0) and latency (ns, >= 0).
    indptr, links : CSR path incidence of the F flows.
    nbytes : ndarray, shape (F,)
        Bytes per flow, >= 0. Zero-byte flows arrive one path latency after they start.
    model : {"analytical", "flow"}
    release_ns, delay_ns : ndarray, shape (F,), optional
        Earliest start time, and the wait between readiness and start.
    dep_indptr, dep_ids : CSR, optional
        Flow ``f`` starts only after flows ``dep_ids[dep_indptr[f]:dep_indptr[f+1]]`` arrived.

    Raises
    ------
    FlowSetError
        Negative bytes or times, bad indices, or a dependency cycle.
    """
    check_model(model)
    capacity, indptr, links = validate_incidence(capacity, indptr, links, name="simulate_flows")
    link_latency = np.ascontiguousarray(link_latency, np.float64)
    if link_latency.shape != capacity.shape or np.any(link_latency < 0) \
            or not np.all(np.isfinite(link_latency)):
        raise FlowSetError("simulate_flows: link_latency must be finite, >= 0, one per link")
    n = indptr.size - 1
    for name, arr in (("nbytes", nbytes), ("release_ns", release_ns), ("delay_ns", delay_ns)):
        if arr is not None and np.ndim(arr) and np.size(arr) != n:
            raise FlowSetError(f"simulate_flows: {name} has {np.size(arr)} entries for {n} "
                               f"flows")
    nbytes = np.ascontiguousarray(np.broadcast_to(np.asarray(nbytes, np.float64), (n,)))
    if np.any(~np.isfinite(nbytes)) or np.any(nbytes < 0):
        bad = int(np.nonzero(~(nbytes >= 0) | ~np.isfinite(nbytes))[0][0])
        raise FlowSetError(f"simulate_flows: nbytes[{bad}] = {nbytes[bad]!r}: expected a finite "
                           f"number of bytes >= 0")
    for name, arr in (("release_ns", release_ns), ("delay_ns", delay_ns)):
        if arr is not None:
            arr = np.asarray(arr, np.float64)
            if np.any(~np.isfinite(arr)) or np.any(arr < 0):
                raise FlowSetError(f"simulate_flows: {name} must be finite and >= 0")
    if dep_indptr is not None or dep_ids is not None:
        if dep_indptr is None or dep_ids is None:
            raise FlowSetError("simulate_flows: give both dep_indptr and dep_ids")
        dep_indptr = np.asarray(dep_indptr, np.int64)
        dep_ids = np.asarray(dep_ids, np.int64)
        _check_dependencies(n, dep_indptr, dep_ids)
    engine = FlowEngine(capacity, link_latency, model)
    engine.add(indptr, links, nbytes,
               release=0.0 if release_ns is None else np.asarray(release_ns, np.float64),
               delay=delay_ns, dep_indptr=dep_indptr, dep_ids=dep_ids)
    engine.run()
    finish = engine.flow_arrays("finish").copy()
    return FlowResult(start_ns=engine.flow_arrays("start").copy(),
                      send_end_ns=engine.flow_arrays("send_end").copy(), finish_ns=finish,
                      link_bytes=engine.link_bytes(), link_busy_ns=engine.link_busy[
                          : capacity.size].copy(),
                      time_ns=float(finish.max()) if n else 0.0, events=engine.events,
                      rate_computations=engine.rate_computations)
