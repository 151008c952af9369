"""The estimator API: single points equal simulate_collective, the batched analytical model
equals it at every grid point, broadcasting (numpy and xarray), bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import flowsim
from flowsim.errors import ConfigError

NET = {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": [4, 2, 4],
       "bandwidth": [200, 100, 50], "latency": [100, 200, 500]}


def _system(collective, algorithm, **extra):
    key = f"{collective.replace('_', '-')}-implementation"
    names = [algorithm] if algorithm.startswith("one") else [algorithm] * 3
    return {key: names, "preferred-dataset-splits": 3, "endpoint-delay": 10,
            "local-mem-bw": 1600, "collective-optimization": "localBWAware", **extra}


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_estimate_equals_simulate_collective(model):
    for collective in ("all_reduce", "all_to_all", "broadcast"):
        ds = flowsim.simulate_collective(NET, collective, "3MiB", _system(collective, "ring"),
                                         model=model)
        assert flowsim.estimate(NET, collective, "3MiB", _system(collective, "ring"),
                                model=model) == float(ds.time_ns)


CASES = [("all_reduce", "ring", {}), ("all_reduce", "direct", {}),
         ("all_reduce", "halvingDoubling", {"collective-optimization": "baseline"}),
         ("reduce_scatter", "ring", {"active-chunks-per-dimension": 2}),
         ("all_gather", "halvingDoubling", {}), ("all_to_all", "direct", {}),
         ("all_reduce", "oneRing", {}), ("all_to_all", "oneDirect", {})]


@pytest.mark.parametrize("collective,algorithm,extra", CASES)
def test_batched_model_matches_the_scheduler_at_every_point(collective, algorithm, extra):
    rng = np.random.default_rng(11)
    n = 12
    sizes = rng.integers(1 << 16, 1 << 28, n)
    bandwidth = rng.uniform(10, 400, (n, 3))
    latency = rng.uniform(0, 1000, (n, 3))
    system = _system(collective, algorithm, **extra)
    batch = flowsim.estimate_batch(NET, collective, sizes, system, bandwidth=bandwidth,
                                   latency=latency)
    for i in range(n):
        net = {**NET, "bandwidth": bandwidth[i].tolist(), "latency": latency[i].tolist()}
        expected = float(flowsim.simulate_collective(net, collective, int(sizes[i]), system)
                         .time_ns)
        assert batch[i] == pytest.approx(expected, rel=1e-12)


def test_broadcasting_and_xarray():
    sizes = np.array([1 << 20, 1 << 26])[:, None]
    bw_switch = np.array([25.0, 50.0, 100.0])[None, :]
    out = flowsim.estimate_batch(NET, "all_reduce", sizes, _system("all_reduce", "ring"),
                                 bandwidth=[200, 100, bw_switch])
    assert out.shape == (2, 3)
    assert np.all(np.diff(out[0]) <= 0)  # more switch bandwidth is never slower
    size = xr.DataArray([1 << 20, 1 << 24], dims="size", coords={"size": [1 << 20, 1 << 24]})
    bw = xr.DataArray([50.0, 100.0], dims="bw2", coords={"bw2": [50.0, 100.0]})
    da = flowsim.estimate_batch(NET, "all_reduce", size, _system("all_reduce", "ring"),
                                bandwidth=[200, 100, bw])
    assert isinstance(da, xr.DataArray) and da.dims == ("size", "bw2")
    assert float(da.sel(size=1 << 24, bw2=100.0)) == pytest.approx(flowsim.estimate(
        {**NET, "bandwidth": [200, 100, 100]}, "all_reduce", 1 << 24,
        _system("all_reduce", "ring")), rel=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    ({"size": np.array([0])}, "'size'"),
    ({"size": np.array([1.5])}, "'size'"),
    ({"bandwidth": [1, 2]}, "'bandwidth'"),
    ({"bandwidth": np.ones((2, 2))}, "'bandwidth'"),
    ({"latency": [-1, 0, 0]}, "latencies >= 0"),
    ({"collective": "send_recv"}, "'collective'"),
    ({"system": {"step-synchronization": "per_npu"}}, "per_npu"),
    ({"system": {"all-reduce-implementation": ["doubleBinaryTree"] * 3}}, "per NPU"),
])
def test_batched_bad_inputs(kwargs, match):
    args = {"collective": "all_reduce", "size": np.array([1 << 20]), "system": None}
    args.update(kwargs)
    collective, size, system = args.pop("collective"), args.pop("size"), args.pop("system")
    with pytest.raises(ConfigError, match=match):
        flowsim.estimate_batch(NET, collective, size, system, **args)


def test_batched_flow_model_point_by_point():
    sizes = np.array([1 << 20, 1 << 24])
    bw = np.array([[200.0, 100.0, 25.0], [200.0, 100.0, 100.0]])
    system = _system("all_to_all", "direct")
    out = flowsim.estimate_batch(NET, "all_to_all", sizes[:, None], system,
                                 bandwidth=bw[None, :, :], model="flow")
    assert out.shape == (2, 2)
    for i in range(2):
        for j in range(2):
            net = {**NET, "bandwidth": bw[j].tolist()}
            assert out[i, j] == float(flowsim.simulate_collective(
                net, "all_to_all", int(sizes[i]), system, model="flow").time_ns)


def test_batched_shapes_that_do_not_broadcast():
    with pytest.raises(ConfigError, match="do not broadcast"):
        flowsim.estimate_batch(NET, "all_reduce", np.array([1 << 20, 1 << 21]),
                               bandwidth=[np.ones(3) * 50, 100, 50])
