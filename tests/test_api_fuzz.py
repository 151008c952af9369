"""The public Python API raises only FlowsimError subclasses: hypothesis calls every public
function with wrong types and wrong values in every argument (hundreds of calls), and each
call ends within seconds with a FlowsimError (a ConfigTypeError, also a TypeError, for a
wrong type), never a TypeError, ValueError, AttributeError, ... from inside numpy or the
engine (issue 15: 25 of 101 such calls did).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.errors import FlowsimError

NET = {"topology": ["Ring"], "npus_count": [4], "bandwidth": [50], "latency": [500]}
SYSTEM = {"preferred-dataset-splits": 1}
LIMIT_S = 10.0

#: Values that are wrong for (almost) every argument.
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-10**30, 10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.binary(max_size=8), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from([object(), np.float64("nan"), np.int64(-1), np.array([[1, 2]]),
                     {"topology": 1}, ["Ring", 2], (1.5,), 1e308, -0.0, float("inf"),
                     "../no/such/file.yml", {1, 2}, range(3), b"\xff"]))

#: (function, the valid arguments, names that may be replaced by junk)
CALLS = [
    (flowsim.simulate_collective, dict(network=NET, collective="all_reduce", size="1MiB",
                                       system=SYSTEM), ["network", "collective", "size",
                                                        "system", "model", "dims", "root",
                                                        "src", "dst", "group", "max_work"]),
    (flowsim.simulate, dict(network=NET, workload="microbench_allreduce", system=SYSTEM),
     ["network", "workload", "system", "model", "iterations", "compute_scale", "comm_scale",
      "speed", "roofline", "memory", "collective_streams", "comm_groups", "max_work"]),
    (flowsim.estimate, dict(network=NET, collective="all_reduce", size="1MiB", system=SYSTEM),
     ["network", "collective", "size", "system", "model", "dims", "root", "max_work"]),
    (flowsim.estimate_batch, dict(network=NET, collective="all_reduce",
                                  size=np.array([1 << 20]), system=SYSTEM),
     ["network", "collective", "size", "system", "bandwidth", "latency", "dims", "model"]),
    (flowsim.simulate_flows, dict(capacity=np.array([1.0, 1.0]), link_latency=np.zeros(2),
                                  indptr=np.array([0, 1, 2]), links=np.array([0, 1]),
                                  nbytes=np.array([10.0, 20.0])),
     ["capacity", "link_latency", "indptr", "links", "nbytes", "model", "release_ns",
      "delay_ns", "dep_indptr", "dep_ids"]),
    (flowsim.maxmin_rates, dict(capacity=np.array([1.0, 2.0]), indptr=np.array([0, 1, 2]),
                                links=np.array([0, 1])), ["capacity", "indptr", "links"]),
    (flowsim.load_network, dict(source=NET), ["source"]),
    (flowsim.load_system, dict(source=SYSTEM), ["source"]),
    (flowsim.load_workload, dict(source="microbench_allreduce",
                                 network=flowsim.load_network(NET)),
     ["source", "network", "iterations"]),
    (flowsim.sweep, dict(spec={"base": {"network": NET, "size": "1MiB"},
                               "axes": {"size": ["1MiB"]}}, jobs=1),
     ["spec", "output", "jobs", "shard", "max_work", "checkpoint_seconds"]),
    (flowsim.merge, dict(folder="/nonexistent-flowsim-folder"), ["folder", "output"]),
]


def _parameters(function) -> list[str]:
    import inspect
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("function, valid, names", CALLS,
                         ids=[c[0].__name__ for c in CALLS])
def test_the_valid_call_names_real_parameters(function, valid, names):
    assert set(valid) | set(names) <= set(_parameters(function))


def _call(function, kwargs):
    start = time.perf_counter()
    try:
        function(**kwargs)
    except FlowsimError:
        pass
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{function.__name__}({', '.join(f'{k}={v!r}'[:80] for k, v in kwargs.items())}"
                    f") raised {type(exc).__name__}: {exc}")
    assert time.perf_counter() - start < LIMIT_S


@pytest.mark.filterwarnings("ignore::flowsim.errors.FlowsimWarning")
@pytest.mark.parametrize("function, valid, names", CALLS,
                         ids=[c[0].__name__ for c in CALLS])
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_wrong_arguments_raise_only_flowsim_errors(function, valid, names, data, tmp_path_factory):
    name = data.draw(st.sampled_from(names), label="argument")
    value = data.draw(JUNK, label="value")
    kwargs = dict(valid)
    if name == "output" and isinstance(value, str):
        value = str(tmp_path_factory.mktemp("out") / (value.replace("/", "_") or "x"))
    kwargs[name] = value
    _call(function, kwargs)


@pytest.mark.parametrize("call", [
    lambda: flowsim.simulate_collective(NET, "all_reduce", "1MiB", dims="0"),
    lambda: flowsim.simulate_collective(NET, "all_reduce", "1MiB", dims=[0.5]),
    lambda: flowsim.simulate_collective(NET, "all_reduce", "1MiB", max_work=0),
    lambda: flowsim.simulate_collective(NET, "all_reduce", "1MiB", max_work=math.nan),
    lambda: flowsim.estimate_batch(NET, "all_reduce", np.array([1 << 20]),
                                   bandwidth=[np.array([5e-324])]),
    lambda: flowsim.estimate_batch(NET, "all_reduce", np.array([1 << 20]),
                                   latency=[np.array([1e308])]),
    lambda: flowsim.estimate_batch(NET, "all_reduce", np.array([1 << 62])),
    lambda: flowsim.sweep({"base": {"network": NET, "size": "1MiB"}}, jobs=0),
    lambda: flowsim.sweep({"base": {"network": NET, "size": "1MiB"}}, jobs=1.5),
])
def test_named_wrong_values_are_config_errors(call):
    """issue 15 "Accepted silently": ``dims="0"`` and ``dims=[0.5]`` ran (as dimension 0)."""
    with pytest.raises(flowsim.ConfigError):
        call()
