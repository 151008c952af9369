"""The batched estimator's fast path (one jitted pass over the grid) is its slow, readable twin
(:func:`flowsim.testing.estimate_batch_reference`, point by point in plain Python) bit for
bit: on drawn networks, systems and grids, where chunks join a queue at the same moment, and
queue by queue on drawn phase times; inputs given in any broadcast form give the same times;
an empty grid gives an empty answer; the numpy path loads no xarray."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from conftest import loaded_after
from flowsim.errors import ConfigError
from flowsim.testing import (
    estimate_batch_reference,
    queue_finish_reference,
    small_networks,
    system_configs,
)
from flowsim.testing._targets import queues_in_order, queues_one_in_flight, queues_simulated

NET = {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": [4, 2, 4],
       "bandwidth": [200, 100, 50], "latency": [100, 200, 500]}
COLLECTIVES = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
               "reduce"]
#: round values, so that phases of different chunks often end at the same moment
ROUND_GBPS = [10.0, 25.0, 50.0, 100.0, 400.0]
ROUND_NS = [0.0, 100.0, 500.0]


def _barrier(system: dict) -> dict:
    """A drawn system config the batched model covers: barrier steps, no per-NPU trees."""
    out = {k: [("ring" if a == "doubleBinaryTree" else a) for a in v] if isinstance(v, list)
           else v for k, v in system.items()}
    return {**out, "step-synchronization": "barrier"}


@st.composite
def grids(draw):
    network = draw(small_networks())
    ndims = len(network["npus_count"])
    system = _barrier(draw(system_configs(network["npus_count"])))
    n = draw(st.integers(1, 5))
    gbps = st.one_of(st.sampled_from(ROUND_GBPS), st.floats(1.0, 1000.0))
    ns = st.one_of(st.sampled_from(ROUND_NS), st.floats(0.0, 5000.0))
    bandwidth = np.array(draw(st.lists(st.lists(gbps, min_size=ndims, max_size=ndims),
                                       min_size=n, max_size=n)))
    latency = np.array(draw(st.lists(st.lists(ns, min_size=ndims, max_size=ndims),
                                     min_size=n, max_size=n)))
    splits = system["preferred-dataset-splits"]
    sizes = draw(st.one_of(
        st.lists(st.integers(splits, 1 << 34), min_size=n, max_size=n),
        st.lists(st.sampled_from([1000, 1 << 20, (1 << 20) + 1]), min_size=n, max_size=n),
        st.integers(1, splits).map(lambda s: [s] * n)))   # fewer bytes than chunks
    return (network, draw(st.sampled_from(COLLECTIVES)), np.array(sizes), system,
            bandwidth, latency)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(grid=grids())
def test_batched_times_are_the_reference_bit_for_bit(grid):
    network, collective, sizes, system, bandwidth, latency = grid
    fast = flowsim.estimate_batch(network, collective, sizes, system, bandwidth=bandwidth,
                                  latency=latency)
    slow = estimate_batch_reference(network, collective, sizes, system, bandwidth=bandwidth,
                                    latency=latency)
    assert np.array_equal(fast, slow)
    point = {**network, "bandwidth": bandwidth[0].tolist(), "latency": latency[0].tolist()}
    assert fast[0] == pytest.approx(flowsim.estimate(point, collective, int(sizes[0]), system),
                                    rel=1e-12)


@pytest.mark.parametrize("splits", [4, 8])
def test_chunks_joining_a_queue_together(splits):
    """Round bandwidths, no latency: chunks returning to the 3-D all-reduce's middle queue
    meet chunks arriving there for the first time (the kernel's event loop decides)."""
    system = {"preferred-dataset-splits": splits, "endpoint-delay": 0, "local-mem-bw": 1600,
              "collective-optimization": "localBWAware",
              "all-reduce-implementation": ["ring"] * 3}
    bandwidth = np.array([[50.0, 25.0, 25.0], [100.0, 50.0, 50.0], [25.0, 10.0, 25.0],
                          [400.0, 100.0, 100.0], [100.0, 25.0, 25.0]])
    args = (NET, "all_reduce", np.array([1000, 1 << 20])[:, None], system)
    fast = flowsim.estimate_batch(*args, bandwidth=bandwidth, latency=[0, 0, 0])
    slow = estimate_batch_reference(*args, bandwidth=bandwidth, latency=np.zeros(3))
    assert np.array_equal(fast, slow)


@st.composite
def queue_cases(draw):
    """Phase times of ``small`` / ``large`` chunks (the first ``extra`` chunks large) on
    dimension queues: drawn from a few values, so that ends often coincide."""
    n_phases = draw(st.integers(1, 6))
    n_queues = draw(st.integers(1, min(3, n_phases)))
    queues = draw(st.lists(st.integers(0, n_queues - 1), min_size=n_phases,
                           max_size=n_phases))
    n_chunks = draw(st.integers(1, 5))
    value = st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])
    small = draw(st.lists(value, min_size=n_phases, max_size=n_phases))
    large = [s + draw(st.sampled_from([0.0, 0.5, 1.0])) for s in small]
    return (np.array(small), np.array(large), draw(st.integers(0, n_chunks - 1)),
            np.array(queues, np.int64), n_chunks, draw(st.integers(1, 3)))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(case=queue_cases())
def test_queue_algorithms_are_the_reference(case):
    """Every path of the kernel's queues (in chunk order, one phase at a time with shared
    queues as events, the full event loop) against the reference's plain event loop."""
    small, large, extra, queues, n_chunks, active = case
    n_phases, n_queues = len(queues), int(queues.max()) + 1
    durations = [[float(large[i] if c < extra else small[i]) for i in range(n_phases)]
                 for c in range(n_chunks)]
    expected = queue_finish_reference(durations, list(queues), active)
    ws = {"phase_of": np.empty(n_chunks, np.int64), "end": np.empty(n_chunks),
          "queue_free": np.empty(n_queues), "last_arrival": np.empty(n_queues)}
    assert queues_simulated(small, large, extra, queues, n_queues, active, n_chunks,
                            np.empty((n_queues, n_chunks * n_phases), np.int64),
                            np.empty(n_queues, np.int64), np.empty(n_queues, np.int64),
                            np.empty(n_queues, np.int64), np.empty(n_chunks, np.int64),
                            ws["phase_of"], ws["end"]) == expected
    later = [list(queues[1:]).count(q) for q in queues]
    shared = np.array([i > 0 and n > 1 for i, n in enumerate(later)])
    first_shared = next((i for i in range(1, n_phases) if shared[i]), n_phases)
    if n_chunks == 1 or (active == 1 and first_shared == n_phases):
        assert queues_in_order(small, large, extra, queues, n_phases, n_chunks, ws["end"],
                               ws["queue_free"]) == expected
    elif active == 1:
        found = queues_one_in_flight(small, large, extra, queues, shared, first_shared,
                                     n_chunks, ws["phase_of"], ws["end"], ws["queue_free"],
                                     ws["last_arrival"])
        assert found in (expected, -1.0)   # -1: a tie, left to the event loop


def test_one_in_flight_leaves_ties_to_the_event_loop():
    """Chunk 0 comes back to queue 1 (phase 3) at t = 2, when chunk 1 first joins it."""
    small = np.array([1.0, 0.5, 0.5, 1.0])
    queues = np.array([0, 1, 2, 1], np.int64)
    shared = np.array([False, True, False, True])
    found = queues_one_in_flight(small, small, 0, queues, shared, 1, 2,
                                 np.empty(2, np.int64), np.empty(2), np.empty(3), np.empty(3))
    assert found == -1.0


def test_inputs_in_any_broadcast_form_give_the_same_times():
    rng = np.random.default_rng(3)
    n = 40
    sizes = rng.integers(1 << 16, 1 << 30, n)
    bandwidth = np.column_stack([rng.uniform(10, 400, n), np.full(n, 100.0), np.full(n, 50.0)])
    system = {"preferred-dataset-splits": 3, "all-reduce-implementation": ["ring"] * 3}
    full = flowsim.estimate_batch(NET, "all_reduce", sizes, system, bandwidth=bandwidth,
                                  latency=np.tile([100.0, 200.0, 500.0], (n, 1)))
    columns = flowsim.estimate_batch(NET, "all_reduce", sizes, system,
                                     bandwidth=[bandwidth[:, 0], 100, 50])
    strided = flowsim.estimate_batch(NET, "all_reduce", sizes[:, None], system,
                                     bandwidth=np.asfortranarray(bandwidth)[:, None, :])
    assert np.array_equal(full, columns) and np.array_equal(full, strided[:, 0])
    one = flowsim.estimate_batch(NET, "all_reduce", sizes[7], system, bandwidth=bandwidth[7])
    assert one.shape == () and one == full[7]


def test_an_empty_grid_gives_an_empty_answer():
    out = flowsim.estimate_batch(NET, "all_reduce", np.zeros((2, 0), np.int64))
    assert out.shape == (2, 0) and out.dtype == np.float64


def test_a_bad_value_is_reported_before_a_bad_shape():
    with pytest.raises(ConfigError, match="'size'"):
        flowsim.estimate_batch(NET, "all_reduce", np.array([0, 1 << 20]),
                               bandwidth=[np.ones(3) * 50, 100, 50])
    with pytest.raises(ConfigError, match="bandwidths must be > 0"):
        flowsim.estimate_batch(NET, "all_reduce", np.array([1, 1 << 20]),
                               bandwidth=[np.zeros(3), 100, 50])


def test_the_numpy_path_loads_no_xarray():
    code = ("import numpy as np, flowsim\n"
            "flowsim.estimate_batch('ring8', 'all_reduce', np.array([1 << 20, 1 << 22]))")
    assert loaded_after(code, ("xarray",)) == set()
