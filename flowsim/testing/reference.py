"""Slow, readable reference implementations of flowsim's fast kernels.

Each function here computes what a jitted kernel computes, written for a reader rather than
for speed: plain Python loops and numpy, one idea per line. They are the test oracles of the
kernels (hypothesis checks that both agree) and their documentation.

=====================================  ==================================================
reference                              fast code
=====================================  ==================================================
:func:`run_events_reference`           :func:`flowsim.simulate_flows` (the event loop
                                       ``flowsim.network._kernels.run_events``)
:func:`message_loads_reference`        ``flowsim.network._messages.message_loads``
                                       (this one is also the fast path of small
                                       steps, ``flowsim.network.messages``)
:func:`expand_paths_reference`         ``flowsim.topology._paths.expand_paths``
:func:`fabric_next_hops_reference`     the anchor tables of
                                       ``flowsim.topology.fabric_routing`` (a dense
                                       table over every node and NPU)
:func:`estimate_batch_reference`       :func:`flowsim.estimate_batch` (the kernel
(in :mod:`.estimate_reference`)        ``flowsim.system._kernels.batched_collective_times``)
=====================================  ==================================================

The max-min fair rates themselves have their reference in
:func:`flowsim.network.maxmin_rates_reference`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import ArrayLike

from ..network.messages import message_loads_vectorized as message_loads_reference  # noqa: F401
from ._targets import EXPANDED, NO_CONVERGENCE, FlowResult, maxmin_rates_reference
from .problems import FlowProblem

#: Events closer than ``TIE_RTOL * |t| + TIE_ATOL`` ns count as simultaneous (as in the engine).
TIE_RTOL = 1e-12
TIE_ATOL = 1e-9


def _due(t: float, now: float) -> bool:
    """Whether an event at ``t`` happens at ``now`` (within the tie tolerance)."""
    return t <= now + TIE_RTOL * abs(now) + TIE_ATOL


def run_events_reference(capacity: ArrayLike, link_latency: ArrayLike, indptr: ArrayLike,
                         links: ArrayLike, nbytes: ArrayLike, *, model: str = "flow",
                         release_ns: ArrayLike | None = None,
                         delay_ns: ArrayLike | None = None,
                         dep_indptr: ArrayLike | None = None,
                         dep_ids: ArrayLike | None = None) -> FlowResult:
    """Time a DAG of flows, as :func:`flowsim.simulate_flows` does, with a plain event loop.

    The semantics, one rule each:

    1. A flow is *ready* when every flow it depends on has arrived; it *starts*
       ``delay`` after the later of its release time and that moment.
    2. A flow with no bytes or no links sends nothing: its last byte leaves when it starts.
    3. Otherwise it *sends* its bytes at a rate: under ``"analytical"`` its path's bottleneck
       capacity, as if it were alone; under ``"flow"`` its max-min fair share among the
       flows sending at that moment, recomputed whenever that set changes.
    4. Its data *arrives* (``finish``) one path latency after its last byte left.
    5. Events within the engine's tie tolerance of each other happen together; arrivals
       due at an instant are processed before the starts they make due.

    Parameters
    ----------
    capacity, link_latency, indptr, links, nbytes, release_ns, delay_ns, dep_indptr, dep_ids
        As in :func:`flowsim.simulate_flows` (not validated here: pass a valid flow set).
    model : {"analytical", "flow"}

    Returns
    -------
    FlowResult
        ``start_ns``, ``send_end_ns``, ``finish_ns``, ``link_bytes`` (bytes of every flow on
        every link of its path), ``link_busy_ns`` (length of the union of the sending
        intervals ``[start, send_end]`` of the flows crossing a link) and ``time_ns``;
        ``events`` and ``rate_computations`` count this loop's own iterations and solves.

    Raises
    ------
    ValueError
        If some flows can never start (a dependency cycle).
    """
    if model not in ("analytical", "flow"):
        raise ValueError(f"model must be 'analytical' or 'flow', got {model!r}")
    problem = FlowProblem.from_arrays(capacity, link_latency, indptr, links, nbytes,
                                      release_ns=release_ns, delay_ns=delay_ns,
                                      dep_indptr=dep_indptr, dep_ids=dep_ids)
    n = problem.num_flows
    latency = problem.path_latency()
    bottleneck = problem.path_bottleneck()
    dependants = problem.dependants()
    unmet = np.diff(problem.dep_indptr).astype(int)  # dependencies not yet arrived
    ready = np.zeros(n)                              # latest arrival among them

    start, send_end, finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    starts_at: dict[int, float] = {}     # scheduled flows -> start time
    arrives_at: dict[int, float] = {}    # flows in flight -> arrival time
    remaining: dict[int, float] = {}     # sending flows -> bytes left
    for f in range(n):
        if unmet[f] == 0:
            starts_at[f] = problem.release_ns[f] + problem.delay_ns[f]
    now, events, rate_computations = 0.0, 0, 0

    def arrive(f: int) -> None:
        finish[f] = arrives_at.pop(f)
        for h in dependants[f]:
            unmet[h] -= 1
            ready[h] = max(ready[h], finish[f])
            if unmet[h] == 0:
                starts_at[h] = max(ready[h], problem.release_ns[h]) + problem.delay_ns[h]

    def begin(f: int) -> None:
        start[f] = starts_at.pop(f)
        if problem.nbytes[f] <= 0 or problem.path(f).size == 0:
            send_end[f] = start[f]
            arrives_at[f] = start[f] + latency[f]
        else:
            remaining[f] = problem.nbytes[f]

    while starts_at or arrives_at or remaining:
        # everything due now, until nothing more is: an arrival can make a start due, and a
        # start of a flow with nothing to send can make an arrival due
        while True:
            arriving = sorted(f for f, t in arrives_at.items() if _due(t, now))
            for f in arriving:
                arrive(f)
            starting = sorted(f for f, t in starts_at.items() if _due(t, now))
            for f in starting:
                begin(f)
            if not arriving and not starting:
                break
        if not (starts_at or arrives_at or remaining):
            break
        sending = sorted(remaining)
        rate = _rates(problem, sending, bottleneck, model)
        if model == "flow" and sending:
            rate_computations += 1
        # the next event: a last byte leaving, a start or an arrival
        leaves_at = {f: now + remaining[f] / rate[f] for f in sending}
        t_next = min([*leaves_at.values(), *starts_at.values(), *arrives_at.values()])
        events += 1
        for f in sending:
            if _due(leaves_at[f], t_next):
                del remaining[f]
                send_end[f] = t_next
                arrives_at[f] = t_next + latency[f]
            else:
                remaining[f] -= rate[f] * (t_next - now)
        now = t_next
    if np.isnan(finish).any():
        stuck = np.nonzero(np.isnan(finish))[0]
        raise ValueError(f"flows {stuck[:10].tolist()} never start: a dependency cycle")
    return FlowResult(start_ns=start, send_end_ns=send_end, finish_ns=finish,
                      link_bytes=_link_bytes(problem), link_busy_ns=_link_busy(problem, start,
                                                                               send_end),
                      time_ns=float(finish.max()) if n else 0.0, events=events,
                      rate_computations=int(rate_computations))


def _rates(problem: FlowProblem, sending: list[int], bottleneck: np.ndarray,
           model: str) -> dict[int, float]:
    """Rate of every sending flow: alone on its path, or max-min fair among them."""
    if model == "analytical" or not sending:
        return {f: bottleneck[f] for f in sending}
    paths = [problem.path(f) for f in sending]
    indptr = np.concatenate([[0], np.cumsum([p.size for p in paths])])
    rates = maxmin_rates_reference(problem.capacity, indptr, np.concatenate(paths))
    return dict(zip(sending, rates.tolist()))


def _link_bytes(problem: FlowProblem) -> np.ndarray:
    """Bytes per link: every flow's bytes on every link of its path."""
    out = np.zeros(problem.num_links)
    for f in range(problem.num_flows):
        out[problem.path(f)] += problem.nbytes[f]
    return out


def _link_busy(problem: FlowProblem, start: np.ndarray, send_end: np.ndarray) -> np.ndarray:
    """Per link, the length of the union of the sending intervals of the flows crossing it."""
    intervals: list[list[tuple[float, float]]] = [[] for _ in range(problem.num_links)]
    for f in range(problem.num_flows):
        if send_end[f] > start[f]:
            for link in problem.path(f):
                intervals[link].append((start[f], send_end[f]))
    return np.array([_union_length(spans) for spans in intervals])


def _union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a list of ``(start, end)`` intervals."""
    total, reach = 0.0, -np.inf
    for lo, hi in sorted(intervals):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def fabric_next_hops_reference(network) -> tuple[np.ndarray, np.ndarray]:
    """A fabric's next-hop table in its dense form, ``(hop_ptr, hop_links)``: CSR over
    ``node * npus + dst`` listing, in ascending link id, the links that start a shortest path
    from ``node`` to NPU ``dst``.

    Costs to every NPU come from a shortest-path search rooted at that NPU (on the reversed
    graph); a link ``v -> w`` starts a shortest path to ``t`` when ``cost(w, t)`` plus its own
    cost equals ``cost(v, t)``. NPUs x links work and memory: the fabric's own tables get the
    same links from the switches that reach NPUs instead.
    """
    from scipy.sparse.csgraph import shortest_path

    from ..topology.fabric_routing import COST_RTOL, HOP_COST, _min_duplicates

    npus, nodes = network.npus, network.num_nodes
    src, dst = network.link_src, network.link_dst
    link_cost = network.link_latency + HOP_COST
    cost = shortest_path(_min_duplicates(dst, src, link_cost, nodes), method="D",
                         directed=True, indices=np.arange(npus))     # cost[t, v]: v -> t
    here = cost[:, src]
    there = cost[:, dst] + link_cost[None, :]
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(there) & (np.abs(there - here) <= COST_RTOL * np.maximum(here, 1.0))
    target, link = np.nonzero(ok)                     # by destination, then link id
    key = src[link] * npus + target
    order = np.argsort(key, kind="stable")
    hop_ptr = np.zeros(nodes * npus + 1, np.int64)
    np.cumsum(np.bincount(key, minlength=nodes * npus), out=hop_ptr[1:])
    return hop_ptr, link[order].astype(np.int64)


def expand_paths_reference(hop_ptr: ArrayLike, hop_links: ArrayLike, link_dst: ArrayLike,
                           npus: int, src: ArrayLike, dst: ArrayLike, single: bool,
                           hash_key: ArrayLike, max_depth: int
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, int]:
    """Every NPU pair's shortest paths as weighted flows, by recursive walks.

    The next-hop table lists, for every ``(node, destination NPU)``, the links that start a
    shortest path: links ``hop_links[hop_ptr[k]:hop_ptr[k + 1]]`` with ``k = node * npus +
    dst``. From the source, a walk follows them until it reaches the destination:

    * ECMP spraying (``single=False``): the message splits evenly at every hop over the
      next links, so a path's weight is the product of ``1 / (number of choices)`` along it;
      a node with no next link for the destination is a dead end (its share is lost);
    * hash routing (``single=True``): at every hop the walk takes choice
      ``hash_key % (number of choices)`` only, so a pair has at most one path, of weight 1.

    A pair whose source is its destination has one empty path of weight 1.

    Parameters
    ----------
    hop_ptr : ndarray of int, shape (nodes * npus + 1,)
    hop_links : ndarray of int
    link_dst : ndarray of int, shape (L,)
        Head node of every link.
    npus : int
    src, dst : ndarray of int, shape (P,)
        NPU pairs.
    single : bool
    hash_key : ndarray of int, shape (P,)
        Non-negative key per pair (used when ``single``).
    max_depth : int
        A walk whose prefix reaches ``max_depth`` links without arriving has not converged
        (a cycle of equal-cost links).

    Returns
    -------
    message : ndarray of int64, shape (F,)
        Pair of every path; the pairs' paths come out in pair order, each pair's in
        depth-first order (choices in the order the table lists them).
    weight : ndarray of float64, shape (F,)
    indptr : ndarray of int64, shape (F + 1,)
    links : ndarray of int32
        CSR of the paths' links, from source to destination.
    mixed : bool
        Whether some pair has paths of different lengths.
    status : int
        ``EXPANDED``, or ``NO_CONVERGENCE`` (then every array is empty).
    """
    hop_ptr = np.asarray(hop_ptr, np.int64)
    hop_links = np.asarray(hop_links, np.int64)
    link_dst = np.asarray(link_dst, np.int64)

    def choices(node: int, d: int) -> list[int]:
        k = node * npus + d
        return hop_links[hop_ptr[k]: hop_ptr[k + 1]].tolist()

    class NotConverged(Exception):
        pass

    def walk(node: int, d: int, key: int, weight: float,
             prefix: list[int]) -> Iterator[tuple[list[int], float]]:
        """Yield ``(links, weight)`` of every path from ``node`` to ``d`` after ``prefix``."""
        options = choices(node, d)
        if single:
            options = [options[key % len(options)]] if options else []
        else:
            weight = weight / len(options) if options else weight
        for link in options:
            path = [*prefix, link]
            if link_dst[link] == d:
                yield path, weight
            elif len(path) >= max_depth:
                raise NotConverged
            else:
                yield from walk(int(link_dst[link]), d, key, weight, path)

    message, weights, paths = [], [], []
    mixed = False
    keys = np.asarray(hash_key)
    try:
        for i, (s, d) in enumerate(zip(np.asarray(src).tolist(), np.asarray(dst).tolist())):
            found = [([], 1.0)] if s == d else list(walk(s, d, int(keys[i]), 1.0, []))
            mixed = mixed or len({len(path) for path, _ in found}) > 1
            for path, w in found:
                message.append(i)
                weights.append(w)
                paths.append(path)
    except NotConverged:
        empty = np.zeros(0, np.int64)
        return empty, np.zeros(0), empty, np.zeros(0, np.int32), mixed, NO_CONVERGENCE
    indptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])]).astype(np.int64)
    flat = np.array([link for p in paths for link in p], np.int32)
    return (np.array(message, np.int64), np.array(weights, np.float64), indptr, flat, mixed,
            EXPANDED)
