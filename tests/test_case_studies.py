"""The case-study scripts (scripts/case_studies/): their sweep specs on a tiny grid, and a
whole run of each study's core (sweeps, NetCDF, figures) on tiny systems."""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import pytest
import xarray as xr

import flowsim
from conftest import REPO
from flowsim.sweep import load_spec


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "case_studies" /
                                                  f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # so that process pools can pickle its functions
    spec.loader.exec_module(module)
    return module


dlrm = _load("dlrm_128")
topo = _load("topology_budget")

TINY_DLRM = dlrm.Grid(
    nodes=2, gpus_per_node=4, splits=2, active=2, injection_sweep_ns=(10.0, 1e4),
    chunk_sweep_splits=(2,), chunk_sweep_active=(1, 2),
    scheduling=((1, "LIFO"), (2, "LIFO"), (2, "FIFO")), iterations=1,
    workload={"generator": "dlrm", "batch_per_npu": 8, "dense_features": 32,
              "sparse_features": 8, "embedding_dim": 16, "pooling": 4, "bottom_mlp": [32, 16],
              "top_mlp": [32, 1]})

TINY_TOPO = topo.Grid(
    shapes={"1D": (("Switch",), (16,)), "2D": (("FullyConnected", "Switch"), (4, 4)),
            "4D": (("Ring", "FullyConnected", "Ring", "Switch"), (2, 2, 2, 2))},
    sizes=("64KiB", "1MiB"), transformer_active=(1, 2),
    transformer={"generator": "transformer", "layers": 1, "hidden": 256, "heads": 4,
                 "sequence": 128,
                 "micro_batch": 1, "micro_batches": 2, "tp": 4, "dp": 4})


# ------------------------------------------------------------------------------ study 1
def test_dlrm_systems_and_units():
    nets = dlrm.systems()
    assert list(nets) == ["Flat100G", "Flat800G", "Hier", "HierOpt"]
    assert dlrm.gbit(100) == pytest.approx(11.6415, abs=1e-4)   # 12.5e9 B/s in 2^30 B/s
    assert nets["Flat800G"]["bandwidth"] == [pytest.approx(8 * dlrm.gbit(100))]
    assert nets["Hier"]["npus_count"] == [8, 16] and nets["Flat100G"]["npus_count"] == [128]
    assert nets["HierOpt"]["in_network_reduction"] == [False, True]
    assert all(lat == 500 for net in nets.values() for lat in net["latency"])


def test_dlrm_collectives_come_from_the_generator():
    ops = dlrm.dlrm_collectives()
    assert ops[0] == ("embedding a2a", "all_to_all", 512 * 64 * 64 * 2, 2)
    assert sum(count for *_, count in ops[1:]) == 7 + 12         # one all-reduce per layer
    top = [o for o in ops if o[0] == "AR top1-top10"][0]
    assert top[2] == (2048 * 2048 + 2048) * 2 and top[3] == 10


@pytest.mark.parametrize("build,axes", [
    ("collectives_sweep", {}),
    ("coll_injection_sweep", {"system_endpoint_delay": 2}),
    ("coll_chunks_sweep", {"system_preferred_dataset_splits": 1,
                           "system_active_chunks_per_dimension": 2}),
    ("iteration_sweep", {}),
    ("injection_sweep", {"system_endpoint_delay": 2}),
    ("scheduling_sweep", {"setting": 3}),
])
def test_dlrm_specs_on_a_tiny_grid(build, axes):
    sweep = getattr(dlrm, build)(TINY_DLRM)
    spec = load_spec(sweep.spec)
    sizes = {axis.name: len(axis) for axis in spec.axes}
    runs = 4 * 2 * 2                                   # systems x algorithms x models
    if build == "injection_sweep":
        runs -= 2                                      # flat + direct: analytical only
    if build == "scheduling_sweep":
        runs = 4 * 2 - 2                               # flow model only, without flat + direct
    assert sizes.pop("run") == len(sweep.rows) == runs
    if sweep.ops is not None:
        assert sizes.pop("op") == len(sweep.ops)
        assert spec.kind == "collective"
    else:
        assert spec.kind == "workload" and spec.base["iterations"] == 1
    assert sizes == axes
    assert spec.size == math.prod(len(a) for a in spec.axes)
    hier = [r for r in sweep.rows if r["system"] == "Hier"]
    position = [0] * len(spec.axes)
    position[[a.name for a in spec.axes].index("run")] = sweep.rows.index(hier[0])
    point = spec.point(int(np.ravel_multi_index(position, spec.shape)))
    assert point["network"]["npus_count"] == [4, 2]
    assert point["system"]["all-reduce-implementation"] == ["direct", hier[0]["allreduce"]]


def test_dlrm_study_core_on_tiny_systems(tmp_path):
    pytest.importorskip("matplotlib")
    results = dlrm.run_study(tmp_path, TINY_DLRM, jobs=1, progress=False)
    for name in ("collectives", "coll_injection", "coll_chunks", "iteration", "injection",
                 "scheduling", "layers"):
        assert (tmp_path / f"dlrm_128_{name}.nc").is_file()
    for name in ("collectives", "iteration", "injection", "chunks", "layers"):
        assert (tmp_path / f"dlrm_128_{name}.png").stat().st_size > 5000
    for name, ds in results.items():   # no point failed (skipped points are NaN, not errors)
        if "error" in ds:
            assert (ds.error == "").all(), name
    it = xr.open_dataset(tmp_path / "dlrm_128_iteration.nc").load()
    assert dict(it.sizes) == {"system": 4, "allreduce": 2, "model": 2}
    assert (it.error == "").all()
    assert np.all(it.time_ns >= it.compute_ns) and np.all(it.exposed_comm_ns >= 0)
    assert np.all(it.blocked_comm_ns <= it.exposed_comm_ns + 1e-6)
    # 8x the bandwidth is never slower in the flow model
    t = it.time_ns.sel(model="flow")
    assert np.all(t.sel(system="Flat800G") <= t.sel(system="Flat100G") * (1 + 1e-9))
    inj = results["injection"]
    assert np.isnan(inj.time_ns.sel(system="Flat100G", allreduce="direct", model="flow")).all()
    assert np.isfinite(inj.time_ns.sel(model="analytical")).all()
    assert "Flat100G" in dlrm.summary(results)


# ------------------------------------------------------------------------------ study 2
def test_budget_splits_keep_the_per_npu_budget():
    for shape, (_, npus) in topo.SHAPES.items():
        assert math.prod(npus) == 1024
        for split in topo.SPLITS:
            net = topo.network(shape, split)
            # measured on the built network: bandwidth of NPU 0's outgoing links
            built = flowsim.load_network(net)
            out_gbps = built.link_bandwidth[built.link_src == 0].sum() * 1e9 / 2**30
            assert out_gbps == pytest.approx(topo.BUDGET_GBPS)
    inner = topo.shares("inner", 3)
    assert inner[0] > inner[1] > inner[2] and inner.sum() == pytest.approx(1)
    net = topo.network("3D", "even", in_network=True)
    assert net["in_network_reduction"] == [False, False, True]
    algorithms = topo.algorithms("4D", "direct")
    assert algorithms["all-reduce-implementation"] == ["ring", "direct", "ring", "direct"]
    assert algorithms["all-to-all-implementation"] == ["ring", "direct", "ring", "direct"]
    assert topo.algorithms("2D", "in-network")["all-reduce-implementation"] == \
        ["direct", "halvingDoubling"]


@pytest.mark.parametrize("build,configs,axes", [
    ("allreduce_sweep", (1 + 2 * 3) * 3, {"system_collective_optimization": 2, "size": 2}),
    ("alltoall_sweep", 1 + 2 * 3, {"size": 2}),
    ("transformer_sweep", 2 * 3 * 3, {"system_active_chunks_per_dimension": 2}),
])
def test_budget_specs_on_a_tiny_grid(build, configs, axes):
    sweep = getattr(topo, build)(TINY_TOPO)
    spec = load_spec(sweep.spec)
    sizes = {axis.name: len(axis) for axis in spec.axes}
    assert sizes.pop("run") == len(sweep.rows) == 2 * configs     # x two models
    assert sizes == axes
    assert {r["model"] for r in sweep.rows} == {"analytical", "flow"}
    if build == "transformer_sweep":
        assert spec.kind == "workload" and "1D" not in {r["shape"] for r in sweep.rows}


def test_budget_study_core_on_tiny_systems(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("scipy")
    results = topo.run_study(tmp_path, TINY_TOPO, jobs=1, progress=False)
    for name in ("allreduce", "alltoall", "transformer", "rankings"):
        assert (tmp_path / f"topology_budget_{name}.nc").is_file()
    for name in ("collectives", "allreduce_variants", "ranking", "transformer"):
        assert (tmp_path / f"topology_budget_{name}.png").stat().st_size > 5000
    for name, ds in results.items():
        if "error" in ds:
            assert (ds.error == "").all(), name
    ar = results["allreduce"]
    assert set(ar.dims) == {"shape", "split", "switch", "model",
                            "system_collective_optimization", "size"}
    # halving-doubling, ring and direct on fully connected dims do not contend: both models
    # agree on the all-reduce; the direct all-reduce on a switch is incast-bound
    hd = ar.time_ns.sel(switch="halvingDoubling")
    np.testing.assert_allclose(hd.sel(model="flow"), hd.sel(model="analytical"), rtol=1e-9,
                               equal_nan=True)
    direct = ar.time_ns.sel(switch="direct", shape="1D", split="even")
    assert np.all(direct.sel(model="flow") > direct.sel(model="analytical"))
    ranks = results["rankings"]
    assert ranks.sizes["case"] == 2 * 2 + 2 + 2
    tau = ranks.kendall_tau.values
    assert np.all(np.isfinite(tau)) and np.all(np.abs(tau) <= 1)
    # a ranking the flow model reorders has tau < 1; the all-reduce cases include direct on
    # a switch, which the flow model slows down by far the most
    assert np.all((ranks.pairs_reordered.values == 0) | (tau < 1))
    assert "tau" in topo.summary(results)


# ------------------------------------------------------------------------------ study 3
scale = _load("llm_scale")

TINY_SCALE = scale.Grid(
    gpus=(16, 32), tp=4, pps=(2,), cps=(1, 2), layers=6,
    workload={"generator": "huggingface", "sequence": 256, "global_batch": 8,
              "sp": True, "distributed_optimizer": True, "pipeline_layout": "first_last_fewer",
              "config": {"model_type": "llama", "num_hidden_layers": 6, "hidden_size": 256,
                         "num_attention_heads": 8, "intermediate_size": 512,
                         "vocab_size": 1000}})


def test_scale_layouts_keep_megatron_s_interleaving_rule():
    rows = scale.layouts(TINY_SCALE)
    assert {(r["gpus"], r["cp"]) for r in rows} == {(16, 1), (16, 2), (32, 1), (32, 2)}
    for r in rows:
        assert 4 * r["pp"] * r["cp"] * r["dp"] == r["gpus"]
        assert r["micro_batches"] % r["pp"] == 0 and r["micro_batches"] >= r["pp"]
    full = scale.layouts()
    assert max(r["gpus"] for r in full) == 131072 and all(
        r["micro_batches"] <= 128 for r in full)
    spec = load_spec(scale.scale_sweep(TINY_SCALE).spec)
    assert spec.shape == (4,)


def test_scale_study_core_on_a_tiny_model(tmp_path):
    pytest.importorskip("matplotlib")
    results = scale.run_study(tmp_path, TINY_SCALE, jobs=1, progress=False)
    assert (tmp_path / "llm_scale_layouts.nc").is_file()
    assert (tmp_path / "llm_scale.png").stat().st_size > 5000
    layouts, best = results["layouts"], results["best"]
    assert (layouts.error == "").all()
    for gpus in (16, 32):
        here = layouts.time_ns.where(layouts.gpus == gpus)
        row = best.sel(gpus=gpus)
        assert float(row.time_s) * 1e9 == pytest.approx(float(here.min()))
        assert float(row.time_s) == pytest.approx(
            float(row.compute_s + row.exposed_s + row.waiting_s))
        assert 0 < float(row.mfu) < 1
        # the flow model's step, congestion-aware, is no shorter than the analytical one's
        assert float(row.flow_time_s) >= float(row.time_s) * (1 - 1e-9)
    assert "fastest layout per cluster size" in scale.summary(results)
