"""Sweeps: grid expansion, identical results however they run, shards, merge, resume, Dask,
and every bad spec."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import flowsim
from flowsim.errors import ConfigError, FlowsimError
from flowsim.sweep import SweepInterrupted, load_spec, merge, sweep
from flowsim.sweep import run as sweep_run
from flowsim.sweep.run import parse_shard

SPEC = {
    "base": {"network": {"topology": ["Ring", "Switch"], "npus_count": [4, 4],
                         "bandwidth": [100, 25], "latency": [200, 1000]},
             "system": {"preferred-dataset-splits": 2,
                        "all-reduce-implementation": ["ring", "ring"],
                        "all-to-all-implementation": ["direct", "direct"]},
             "collective": "all_reduce", "size": "1MiB"},
    "axes": {"network.bandwidth[1]": [25, 50], "size": ["1MiB", "4MiB"],
             "model": ["analytical", "flow"]},
    "zip": {"kind": {"collective": ["all_reduce", "all_to_all"],
                     "system.endpoint-delay": [10, 20]}},
}


def test_grid_shape_coords_and_values():
    ds = sweep(SPEC, jobs=1)
    assert dict(ds.sizes) == {"network_bandwidth_1": 2, "size": 2, "model": 2, "kind": 2}
    assert ds["size"].values.tolist() == [1 << 20, 4 << 20]  # sizes as bytes
    assert ds["kind__collective"].values.tolist() == ["all_reduce", "all_to_all"]
    assert (ds.error == "").all()
    # one point, computed directly
    direct = flowsim.simulate_collective(
        {**SPEC["base"]["network"], "bandwidth": [100, 50]}, "all_to_all", "4MiB",
        {**SPEC["base"]["system"], "endpoint-delay": 20}, model="flow")
    point = ds.time_ns.sel(network_bandwidth_1=50, size=4 << 20, model="flow").isel(kind=1)
    assert float(point) == float(direct.time_ns)
    assert "spec" in ds.attrs and ds.time_ns.attrs["units"] == "ns"


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_points_are_the_numbers_of_the_simulate_datasets(model):
    """A point is evaluated from its run's record (no Dataset): every output is, bit for bit,
    what the Dataset of :func:`flowsim.simulate_collective` or :func:`flowsim.simulate`
    reduces to."""
    base = SPEC["base"]
    point = {**base, "model": model, "collective": "all_to_all", "dims": None}
    got, error = sweep_run.evaluate_point(point)
    ds = flowsim.simulate_collective(base["network"], "all_to_all", "1MiB", base["system"],
                                     model=model)
    assert error == ""
    assert got == (float(ds.time_ns), float(ds.link_bytes.sum()),
                   float(ds.link_utilization.max()), float(ds.attrs["stats_flows"]))
    point = {"network": "gpt_1024", "workload": "gpt3_3d", "system": "nccl", "model": model,
             "iterations": 1}
    got, error = sweep_run.evaluate_point(point)
    ds = flowsim.simulate("gpt_1024", "gpt3_3d", "nccl", model=model)
    assert error == ""
    assert got == tuple(float(ds[name].mean()) if name != "time_ns" else float(ds.time_ns)
                        for name in sweep_run.WORKLOAD_OUTPUTS)


def test_processes_shards_and_merge_are_bit_identical(tmp_path):
    serial = sweep(SPEC, jobs=1)
    parallel = sweep(SPEC, jobs=2)
    xr.testing.assert_identical(serial.drop_attrs(), parallel.drop_attrs())
    for i in range(3):
        sweep(SPEC, tmp_path / "shards", shard=f"{i}/3", jobs=1)
    merged = merge(tmp_path / "shards", tmp_path / "merged.nc")
    xr.testing.assert_identical(serial.drop_attrs(), merged.drop_attrs())
    on_disk = xr.open_dataset(tmp_path / "merged.nc").load()
    np.testing.assert_array_equal(on_disk.time_ns.values, serial.time_ns.values)


def test_rerunning_a_shard_skips_it(tmp_path, monkeypatch):
    sweep(SPEC, tmp_path, shard="0/2", jobs=1)
    monkeypatch.setattr(sweep_run, "evaluate_point", _forbidden)
    again = sweep(SPEC, tmp_path, shard="0/2", jobs=1)
    assert again.sizes["point"] == 8


def _forbidden(point, *rest):
    raise AssertionError("a finished point was computed again")


def test_merge_reports_missing_and_foreign_shards(tmp_path):
    sweep(SPEC, tmp_path / "a", shard="0/3", jobs=1)
    sweep(SPEC, tmp_path / "a", shard="2/3", jobs=1)
    with pytest.raises(FlowsimError, match=r"1 of 3 shards missing: indices \[1\]"):
        merge(tmp_path / "a")
    other = {**SPEC, "axes": {**SPEC["axes"], "size": ["2MiB", "4MiB"]}}
    sweep(other, tmp_path / "b", shard="0/3", jobs=1)
    (tmp_path / "b" / "shard-00000-of-00003.nc").rename(tmp_path / "a" /
                                                       "shard-00001-of-00003.nc")
    with pytest.raises(FlowsimError, match="shards of different sweeps"):
        merge(tmp_path / "a")
    (tmp_path / "a" / "shard-00001-of-00003.nc").write_bytes(b"not netcdf")
    with pytest.raises(FlowsimError, match="corrupt or unreadable shard"):
        merge(tmp_path / "a")


def test_a_shard_of_another_sweep_is_never_overwritten(tmp_path):
    sweep(SPEC, tmp_path, shard="0/2", jobs=1)
    before = (tmp_path / "shard-00000-of-00002.nc").read_bytes()
    other = {**SPEC, "axes": {**SPEC["axes"], "size": ["2MiB", "4MiB"]}}
    with pytest.raises(ConfigError, match="belongs to another sweep"):
        sweep(other, tmp_path, shard="0/2", jobs=1)
    assert (tmp_path / "shard-00000-of-00002.nc").read_bytes() == before


def test_interrupted_sweep_keeps_finished_points_and_resumes(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = sweep_run.evaluate_point

    def flaky(point, *rest):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(point, *rest)

    monkeypatch.setattr(sweep_run, "evaluate_point", flaky)
    out = tmp_path / "result.nc"
    with pytest.raises(SweepInterrupted) as stop:
        sweep(SPEC, out, jobs=1)
    assert len(stop.value.results) == 4
    assert not out.exists() and (tmp_path / "result.nc.parts").is_dir()
    calls["n"] = -1000  # no more interruptions
    ds = sweep(SPEC, out, jobs=1)
    assert calls["n"] == -1000 + 16 - 4  # only the unfinished points ran
    xr.testing.assert_identical(ds.drop_attrs(), sweep(SPEC, jobs=1).drop_attrs())
    assert out.exists() and not (tmp_path / "result.nc.parts").exists()


def test_dask_local_cluster_gives_identical_results():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        on_dask = sweep(SPEC, client=client)
    xr.testing.assert_identical(on_dask.drop_attrs(), sweep(SPEC, jobs=1).drop_attrs())


def test_slurm_and_pbs_array_variables(monkeypatch):
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    assert parse_shard(None) == (1, 3)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "9")
    with pytest.raises(ConfigError, match="out of range"):
        parse_shard(None)
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(name)
    assert parse_shard(None) is None
    monkeypatch.setenv("PBS_ARRAY_INDEX", "2")
    with pytest.raises(ConfigError, match="FLOWSIM_SHARDS"):
        parse_shard(None)
    monkeypatch.setenv("FLOWSIM_SHARDS", "4")
    assert parse_shard(None) == (2, 4)


def test_invalid_points_are_recorded_not_fatal():
    spec = {**SPEC, "axes": {"system.all-reduce-implementation": [
        ["ring", "ring"], ["halvingDoubling", "halvingDoubling"], ["ring", "direct"]]},
        "zip": {}}
    spec["base"] = {**SPEC["base"], "network": {**SPEC["base"]["network"],
                                                "npus_count": [3, 4]}}
    ds = sweep(spec, jobs=1)
    assert np.isnan(ds.time_ns.values[1]) and "power-of-two" in str(ds.error.values[1])
    assert np.isfinite(ds.time_ns.values[[0, 2]]).all()
    assert ds.attrs["points_failed"] == 1


@pytest.mark.parametrize("change,match", [
    ({"axes": {"network.colour": [1]}}, "unknown network key 'colour'"),
    ({"axes": {"network.bandwidth[5]": [1]}}, r"index 5 is past the end"),
    ({"axes": {"size": []}}, "at least one value"),
    ({"axes": {"size": "1MiB"}}, "expected a list"),
    ({"axes": {"flavour": [1]}}, "key 'flavour'"),
    ({"zip": {"g": {"size": ["1MiB"], "model": ["flow", "analytical"]}}}, "unequal length"),
    ({"extra": 1}, "unknown key 'extra'"),
    ({"base": {"collective": "all_reduce"}}, "missing key 'base.network'"),
    ({"base": {**SPEC["base"], "colour": 1}}, "base.colour"),
])
def test_bad_specs(change, match):
    with pytest.raises(ConfigError, match=match):
        load_spec({**SPEC, **change})


def test_bad_shard_arguments(tmp_path):
    for text in ("3/3", "-1/2", "x", "1/0"):
        with pytest.raises(ConfigError, match="shard"):
            sweep(SPEC, tmp_path, shard=text)


def test_spec_file_paths_are_relative_to_the_spec(tmp_path):
    (tmp_path / "net.yml").write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50]\n"
                                      "latency: [500]\n")
    (tmp_path / "spec.yml").write_text("base:\n  network: net.yml\n  size: 1MiB\n"
                                       "axes:\n  network.latency[0]: [100, 500]\n")
    ds = sweep(tmp_path / "spec.yml", jobs=1)
    assert ds.time_ns.values[0] < ds.time_ns.values[1]
    (tmp_path / "bad.yml").write_text("base: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yml: YAML syntax error"):
        load_spec(tmp_path / "bad.yml")


def test_cli_sweep_and_merge(tmp_path, capsys):
    import yaml

    from flowsim.cli import main

    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(SPEC))
    assert main(["sweep", str(spec), "-o", str(tmp_path / "all.nc"), "--jobs", "1",
                 "--no-progress"]) == 0
    for i in range(2):
        assert main(["sweep", str(spec), "-o", str(tmp_path / "sh"), "--shard", f"{i}/2",
                     "--jobs", "1", "--no-progress"]) == 0
    assert main(["merge", str(tmp_path / "sh"), "-o", str(tmp_path / "merged.nc")]) == 0
    a = xr.open_dataset(tmp_path / "all.nc").load()
    b = xr.open_dataset(tmp_path / "merged.nc").load()
    np.testing.assert_array_equal(a.time_ns.values, b.time_ns.values)
    assert main(["merge", str(tmp_path / "nothing"), "-o", str(tmp_path / "x.nc")]) == 2
    assert "no shard files" in capsys.readouterr().err


def test_zarr_output_when_the_path_says_so(tmp_path):
    pytest.importorskip("zarr")
    ds = sweep(SPEC, tmp_path / "result.zarr", jobs=1)
    back = xr.open_zarr(tmp_path / "result.zarr", consolidated=False).load()
    np.testing.assert_array_equal(back.time_ns.values, ds.time_ns.values)


def test_plot_script_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    import importlib.util

    from conftest import REPO

    sweep(SPEC, tmp_path / "r.nc", jobs=1)
    spec = importlib.util.spec_from_file_location("plot_sweep", REPO / "scripts" /
                                                  "plot_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    png = tmp_path / "r.png"
    assert module.main([str(tmp_path / "r.nc"), "--x", "network_bandwidth_1", "--hue", "size",
                        "--select", "model=flow", "--select", "kind=0",
                        "-o", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_bad_sizes_and_keys_fail_before_anything_runs():
    with pytest.raises(ConfigError, match="axes.size"):
        load_spec({**SPEC, "axes": {"size": ["1XB", "1MiB"]}})
    with pytest.raises(ConfigError, match="axis 1"):
        load_spec({**SPEC, "axes": {1: [1, 2]}})


# ------------------------------------------------------------------ sweeps of training runs
WORKLOAD_SPEC = {
    "base": {"network": {"topology": ["Switch"], "npus_count": [8], "bandwidth": [50],
                         "latency": [500]},
             "system": {"preferred-dataset-splits": 2, "all-reduce-implementation": ["ring"],
                        "all-to-all-implementation": ["direct"]},
             "workload": {"generator": "dlrm", "batch_per_npu": 64, "bottom_mlp": [256, 64],
                          "top_mlp": [256, 1]},
             "iterations": 2},
    "axes": {"workload.batch_per_npu": [32, 128], "model": ["analytical", "flow"],
             "system.endpoint-delay": [10, 10000]},
}


def test_workload_sweep_runs_flowsim_simulate_per_point():
    ds = sweep(WORKLOAD_SPEC, jobs=1)
    assert dict(ds.sizes) == {"workload_batch_per_npu": 2, "model": 2,
                              "system_endpoint_delay": 2}
    assert set(ds.data_vars) == {"time_ns", "compute_ns", "exposed_comm_ns",
                                 "blocked_comm_ns", "error"}
    assert (ds.error == "").all() and ds.compute_ns.attrs["units"] == "ns"
    base = WORKLOAD_SPEC["base"]
    # every point equals a direct flowsim.simulate call with that point's settings
    for batch in ds.workload_batch_per_npu.values:
        for model in ds.model.values:
            for delay in ds.system_endpoint_delay.values:
                direct = flowsim.simulate(
                    base["network"], {**base["workload"], "batch_per_npu": int(batch)},
                    {**base["system"], "endpoint-delay": float(delay)}, model=str(model),
                    iterations=2)
                point = ds.sel(workload_batch_per_npu=batch, model=model,
                               system_endpoint_delay=delay)
                assert float(point.time_ns) == float(direct.time_ns)
                assert float(point.compute_ns) == float(direct.compute_ns.mean())
                assert float(point.exposed_comm_ns) == float(direct.exposed_comm_ns.mean())
                assert float(point.blocked_comm_ns) == float(direct.blocked_comm_ns.mean())
    # the model axis matters on this platform (links are shared)
    assert (ds.time_ns.sel(model="flow") != ds.time_ns.sel(model="analytical")).any()
    # more samples per NPU: more compute; a larger hand-off delay: more exposed communication
    assert (ds.compute_ns.sel(workload_batch_per_npu=128) >
            ds.compute_ns.sel(workload_batch_per_npu=32)).all()
    assert (ds.exposed_comm_ns.sel(system_endpoint_delay=10000) >
            ds.exposed_comm_ns.sel(system_endpoint_delay=10)).all()


def test_workload_sweep_serial_processes_and_resume_are_identical(tmp_path, monkeypatch):
    serial = sweep(WORKLOAD_SPEC, jobs=1)
    xr.testing.assert_identical(serial.drop_attrs(), sweep(WORKLOAD_SPEC, jobs=2).drop_attrs())
    for i in range(2):
        sweep(WORKLOAD_SPEC, tmp_path / "shards", shard=f"{i}/2", jobs=1)
    merged = merge(tmp_path / "shards")
    xr.testing.assert_identical(serial.drop_attrs(), merged.drop_attrs())


def test_workload_from_a_generator_file_and_a_bundled_name(tmp_path):
    (tmp_path / "w.yml").write_text("generator: dlrm\nbatch_per_npu: 16\n"
                                    "bottom_mlp: [128, 64]\ntop_mlp: [128, 1]\n")
    spec = {"base": {**WORKLOAD_SPEC["base"], "workload": str(tmp_path / "w.yml")},
            "axes": {"workload.bottom_mlp[0]": [128, 512]}}
    ds = sweep(spec, jobs=1)
    assert (ds.error == "").all()
    assert ds.compute_ns.values[1] > ds.compute_ns.values[0]
    bundled = load_spec({"base": {**WORKLOAD_SPEC["base"], "workload": "dlrm_128"}})
    assert bundled.base["workload"]["generator"] == "dlrm"
    # a workload that is not a generator spec runs from its path
    text = load_spec({"base": {**WORKLOAD_SPEC["base"], "workload": "microbench_allreduce"}})
    assert text.base["workload"].endswith("microbench_allreduce.txt")


def test_workload_points_that_do_not_fit_the_network_are_recorded():
    spec = {"base": {**WORKLOAD_SPEC["base"], "workload": {
        "generator": "transformer", "layers": 2, "hidden": 256, "heads": 8, "sequence": 128,
        "micro_batch": 1, "micro_batches": 2, "tp": 8}},
        "axes": {"workload.tp": [8, 4]}}
    ds = sweep(spec, jobs=1)
    assert ds.error.values[0] == "" and "tp * cp * dp * pp" in str(ds.error.values[1])
    assert np.isnan(ds.time_ns.values[1])


@pytest.mark.parametrize("change,match", [
    ({"axes": {"workload.batch_size": [1, 2]}}, "workload: unknown key 'batch_size'"),
    ({"axes": {"workload.batch_per_npu": [0]}}, "key 'batch_per_npu': expected an integer"),
    ({"axes": {"workload.generator": ["gpt"]}}, "key 'workload.generator'"),
    ({"axes": {"size": ["1MiB"]}}, "key 'size': expected one of network, system, workload"),
    ({"base": {**WORKLOAD_SPEC["base"], "collective": "all_reduce"}},
     "base.collective': unknown with a workload"),
    ({"base": {**WORKLOAD_SPEC["base"], "workload": 3}}, "key 'base.workload'"),
    ({"base": {**WORKLOAD_SPEC["base"], "workload": "microbench_allreduce"},
      "axes": {"workload.layers": [1]}}, "only for a generator spec"),
])
def test_bad_workload_specs(change, match):
    with pytest.raises(ConfigError, match=match):
        load_spec({**WORKLOAD_SPEC, **change})


def test_workload_keys_are_refused_in_a_collective_sweep():
    with pytest.raises(ConfigError, match="key 'workload.batch_per_npu'"):
        load_spec({**SPEC, "axes": {"workload.batch_per_npu": [1]}})
