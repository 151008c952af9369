"""Invariant checkers: each raises ``AssertionError`` with a message saying what broke where.

They judge results of any algorithm, topology or network model against laws that must hold
whatever the inputs, so flowsim's tests and users who plug in their own code can share them:

* :func:`assert_maxmin_fair` — rates are the max-min fair allocation;
* :func:`assert_conservation` — bytes are neither created nor lost;
* :func:`assert_monotone_time` — causes come before effects, and nothing outruns its link;
* :func:`assert_schedule_sane` — a collective's summary numbers are consistent.

A result is a :class:`~flowsim.FlowResult` (with the :class:`~.problems.FlowProblem` it
answers), a collective Dataset (:func:`flowsim.simulate_collective`) or a training Dataset
(:func:`flowsim.simulate`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from .problems import FlowProblem

#: Relative tolerance of the fairness checks.
RTOL = 1e-9
#: Relative tolerance of byte counts (sums over many flows in different orders).
BYTES_RTOL = 1e-9
#: Relative and absolute (ns) tolerance of time comparisons.
TIME_RTOL = 1e-9
TIME_ATOL = 1e-6
#: Collectives in which every NPU receives as many bytes as it sends.
BALANCED_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def assert_maxmin_fair(capacity: np.ndarray, indptr: np.ndarray, links: np.ndarray,
                       rates: np.ndarray, rtol: float = RTOL) -> None:
    """Raise ``AssertionError`` unless ``rates`` is the max-min fair allocation.

    Checks the two defining properties: no link carries more than its capacity, and every
    flow with links crosses a saturated link on which no flow has a larger rate. Flows
    without links (and only they) have an infinite rate.
    """
    capacity = np.asarray(capacity, float)
    indptr = np.asarray(indptr, np.int64)
    links = np.asarray(links, np.int64)
    rates = np.asarray(rates, float)
    n = indptr.size - 1
    flow_of = np.repeat(np.arange(n), np.diff(indptr))
    finite = np.isfinite(rates)
    assert np.all(finite == (np.diff(indptr) > 0)), "only flows without links may be infinite"
    assert np.all(rates[finite] >= 0), "negative rate"
    load = np.bincount(links, weights=rates[flow_of], minlength=capacity.size)
    assert np.all(load <= capacity * (1 + rtol) + 1e-12), \
        f"link over capacity by {np.max(load - capacity):.3g}"
    saturated = load >= capacity * (1 - rtol)
    top = np.zeros(capacity.size)
    np.maximum.at(top, links, rates[flow_of])
    ok_incidence = saturated[links] & (rates[flow_of] >= top[links] * (1 - rtol))
    has_bottleneck = np.zeros(n, bool)
    np.logical_or.at(has_bottleneck, flow_of, ok_incidence)
    missing = np.nonzero(finite & ~has_bottleneck)[0]
    assert missing.size == 0, f"flows without a bottleneck link: {missing[:10].tolist()}"


# ---------------------------------------------------------------- helpers
def _assert_close(found: np.ndarray | float, expected: np.ndarray | float, what: str, *,
                  rtol: float, atol: float) -> None:
    """Elementwise ``found == expected`` within tolerance, naming the first offender."""
    found, expected = np.broadcast_arrays(np.atleast_1d(np.asarray(found, float)),
                                          np.atleast_1d(np.asarray(expected, float)))
    bad = np.nonzero(~np.isclose(found, expected, rtol=rtol, atol=atol))[0]
    assert bad.size == 0, (f"{what}: {bad.size} mismatch(es), first at index {bad[0]}: "
                           f"found {found[bad[0]]!r}, expected {expected[bad[0]]!r}")


def _assert_at_least(lhs: np.ndarray | float, rhs: np.ndarray | float, what: str, *,
                     rtol: float = TIME_RTOL, atol: float = TIME_ATOL) -> None:
    """Elementwise ``lhs >= rhs`` up to ``rtol * |rhs| + atol``, naming the first offender."""
    lhs, rhs = np.broadcast_arrays(np.atleast_1d(np.asarray(lhs, float)),
                                   np.atleast_1d(np.asarray(rhs, float)))
    bad = np.nonzero(~(lhs >= rhs - (rtol * np.abs(rhs) + atol)))[0]
    assert bad.size == 0, (f"{what}: violated at {bad.size} place(s), first at index "
                           f"{bad[0]}: {lhs[bad[0]]!r} < {rhs[bad[0]]!r}")


def _assert_finite_nonnegative(values: np.ndarray, what: str) -> None:
    values = np.atleast_1d(np.asarray(values, float))
    bad = np.nonzero(~(np.isfinite(values) & (values >= 0)))[0]
    assert bad.size == 0, (f"{what} must be finite and >= 0: {bad.size} bad value(s), first "
                           f"at index {bad[0]}: {values[bad[0]]!r}")


def _bytes_tolerance(expected: np.ndarray) -> float:
    """Absolute tolerance of byte sums: relative to the largest count involved."""
    return BYTES_RTOL * float(np.max(np.abs(expected), initial=1.0))


# ---------------------------------------------------------------- conservation
def assert_conservation(result: Any, problem: FlowProblem | None = None, *,
                        sent_bytes: np.ndarray | None = None,
                        in_network_reduction: bool = False) -> None:
    """Raise ``AssertionError`` unless bytes are neither created nor lost.

    Parameters
    ----------
    result : FlowResult or xarray.Dataset
        A timed flow set (then ``problem`` is required) or a collective Dataset.
    problem : FlowProblem, optional
        The flow set ``result`` answers.
    sent_bytes : array_like, shape (dim,), optional
        Collective only: the bytes all NPUs together inject into every dimension, as a
        closed form gives them (:func:`~flowsim.testing.closed_form_sent_bytes`). They are
        compared with the bytes on links leaving an NPU, which count each message once only
        where no NPU forwards another's data (Switch and FullyConnected dimensions, or
        neighbour-only algorithms such as ring on a Ring).
    in_network_reduction : bool
        Collective only: switches reduce what they receive, so they send less than they
        receive (skips the per-switch balance).

    Notes
    -----
    For a flow set: link bytes are finite and >= 0, and every link carries exactly the bytes
    of the arrived flows whose path crosses it (each flow's bytes appear on every link of its
    path, and nowhere else).

    For a collective: link bytes are finite and >= 0; per dimension they add up to
    ``dim_bytes``; every switch sends what it receives; in a collective where every NPU ends
    with as much data from the others as it gave them (``BALANCED_COLLECTIVES``), every NPU
    receives what it sends; and ``sent_bytes`` holds, when given.
    """
    if isinstance(result, xr.Dataset):
        _collective_conservation(result, sent_bytes, in_network_reduction)
        return
    if problem is None:
        raise TypeError("assert_conservation: give the FlowProblem the result answers")
    link_bytes = np.asarray(result.link_bytes, float)
    assert link_bytes.shape == (problem.num_links,), \
        f"link_bytes has shape {link_bytes.shape}, expected ({problem.num_links},)"
    _assert_finite_nonnegative(link_bytes, "link_bytes")
    arrived = ~np.isnan(np.asarray(result.finish_ns, float))
    carried = np.where(arrived, problem.nbytes, 0.0)
    expected = np.bincount(problem.links, weights=np.repeat(carried, np.diff(problem.indptr)),
                           minlength=problem.num_links)
    _assert_close(link_bytes, expected, "link_bytes vs the bytes of the flows crossing each "
                  "link", rtol=BYTES_RTOL, atol=_bytes_tolerance(expected))


def _collective_conservation(ds: xr.Dataset, sent_bytes: np.ndarray | None,
                             in_network_reduction: bool) -> None:
    link_bytes = ds.link_bytes.values.astype(float)
    _assert_finite_nonnegative(link_bytes, "link_bytes")
    tol = _bytes_tolerance(link_bytes)
    src, dst = ds.link_src.values, ds.link_dst.values
    npus, ndims = ds.sizes["npu"], ds.sizes["dim"]
    link_dim = ds.link_dim.values
    if np.all(link_dim >= 0):  # fabrics have no per-dimension links
        per_dim = np.bincount(link_dim, weights=link_bytes, minlength=ndims)
        _assert_close(ds.dim_bytes.values, per_dim, "dim_bytes vs link_bytes summed per "
                      "dimension", rtol=BYTES_RTOL, atol=tol)
    n_nodes = int(max(src.max(initial=-1), dst.max(initial=-1), npus - 1)) + 1
    sent = np.bincount(src, weights=link_bytes, minlength=n_nodes)
    received = np.bincount(dst, weights=link_bytes, minlength=n_nodes)
    if not in_network_reduction:
        _assert_close(sent[npus:], received[npus:], "bytes out of vs into every switch "
                      f"(switch ids from {npus})", rtol=BYTES_RTOL, atol=tol)
    if ds.attrs.get("collective") in BALANCED_COLLECTIVES:
        _assert_close(sent[:npus], received[:npus], "bytes sent vs received per NPU "
                      f"({ds.attrs['collective']})", rtol=BYTES_RTOL, atol=tol)
    if sent_bytes is not None:
        from_npu = src < npus
        injected = np.bincount(link_dim[from_npu], weights=link_bytes[from_npu],
                               minlength=ndims)
        _assert_close(injected, sent_bytes, "bytes injected by the NPUs per dimension vs the "
                      "closed form", rtol=BYTES_RTOL, atol=tol)


# ---------------------------------------------------------------- time
def assert_monotone_time(result: Any, problem: FlowProblem | None = None, *,
                         rtol: float = TIME_RTOL, atol: float = TIME_ATOL) -> None:
    """Raise ``AssertionError`` unless time runs forward and nothing outruns its links.

    Parameters
    ----------
    result : FlowResult or xarray.Dataset
        A timed flow set (then ``problem`` is required), a collective Dataset or a
        training Dataset.
    problem : FlowProblem, optional
        The flow set ``result`` answers.
    rtol, atol : float
        Times compare equal within ``rtol * |t| + atol`` ns.

    Notes
    -----
    For a flow set (flows that have not started, e.g. in a paused engine, have NaN times and
    are skipped): an arrived flow has finite times; a flow starts only after every
    dependency arrived, and exactly ``delay`` after the later of its release and that
    moment; ``send_end >= start``, no flow sends faster than its path's bottleneck alone
    (a flow with no bytes or no links ends sending when it starts); it arrives one path
    latency after its last byte left; ``time_ns`` is the last arrival.

    For a collective Dataset: every NPU's finish is finite, >= 0 and <= ``time_ns``.

    For a training Dataset: every NPU's times are finite and >= 0; its finish is at least
    its compute plus its exposed communication; ``time_ns`` is at least every finish.
    """
    if isinstance(result, xr.Dataset):
        if "compute_ns" in result:
            _workload_time(result, rtol, atol)
        else:
            finish = result.npu_finish_ns.values
            _assert_finite_nonnegative(finish, "npu_finish_ns")
            _assert_at_least(result.time_ns.values, finish, "time_ns >= npu_finish_ns",
                             rtol=rtol, atol=atol)
        return
    if problem is None:
        raise TypeError("assert_monotone_time: give the FlowProblem the result answers")
    _flow_time(result, problem, rtol, atol)


def _flow_time(result: Any, problem: FlowProblem, rtol: float, atol: float) -> None:
    start = np.asarray(result.start_ns, float)
    send_end = np.asarray(result.send_end_ns, float)
    finish = np.asarray(result.finish_ns, float)
    arrived = ~np.isnan(finish)
    for name, values in (("start_ns", start), ("send_end_ns", send_end)):
        bad = np.nonzero(arrived & ~np.isfinite(values))[0]
        assert bad.size == 0, f"{name} of arrived flow {bad[0]} is {values[bad[0]]!r}"
    started = np.nonzero(~np.isnan(start))[0]
    ready = np.array([_ready_time(problem, finish, int(f)) for f in started])
    assert not np.isnan(ready).any(), \
        f"flow {started[np.isnan(ready)][0]} started before all its dependencies arrived"
    tol = {"rtol": rtol, "atol": atol}
    _assert_at_least(start[started], problem.release_ns[started], "start >= release", **tol)
    earliest = np.maximum(ready, problem.release_ns[started]) + problem.delay_ns[started]
    _assert_close(start[started], earliest, "start = max(release, last dependency arrival) + "
                  "delay (indexed among started flows)", rtol=rtol, atol=atol)
    sent = np.nonzero(~np.isnan(send_end))[0]
    bottleneck = problem.path_bottleneck()[sent]
    alone = np.where(problem.nbytes[sent] > 0, problem.nbytes[sent] / bottleneck, 0.0)
    _assert_at_least(send_end[sent] - start[sent], alone, "sending time >= bytes / "
                     "bottleneck (indexed among flows that sent)", **tol)
    idle = (problem.nbytes[sent] <= 0) | ~np.isfinite(bottleneck)
    _assert_close(send_end[sent][idle], start[sent][idle], "send_end = start of flows with "
                  "nothing to send", rtol=rtol, atol=atol)
    done = np.nonzero(arrived)[0]
    _assert_close(finish[done], send_end[done] + problem.path_latency()[done],
                  "finish = send_end + path latency (indexed among arrived flows)", **tol)
    if arrived.all() and hasattr(result, "time_ns"):
        last = float(finish.max()) if finish.size else 0.0
        _assert_close(result.time_ns, last, "time_ns = the last arrival", **tol)


def _ready_time(problem: FlowProblem, finish: np.ndarray, f: int) -> float:
    """Arrival of flow ``f``'s last dependency (0 without any; NaN if one has not arrived)."""
    deps = problem.dependencies(f)
    return float(np.max(finish[deps])) if deps.size else 0.0


def _workload_time(ds: xr.Dataset, rtol: float, atol: float) -> None:
    for name in ("finish_ns", "compute_ns", "exposed_comm_ns"):
        _assert_finite_nonnegative(ds[name].values, name)
    _assert_at_least(ds.finish_ns.values, ds.compute_ns.values + ds.exposed_comm_ns.values,
                     "finish_ns >= compute_ns + exposed_comm_ns per NPU", rtol=rtol, atol=atol)
    _assert_at_least(ds.time_ns.values, ds.finish_ns.values, "time_ns >= finish_ns",
                     rtol=rtol, atol=atol)


# ---------------------------------------------------------------- schedule
def assert_schedule_sane(ds: xr.Dataset, *, rtol: float = TIME_RTOL,
                         atol: float = TIME_ATOL) -> None:
    """Raise ``AssertionError`` unless a collective Dataset's numbers are consistent.

    Checks: ``time_ns`` is finite, >= 0 and the latest ``npu_finish_ns``; link bytes and busy
    times are finite and >= 0; a link is busy at least ``bytes / bandwidth`` (no link
    carries faster than its capacity); ``link_utilization`` is ``bytes / (bandwidth x
    time)``; every dimension is busy at most ``time_ns``. Under the ``flow`` model also:
    links are busy at most ``time_ns`` and utilisation is at most 1. (The ``analytical``
    model ignores contention: there a link's busy time is the sum over its messages and can
    exceed the collective's time, and its utilisation 1.)
    """
    tol = {"rtol": rtol, "atol": atol}
    time_ns = float(ds.time_ns)
    _assert_finite_nonnegative(np.array([time_ns]), "time_ns")
    finish = ds.npu_finish_ns.values
    if finish.size:
        _assert_close(time_ns, finish.max(), "time_ns = max(npu_finish_ns)", **tol)
    link_bytes = ds.link_bytes.values.astype(float)
    busy = ds.link_busy_ns.values.astype(float)
    bandwidth = ds.link_bandwidth.values.astype(float)
    _assert_finite_nonnegative(link_bytes, "link_bytes")
    _assert_finite_nonnegative(busy, "link_busy_ns")
    _assert_at_least(busy, link_bytes / bandwidth, "link_busy_ns >= link_bytes / bandwidth",
                     **tol)
    utilization = ds.link_utilization.values.astype(float)
    _assert_finite_nonnegative(utilization, "link_utilization")
    expected = link_bytes / (bandwidth * time_ns) if time_ns > 0 else np.zeros_like(link_bytes)
    _assert_close(utilization, expected, "link_utilization = link_bytes / (bandwidth * "
                  "time_ns)", rtol=rtol, atol=0.0)
    _assert_finite_nonnegative(ds.dim_busy_ns.values, "dim_busy_ns")
    _assert_at_least(time_ns, ds.dim_busy_ns.values, "dim_busy_ns <= time_ns", **tol)
    if ds.attrs.get("model") == "flow":
        _assert_at_least(time_ns, busy, "link_busy_ns <= time_ns (flow model)", **tol)
        _assert_at_least(1.0, utilization, "link_utilization <= 1 (flow model)", rtol=rtol,
                         atol=0.0)
