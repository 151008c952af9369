"""A program tracking one NPU computes its times on floats: every operation gives the same
bits as the array arithmetic on one-entry arrays (and a whole run the same record)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.system.npu_times import ArrayTimes, ScalarTimes, npu_times

TIMES = st.floats(0.0, 1e15, allow_nan=False)


def same(a, b) -> bool:
    """Equal bits (a float against a one-entry array)."""
    return np.float64(a).tobytes() == np.asarray(b, np.float64).reshape(-1)[0].tobytes()


@settings(max_examples=300, deadline=None)
@given(a=TIMES, b=TIMES, many=st.lists(TIMES, min_size=1, max_size=5), held=TIMES)
def test_float_times_are_the_arrays_bits(a, b, many, held):
    rep = np.array([3])
    one, arrays = ScalarTimes(rep), ArrayTimes(rep)
    wrap = [np.array([x]) for x in many]
    assert same(one.maximum(a, b), arrays.maximum(np.array([a]), np.array([b])))
    assert same(one.latest(many), arrays.latest(wrap))
    assert same(one.full(a), arrays.full(a)) and one.peak(a) == arrays.peak(np.array([a]))
    for method in ("write", "raise_to", "add_to"):
        left, right = np.full(5, held), np.full(5, held)
        getattr(one, method)(left, a)
        getattr(arrays, method)(right, np.array([a]))
        assert left.tobytes() == right.tobytes()
        assert same(one.read(left), arrays.read(right))
    assert same(one.from_array(one.as_array(a)), np.array([a]))


def test_one_npu_programs_take_floats_and_the_rest_arrays():
    assert npu_times(np.array([7])).scalar and not npu_times(np.array([7, 8])).scalar


def test_a_pipeline_run_is_the_same_tracked_as_one_npu_or_as_all():
    """Speed factors that differ by a hair's breadth from 1 make every program track all of
    its NPUs (arrays); the times must agree with the one-NPU (float) run to that hair."""
    spec = dict(generator="transformer", layers=4, hidden=256, heads=8, sequence=128,
                micro_batch=1, vocab=0, tp=4, pp=2, dp=2, global_batch=8,
                roofline={"peak_tflops": 100, "memory_bandwidth_GBps": 1000})
    net = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
           "latency": [500, 2000]}
    floats = flowsim.simulate(net, spec)
    speeds = 1.0 + np.arange(16) * 1e-15   # every NPU its own speed: arrays everywhere
    arrays = flowsim.simulate(net, spec, speed=speeds)
    for name in ("time_ns", "finish_ns", "compute_ns", "exposed_comm_ns", "bubble_ns"):
        np.testing.assert_allclose(arrays[name], floats[name], rtol=1e-12)
