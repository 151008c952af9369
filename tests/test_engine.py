"""The flow engine under both models: closed forms, conservation, sharing, dependencies,
monotone time, and bad flow sets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim import simulate_flows
from flowsim.errors import FlowSetError, SimulationError
from flowsim.testing import (
    FlowProblem,
    assert_conservation,
    assert_monotone_time,
    flow_instances,
)


def _run(capacity, latency, indptr, links, nbytes, **kw):
    return simulate_flows(np.asarray(capacity, float), np.asarray(latency, float),
                          np.asarray(indptr), np.asarray(links), np.asarray(nbytes, float), **kw)


def test_shared_link_is_split_fairly_and_analytical_ignores_it():
    # two 100-byte flows on one 10 B/ns link with 5 ns latency
    flow = _run([10.0], [5.0], [0, 1, 2], [0, 0], [100, 100], model="flow")
    alone = _run([10.0], [5.0], [0, 1, 2], [0, 0], [100, 100], model="analytical")
    np.testing.assert_allclose(flow.finish_ns, [25.0, 25.0])   # 200 B / 10 + 5
    np.testing.assert_allclose(alone.finish_ns, [15.0, 15.0])  # 100 B / 10 + 5 each
    assert flow.time_ns > alone.time_ns
    np.testing.assert_allclose(flow.link_busy_ns, [20.0])


def test_unequal_flows_get_leftover_capacity():
    # a short and a long flow share a link: 5 B/ns each until the short one leaves
    r = _run([10.0], [0.0], [0, 1, 2], [0, 0], [50, 150], model="flow")
    np.testing.assert_allclose(r.finish_ns, [10.0, 20.0])


def test_dependencies_release_and_delay():
    r = _run([10.0, 10.0], [5.0, 5.0], [0, 1, 2, 3], [0, 1, 1], [100, 50, 10],
             release_ns=[0, 0, 100], delay_ns=[0, 3, 0],
             dep_indptr=[0, 0, 1, 1], dep_ids=[0], model="flow")
    np.testing.assert_allclose(r.start_ns, [0.0, 18.0, 100.0])
    np.testing.assert_allclose(r.finish_ns, [15.0, 28.0, 106.0])


def test_zero_byte_flows_complete_after_their_latency():
    r = _run([10.0, 10.0], [7.0, 4.0], [0, 2, 2], [0, 1], [0, 0], model="flow")
    np.testing.assert_allclose(r.finish_ns, [11.0, 0.0])


def _random_flows(instance, seed):
    """Bytes per flow, latency per link and release per flow for a random instance."""
    capacity, indptr, links = instance
    rng = np.random.default_rng(seed)
    n = indptr.size - 1
    return (rng, n, rng.integers(0, 1000, n).astype(float), rng.uniform(0, 20, capacity.size),
            rng.uniform(0, 50, n))


@settings(max_examples=60, deadline=None)
@given(flow_instances(max_links=6, max_flows=10), st.integers(0, 2**31 - 1))
def test_conservation_and_monotone_time(instance, seed):
    capacity, indptr, links = instance
    rng, n, nbytes, latency, release = _random_flows(instance, seed)
    # a random DAG: each flow may wait for one earlier flow
    parent = np.array([rng.integers(-1, f) if f else -1 for f in range(n)])
    dep_indptr = np.concatenate([[0], np.cumsum(parent >= 0)])
    dep_ids = parent[parent >= 0]
    problem = FlowProblem.from_arrays(capacity, latency, indptr, links, nbytes,
                                      release_ns=release, dep_indptr=dep_indptr,
                                      dep_ids=dep_ids)
    results = {}
    for model in ("analytical", "flow"):
        r = simulate_flows(**problem.arguments(), model=model)
        # bytes per link equal the sum over the flows that cross it; time never runs
        # backwards, flows start when ready and none is faster than alone on its path
        assert_conservation(r, problem)
        assert_monotone_time(r, problem)
        results[model] = r
    # the flow model is never faster than the congestion-unaware one
    assert results["flow"].time_ns >= results["analytical"].time_ns - 1e-6


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_flow_equals_analytical_without_sharing(n, seed):
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(1, 10, n)
    latency = rng.uniform(0, 10, n)
    indptr = np.arange(n + 1)  # flow i alone on link i
    nbytes = rng.uniform(0, 1000, n)
    release = rng.uniform(0, 100, n)
    a = _run(capacity, latency, indptr, np.arange(n), nbytes, release_ns=release,
             model="analytical")
    f = _run(capacity, latency, indptr, np.arange(n), nbytes, release_ns=release, model="flow")
    np.testing.assert_allclose(f.finish_ns, a.finish_ns, rtol=1e-12)
    np.testing.assert_allclose(a.finish_ns, release + nbytes / capacity + latency, rtol=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    ({"nbytes": [-1.0]}, "nbytes"),
    ({"nbytes": [np.nan]}, "nbytes"),
    ({"release_ns": [-1.0]}, "release_ns"),
    ({"dep_indptr": [0, 1], "dep_ids": [0]}, "cycle"),
    ({"dep_indptr": [0, 1], "dep_ids": [5]}, "flow ids"),
    ({"dep_indptr": [0, 1]}, "both"),
    ({"model": "magic"}, "model"),
])
def test_bad_flow_sets(kwargs, match):
    args = {"nbytes": [1.0]}
    args.update(kwargs)
    nbytes = args.pop("nbytes")
    with pytest.raises((FlowSetError, flowsim.ConfigError), match=match):
        _run([1.0], [0.0], [0, 1], [0], nbytes, **args)


def test_longer_cycle_is_reported():
    with pytest.raises(FlowSetError, match="cycle"):
        _run([1.0], [0.0], [0, 1, 2, 3], [0, 0, 0], [1, 1, 1],
             dep_indptr=[0, 0, 1, 2], dep_ids=[2, 1])


def test_engine_reports_deadlock_instead_of_hanging():
    from flowsim.network import FlowEngine

    engine = FlowEngine(np.ones(1), np.zeros(1), "flow")
    first = engine.add(np.array([0, 1]), np.array([0], np.int32), 1.0)
    # a flow waiting on itself can never start (the public API refuses cycles up front)
    engine.add(np.array([0, 1]), np.array([0], np.int32), 1.0,
               dep_indptr=np.array([0, 1]), dep_ids=first + 1)
    with pytest.raises(SimulationError, match="deadlock"):
        engine.run()


def test_arrays_of_the_wrong_length_are_refused():
    with pytest.raises(FlowSetError, match="release_ns has 3 entries for 1 flows"):
        _run([1.0], [0.0], [0, 1], [0], [1.0], release_ns=[0, 0, 0])


@settings(max_examples=40, deadline=None)
@given(flow_instances(max_links=6, max_flows=10), st.integers(0, 2**31 - 1))
def test_running_to_horizons_changes_nothing(instance, seed):
    """``FlowEngine.run(until=t)`` stops with the clock at ``t`` and flows advanced to it;
    resuming gives what one uninterrupted run gives, and the clock never runs backwards."""
    from flowsim.network import FlowEngine, _kernels

    capacity, indptr, links = instance
    rng, n, nbytes, latency, release = _random_flows(instance, seed)
    whole = _run(capacity, latency, indptr, links, nbytes, release_ns=release, model="flow")
    engine = FlowEngine(capacity, latency, "flow")
    engine.add(indptr, links, nbytes, release=release)
    clock = 0.0
    for horizon in np.sort(rng.uniform(0, max(whole.time_ns, 1.0), 5)):
        status, _ = engine.run(until=horizon)
        assert engine.now >= clock
        clock = engine.now
        if status == _kernels.STATUS_HORIZON:
            assert engine.now == horizon
    engine.run()
    np.testing.assert_allclose(engine.flow_arrays("finish"), whole.finish_ns, rtol=1e-9)
    np.testing.assert_allclose(engine.link_busy[: capacity.size], whole.link_busy_ns,
                               rtol=1e-9, atol=1e-9)
