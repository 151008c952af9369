"""``run_training`` returns the run without a Dataset: its Dataset is ``simulate``'s, and its
summary (what ``flowsim run`` prints) holds the Dataset's numbers to the bit."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import flowsim
from flowsim.results.workload import WorkloadRun, shares
from flowsim.system import run_training

PIPELINE = {"generator": "transformer", "layers": 4, "hidden": 1024, "ffn": 4096,
            "heads": 8, "vocab": 32000, "sequence": 1024, "micro_batch": 1,
            "micro_batches": 4, "tp": 2, "pp": 2, "dp": 2, "device": "a100"}
CASES = [("ring8", "resnet50_dp", "analytical"),
         ("ring8", "microbench_allreduce", "flow"),
         ({"topology": ["Ring", "Switch"], "npus_count": [2, 4], "bandwidth": [200, 50],
           "latency": [500, 500]}, PIPELINE, "flow"),
         ("dgx_pod_64_leafspine_4to1", {**PIPELINE, "dp": 16}, "analytical")]


def _from_dataset(ds: xr.Dataset) -> dict:
    """The summary as the command line computed it from the Dataset before."""
    by_layer = ds.layer_exposed_comm_ns.sum("pass")
    top = by_layer.sortby(by_layer, ascending=False)[:3]
    return {"time_ns": float(ds.time_ns), "model": ds.attrs["model"],
            "workload": ds.attrs["workload"], "npus": ds.attrs["npus"],
            **({"layout": ds.attrs["layout"]} if "layout" in ds.attrs else {}),
            "iterations": ds.attrs["iterations"],
            "compute_ns": float(ds.compute_ns.mean()),
            "exposed_comm_ns": float(ds.exposed_comm_ns.mean()),
            "bubble_ns": float(ds.bubble_ns.mean()), "idle_ns": float(ds.idle_ns.mean()),
            **shares(ds),
            **{key: ds.attrs[key] for key in ("model_flops", "tflops_per_npu", "mfu")
               if key in ds.attrs},
            "dim_bytes": [float(b) if np.isfinite(b) else None for b in ds.dim_bytes.values],
            "dim_busy_ns": [float(b) for b in ds.dim_busy_ns.values],
            "most_exposed": [[str(layer), float(v)] for layer, v in
                             zip(top.layer.values, top.values) if v > 0],
            **_memory(ds.attrs),
            "collectives": ds.attrs["collectives"],
            "stats": flowsim.results.from_attrs(ds.attrs).as_dict()}


def _memory(attrs) -> dict:
    """The memory estimate's keys of the summary, from the Dataset's flat attributes."""
    if "memory_gib" not in attrs:
        return {}
    parts = ("stage", "weights", "gradients", "optimizer", "activations")
    out = {"memory_gib": attrs["memory_gib"],
           "memory": {p: attrs["memory_stage" if p == "stage" else f"memory_{p}_gib"]
                      for p in parts}}
    if "memory_capacity_gib" in attrs:
        out["memory_capacity_gib"] = attrs["memory_capacity_gib"]
        out["memory_fits"] = bool(attrs["memory_gib"] <= attrs["memory_capacity_gib"])
    return out


@pytest.mark.parametrize(("network", "workload", "model"), CASES)
def test_the_summary_is_the_datasets_numbers(network, workload, model):
    run = run_training(network, workload, "nccl" if isinstance(workload, dict) else None,
                       model)
    assert isinstance(run, WorkloadRun)
    ds = run.to_dataset()
    xr.testing.assert_identical(ds, flowsim.simulate(
        network, workload, "nccl" if isinstance(workload, dict) else None, model))
    assert run.summary() == _from_dataset(ds)
    assert run.summary()["time_ns"] > 0


_RING_SWITCH = {"topology": ["Ring", "Switch"], "npus_count": [2, 4], "latency": [500, 500]}
_STRADDLING = {"topology": ["Switch", "Switch"], "npus_count": [8, 3], "latency": [500, 500]}
_NO_DEVICE = {k: v for k, v in PIPELINE.items() if k != "device"}


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("spec, networks", [
    # a logical view (the groups cut the dimensions): other bandwidths
    (PIPELINE, [{**_RING_SWITCH, "bandwidth": b} for b in ([200, 50], [100, 12.5])]),
    # a straddling view (tp 2 x pp 2 x dp 6 on [8, 3]): other bandwidths
    ({**PIPELINE, "dp": 6, "micro_batches": 6},
     [{**_STRADDLING, "bandwidth": b} for b in ([200, 50], [100, 10])]),
    # no device in the spec: the device of the network it runs on, not the one built for
    (_NO_DEVICE, [{"cluster": {"device": d, "nodes": 1}} for d in ("h100", "h200", "a100")]),
], ids=["logical", "straddling", "device"])
def test_a_workload_built_once_runs_on_networks_of_its_shape(model, spec, networks):
    """An optimizer over networks builds the workload once (``load_workload``) and runs it
    on every network of that shape: the same run as building it from the spec each time."""
    spec = dict(spec, generator="transformer")
    built = flowsim.load_workload(spec, flowsim.load_network(networks[0]))
    times = set()
    for network in networks:
        net = flowsim.load_network(network)
        reused = run_training(net, built, model=model).record
        fresh = run_training(net, spec, model=model).record
        assert reused.time_ns == fresh.time_ns
        np.testing.assert_array_equal(reused.npu_exposed_ns, fresh.npu_exposed_ns)
        times.add(fresh.time_ns)
    assert len(times) == len(networks)   # the networks do differ


def test_a_built_workload_refuses_a_network_of_another_shape():
    """Its groups were cut from the network it was built for: on a network of other
    dimensions it says so, in one line, rather than running on the old network."""
    from flowsim.errors import ConfigError

    built = flowsim.load_workload(PIPELINE, flowsim.load_network(
        {"topology": ["Ring", "Switch"], "npus_count": [2, 4], "bandwidth": [200, 50],
         "latency": [500, 500]}))
    other = flowsim.load_network({"topology": ["Switch", "Switch"], "npus_count": [4, 2],
                                  "bandwidth": [200, 50], "latency": [500, 500]})
    with pytest.raises(ConfigError, match=r"built for a network of dims \[2, 4\], this one "
                                          r"has \[4, 2\]"):
        run_training(other, built)
