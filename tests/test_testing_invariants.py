"""The invariant checkers of :mod:`flowsim.testing`: they pass on what flowsim computes and
fail on every corruption of it; and, used as properties, conservation, monotone time and
schedule sanity hold for random flow sets and random collectives on random networks."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.testing import (
    FlowProblem,
    assert_conservation,
    assert_monotone_time,
    assert_schedule_sane,
    closed_form_sent_bytes,
    flow_sets,
    run_events_reference,
    small_networks,
    system_configs,
)
from flowsim.testing._targets import FlowEngine, simulate_flows

#: flows 0 and 1 share link 0; flow 1 waits for flow 0 (+3 ns); flow 2 is released at 100;
#: flow 3 has no bytes, flow 4 no links
PROBLEM = FlowProblem.from_arrays(
    [10.0, 10.0], [5.0, 2.0], [0, 1, 3, 4, 5, 5], [0, 0, 1, 1, 0],
    [100.0, 50.0, 10.0, 0.0, 7.0], release_ns=[0, 0, 100, 1, 2], delay_ns=[0, 3, 0, 0, 0],
    dep_indptr=[0, 0, 1, 1, 1, 1], dep_ids=[0])
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
IMPLEMENTATION = {c: c.replace("_", "-") + "-implementation" for c in COLLECTIVES}


def corrupt(result, **changes):
    """A copy of a FlowResult with some arrays changed by functions of their copies."""
    fields = {}
    for name, change in changes.items():
        value = getattr(result, name)
        value = value.copy() if isinstance(value, np.ndarray) else value
        fields[name] = change(value)
    return dataclasses.replace(result, **fields)


def at(index, value=None, *, add=0.0, scale=1.0):
    """A change setting (or shifting, scaling) one entry of an array."""
    def change(array):
        array[index] = (array[index] if value is None else value) * scale + add
        return array
    return change


# ---------------------------------------------------------------- flow sets
@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_flow_checkers_pass_on_the_engine_and_the_reference(model):
    for result in (simulate_flows(**PROBLEM.arguments(), model=model),
                   run_events_reference(**PROBLEM.arguments(), model=model)):
        assert_conservation(result, PROBLEM)
        assert_monotone_time(result, PROBLEM)


FLOW_CORRUPTIONS = {
    "a link carries a byte too many": (assert_conservation, dict(link_bytes=at(0, add=1.0)),
                                       "link_bytes vs the bytes"),
    "negative link bytes": (assert_conservation, dict(link_bytes=at(1, -1.0)), ">= 0"),
    "a NaN link count": (assert_conservation, dict(link_bytes=at(1, np.nan)), ">= 0"),
    "a missing link": (assert_conservation, dict(link_bytes=lambda a: a[:1]), "shape"),
    "a start before the dependency arrived": (
        assert_monotone_time, dict(start_ns=at(1, add=-5.0), send_end_ns=at(1, add=-5.0),
                                   finish_ns=at(1, add=-5.0)), "start = max"),
    "a start before the release": (
        assert_monotone_time, dict(start_ns=at(2, add=-1.0)), "start >= release"),
    "a start later than ready": (
        assert_monotone_time, dict(start_ns=at(2, add=1.0), send_end_ns=at(2, add=1.0),
                                   finish_ns=at(2, add=1.0)), "start = max"),
    "sending faster than the bottleneck": (
        assert_monotone_time, dict(send_end_ns=at(2, add=-0.5), finish_ns=at(2, add=-0.5)),
        "bytes / bottleneck"),
    "the last byte leaving before the first": (
        assert_monotone_time, dict(send_end_ns=at(3, add=-1.0), finish_ns=at(3, add=-1.0)),
        "bytes / bottleneck"),
    "a flow with no bytes that sends for a while": (
        assert_monotone_time, dict(send_end_ns=at(3, add=1.0), finish_ns=at(3, add=1.0)),
        "nothing to send"),
    "an arrival without the path latency": (
        assert_monotone_time, dict(finish_ns=at(2, add=-2.0)), "path latency"),
    "a NaN start of an arrived flow": (
        assert_monotone_time, dict(start_ns=at(4, np.nan)), "start_ns of arrived flow 4"),
    "a total time that is not the last arrival": (
        assert_monotone_time, dict(time_ns=lambda t: t + 1.0), "last arrival"),
}


@pytest.mark.parametrize("case", FLOW_CORRUPTIONS)
def test_flow_checkers_catch_corruption(case):
    checker, changes, match = FLOW_CORRUPTIONS[case]
    good = simulate_flows(**PROBLEM.arguments(), model="flow")
    checker(good, PROBLEM)
    with pytest.raises(AssertionError, match=match):
        checker(corrupt(good, **changes), PROBLEM)


def test_flow_checkers_need_the_problem():
    with pytest.raises(TypeError, match="FlowProblem"):
        assert_conservation(simulate_flows(**PROBLEM.arguments()))


def test_checkers_judge_a_paused_engine():
    # flows not started yet have NaN times; only arrived flows count on the links
    engine = FlowEngine(PROBLEM.capacity, PROBLEM.link_latency, "flow")
    engine.add(PROBLEM.indptr, PROBLEM.links, PROBLEM.nbytes, release=PROBLEM.release_ns,
               delay=PROBLEM.delay_ns, dep_indptr=PROBLEM.dep_indptr, dep_ids=PROBLEM.dep_ids)
    engine.run(until=16.0)
    paused = SimpleNamespace(start_ns=engine.flow_arrays("start"),
                             send_end_ns=engine.flow_arrays("send_end"),
                             finish_ns=engine.flow_arrays("finish"),
                             link_bytes=engine.link_bytes())
    assert np.isnan(paused.finish_ns).any() and not np.isnan(paused.finish_ns).all()
    assert_monotone_time(paused, PROBLEM)
    assert_conservation(paused, PROBLEM)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(flow_sets())
def test_random_flow_sets_conserve_bytes_and_time_runs_forward(problem):
    results = {}
    for model in ("analytical", "flow"):
        results[model] = simulate_flows(**problem.arguments(), model=model)
        assert_conservation(results[model], problem)
        assert_monotone_time(results[model], problem)
    # sharing links never makes a flow set finish earlier
    assert results["flow"].time_ns >= results["analytical"].time_ns * (1 - 1e-12) - 1e-9


# ---------------------------------------------------------------- collectives
HIER = {"topology": ["Switch", "Ring"], "npus_count": [4, 2], "bandwidth": [100, 50],
        "latency": [500, 700]}


@pytest.fixture(scope="module")
def hier_flow():
    return flowsim.simulate_collective(HIER, "all_reduce", 1 << 20, model="flow")


def test_closed_form_of_the_ring_all_reduce():
    n, p = 3 << 20, 8
    sent = closed_form_sent_bytes([p], "all_reduce", n)
    assert sent[0] / p == pytest.approx(2 * (p - 1) / p * n)
    # localBWAware: the second dimension works on the first one's shard
    np.testing.assert_allclose(closed_form_sent_bytes([4, 2], "all_reduce", n),
                               [8 * 2 * 3 / 4 * n, 8 * 2 * 1 / 2 * n / 4])
    np.testing.assert_allclose(
        closed_form_sent_bytes([4, 2], "all_reduce", n, optimization="baseline"),
        [8 * 2 * 3 / 4 * n, 8 * 2 * 1 / 2 * n])
    with pytest.raises(ValueError, match="no closed form"):
        closed_form_sent_bytes([4], "all_to_all", n, ["halvingDoubling"])


def test_collective_checkers_pass(hier_flow):
    assert_conservation(hier_flow, sent_bytes=closed_form_sent_bytes([4, 2], "all_reduce",
                                                                     1 << 20))
    assert_monotone_time(hier_flow)
    assert_schedule_sane(hier_flow)


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_collective_checkers_pass_on_a_fabric(model):
    # a 4:1 oversubscribed leaf-spine: switches at two tiers, ECMP over the spines
    fabric = {"fabric": {"generator": "leaf_spine", "hosts": 4, "npus_per_host": 2,
                         "nic": {"bandwidth": 50, "latency": 500}, "hosts_per_leaf": 2,
                         "oversubscription": 2, "spines": 1}}
    ds = flowsim.simulate_collective(fabric, "all_to_all", 1 << 20,
                                     {"all-to-all-implementation": ["direct", "direct"]},
                                     model=model)
    assert_conservation(ds)
    assert_monotone_time(ds)
    assert_schedule_sane(ds)
    with pytest.raises(AssertionError, match="switch"):
        assert_conservation(_shift("link_bytes", -1, 1000.0)(ds))


def test_analytical_links_may_be_oversubscribed():
    # the analytical model ignores contention: a direct all-to-all puts 3 messages on each
    # NPU's uplink at once, so utilisation exceeds 1 and a link is busier than the run
    ds = flowsim.simulate_collective(
        {"topology": ["Switch"], "npus_count": [4], "bandwidth": [100], "latency": [500]},
        "all_to_all", 1 << 20, {"all-to-all-implementation": ["direct"]}, model="analytical")
    assert float(ds.link_utilization.max()) > 1
    assert_schedule_sane(ds)
    with pytest.raises(AssertionError, match="flow model"):
        assert_schedule_sane(ds.assign_attrs(model="flow"))


def _shift(name, index, delta=0.0, scale=1.0):
    """A change of one entry of a Dataset variable: ``value * scale + delta``."""
    def change(ds):
        values = ds[name].values.copy()
        values[index] = values[index] * scale + delta
        return ds.assign({name: (ds[name].dims, values)})
    return change


def _moved_bytes(ds):
    """Bytes moved from one ring link to another: dimension totals unchanged, but NPUs no
    longer receive what they send."""
    ring = np.nonzero((ds.link_dim.values == 1) & (ds.link_bytes.values > 0))[0]
    return _shift("link_bytes", ring[1], -1000.0)(_shift("link_bytes", ring[0], 1000.0)(ds))


COLLECTIVE_CORRUPTIONS = {
    "a link carries bytes its dimension total lacks": (
        assert_conservation, _shift("link_bytes", 0, 1000.0), "dim_bytes"),
    "a switch sends what it never received": (
        assert_conservation,
        lambda ds: _shift("dim_bytes", 0, 1000.0)(_shift("link_bytes", 0, 1000.0)(ds)),
        "switch"),
    "an NPU receives less than it sends": (assert_conservation, _moved_bytes, "per NPU"),
    "a NaN link count": (assert_conservation, _shift("link_bytes", 3, np.nan), ">= 0"),
    "an NPU finishing after the collective": (
        assert_monotone_time, _shift("npu_finish_ns", 2, 1.0), "time_ns >= npu_finish_ns"),
    "a negative NPU finish": (
        assert_monotone_time, _shift("npu_finish_ns", 2, -1e9), ">= 0"),
    "a collective time after every NPU finished": (
        assert_schedule_sane, _shift("time_ns", (), 1.0), "max\\(npu_finish_ns\\)"),
    "a link busy for less than its bytes take": (
        assert_schedule_sane, _shift("link_busy_ns", 0, scale=0.5),
        "link_busy_ns >= link_bytes / bandwidth"),
    "a flow-model link busy longer than the collective": (
        assert_schedule_sane, _shift("link_busy_ns", 0, 1e9), "<= time_ns"),
    "a utilisation that does not match the bytes": (
        assert_schedule_sane, _shift("link_utilization", 0, 0.01), "link_utilization ="),
    "a dimension busy longer than the collective": (
        assert_schedule_sane, _shift("dim_busy_ns", 0, 1e9), "dim_busy_ns"),
}


@pytest.mark.parametrize("case", COLLECTIVE_CORRUPTIONS)
def test_collective_checkers_catch_corruption(case, hier_flow):
    checker, change, match = COLLECTIVE_CORRUPTIONS[case]
    checker(hier_flow)
    with pytest.raises(AssertionError, match=match):
        checker(change(hier_flow))


def test_closed_form_mismatch_is_caught(hier_flow):
    sent = closed_form_sent_bytes([4, 2], "all_reduce", 1 << 20)
    with pytest.raises(AssertionError, match="closed form"):
        assert_conservation(hier_flow, sent_bytes=sent * 1.01)


def _closed_form(network: dict, system: dict, collective: str, size: int):
    """Bytes the NPUs inject per dimension, where a closed form exists and every message
    leaves its sender once (no NPU relays others' data: no non-ring algorithm on a Ring of
    more than three NPUs); otherwise None."""
    algorithms = system[IMPLEMENTATION[collective]]
    relays = any(block == "Ring" and algorithm != "ring" and p > 3 for block, algorithm, p
                 in zip(network["topology"], algorithms, network["npus_count"]))
    if relays:
        return None
    try:
        return closed_form_sent_bytes(network["npus_count"], collective, size, algorithms,
                                      system["collective-optimization"])
    except ValueError:
        return None


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_random_collectives_conserve_bytes_keep_time_and_stay_sane(data):
    network = data.draw(small_networks(), label="network")
    system = data.draw(system_configs(network["npus_count"]), label="system")
    collective = data.draw(st.sampled_from(COLLECTIVES), label="collective")
    size = data.draw(st.sampled_from([1, 1000, 1 << 16, 3 << 20]), label="size")
    sent = _closed_form(network, system, collective, size)
    for synchronization in ("barrier", "per_npu"):
        for model in ("analytical", "flow"):
            config = dict(system, **{"step-synchronization": synchronization})
            ds = flowsim.simulate_collective(network, collective, size, config, model=model)
            assert_conservation(ds, sent_bytes=sent)
            assert_monotone_time(ds)
            assert_schedule_sane(ds)


# ---------------------------------------------------------------- training runs
@pytest.fixture(scope="module")
def training():
    return flowsim.simulate("ring8", "microbench_allreduce", model="flow")


@pytest.mark.parametrize("change,match", [
    (_shift("finish_ns", 0, scale=0.5), "finish_ns >= compute_ns"),
    (_shift("time_ns", (), -1.0), "time_ns >= finish_ns"),
    (_shift("compute_ns", 1, np.nan), "compute_ns must be finite"),
])
def test_training_time_checker(training, change, match):
    assert_monotone_time(training)
    with pytest.raises(AssertionError, match=match):
        assert_monotone_time(change(training))
