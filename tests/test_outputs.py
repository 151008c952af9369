"""Result files: the format follows the extension (.nc NetCDF4, .zarr, .csv, .json), anything
else is refused before any work, sizes from 2 GiB to 64 GiB round-trip exactly, old NetCDF3
files still read; every variable and coordinate has units and a long name; Perfetto traces
have integer pids and tids with name metadata, and a workload trace holds every NPU.

Tests marked "issue 15" failed on the main branch before this change (noted per test).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import flowsim
from flowsim.cli import main
from flowsim.results.io import open_result, write_dataset
from flowsim.sweep import sweep

REPO = Path(__file__).resolve().parent.parent
GiB = 1 << 30


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ formats and sizes
def test_an_8_gib_collective_writes_netcdf4_that_plain_xarray_opens(capsys, tmp_path):
    """issue 15: '--size 2GiB -o x.nc' failed ('could not safely cast int64 to int32')."""
    code, _, err = run(capsys, "collective", "--size", "8GiB", "-o", tmp_path / "x.nc")
    assert code == 0, err
    with xr.open_dataset(tmp_path / "x.nc") as ds:   # no engine named: plain xarray
        assert ds.attrs["size_bytes"] == 8 * GiB
        assert ds.link_bytes.dtype == np.float64 and float(ds.time_ns) > 0
    assert (tmp_path / "x.nc").read_bytes()[:4] == b"\x89HDF"


@pytest.mark.parametrize("suffix", [".nc", ".zarr", ".csv", ".json"])
def test_a_sweep_over_sizes_up_to_64_gib_round_trips_exactly(tmp_path, suffix):
    """issue 15: a sweep whose size axis holds 4 GiB computed every point, then crashed
    writing the merged file."""
    if suffix == ".zarr":
        pytest.importorskip("zarr")
    sizes = ["2GiB", "4GiB", "16GiB", "64GiB"]
    spec = {"base": {"network": "ring8", "size": "1MiB"}, "axes": {"size": sizes}}
    out = tmp_path / f"r{suffix}"
    ds = sweep(spec, out, jobs=1)
    assert ds["size"].values.tolist() == [2 * GiB, 4 * GiB, 16 * GiB, 64 * GiB]
    if suffix == ".csv":
        import pandas as pd
        table = pd.read_csv(out)
        assert table["size"].tolist() == ds["size"].values.tolist()
        np.testing.assert_array_equal(table["time_ns"].to_numpy(), ds.time_ns.values)
        return
    back = open_result(out)
    assert back["size"].dtype == np.int64
    xr.testing.assert_identical(back.drop_attrs(), ds.drop_attrs())


@pytest.mark.parametrize("suffix", [".nc", ".zarr", ".json"])
def test_workload_datasets_round_trip_identically(tmp_path, suffix):
    if suffix == ".zarr":
        pytest.importorskip("zarr")
    ds = flowsim.simulate("ring8", "microbench_allreduce")
    write_dataset(ds, tmp_path / f"w{suffix}")
    xr.testing.assert_identical(open_result(tmp_path / f"w{suffix}"), ds)


def test_a_long_csv_for_datasets_of_mixed_dimensions(tmp_path):
    ds = flowsim.simulate_collective("ring8", "all_reduce", "1MiB")
    write_dataset(ds, tmp_path / "c.csv")
    lines = (tmp_path / "c.csv").read_text().splitlines()
    assert lines[0] == "variable,npu,link,dim,value"
    assert lines[1] == f"time_ns,,,,{float(ds.time_ns)!r}"
    assert sum(line.startswith("link_bytes,") for line in lines) == ds.sizes["link"]


def test_zarr_stores_are_consolidated(tmp_path):
    pytest.importorskip("zarr")
    write_dataset(flowsim.simulate_collective("ring8", "all_reduce", "1MiB"), tmp_path / "c.zarr")
    assert (tmp_path / "c.zarr" / ".zmetadata").is_file()


def test_old_netcdf3_results_still_read(tmp_path):
    ds = flowsim.simulate_collective("ring8", "all_reduce", "1MiB")
    ds.to_netcdf(tmp_path / "old.nc", engine="scipy")   # what flowsim wrote before
    assert (tmp_path / "old.nc").read_bytes()[:3] == b"CDF"
    assert float(open_result(tmp_path / "old.nc").time_ns) == float(ds.time_ns)


@pytest.mark.parametrize("argv, message", [
    (["collective", "-o", "{tmp}/out.txt"], r"cannot tell the format of out\.txt"),
    (["collective", "-o", "{tmp}/out"], r"cannot tell the format of out"),
    (["collective", "--trace", "{tmp}/t.nc"], r"t\.nc: expected a name ending in \.json"),
    (["run", "-o", "{tmp}/out.h5"], r"out\.h5"),
    (["collective", "-o", "{tmp}/newdir/"], r"names a folder|does not exist"),
    (["collective", "-o", "{tmp}/missing/x.nc"], r"folder .*missing does not exist"),
])
def test_bad_output_targets_are_refused_before_any_work(capsys, tmp_path, monkeypatch, argv,
                                                        message):
    """issue 15: '-o out.zarr' / '-o out.csv' silently wrote NetCDF, and 'collective -o DIR/'
    wrote a file named DIR into DIR's parent."""
    import flowsim.system as system

    def forbidden(*args, **kwargs):
        raise AssertionError("simulated before checking the output")

    for name in ("simulate_collective", "simulate", "run_collective", "run_training"):
        monkeypatch.setattr(system, name, forbidden)
    code, _, err = run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert code == 2 and re.search(message, err), err
    assert err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # nothing written anywhere


def test_a_sweep_refuses_an_unknown_output_format_before_computing(tmp_path, monkeypatch):
    from flowsim.errors import ConfigError
    from flowsim.sweep import run as sweep_run

    monkeypatch.setattr(sweep_run, "evaluate_point", lambda *a: pytest.fail("computed"))
    with pytest.raises(ConfigError, match="cannot tell the format"):
        sweep({"base": {"network": "ring8", "size": "1MiB"}, "axes": {"size": ["1MiB"]}},
              tmp_path / "r.xlsx", jobs=1)
    with pytest.raises(ConfigError, match="cannot tell the format"):
        flowsim.merge(tmp_path, tmp_path / "merged.bin")


def test_scripts_do_not_write_into_docs_by_default():
    """issue 15: scripts overwrote tracked files under docs/ by default."""
    sources = [p for p in (REPO / "scripts").rglob("*.py")]
    offenders = [str(p.relative_to(REPO)) for p in sources
                 if re.search(r"default=\"docs/", p.read_text())]
    assert not offenders, offenders


# ------------------------------------------------------------------ conventions
@pytest.mark.parametrize("make", [
    lambda: flowsim.simulate_collective("r4_fc8_sw4", "all_reduce", "1MiB",
                                        "ring_4chunks_3d"),
    lambda: flowsim.simulate("ring8", "microbench_allreduce"),
    lambda: sweep({"base": {"network": "ring8", "size": "1MiB"},
                   "axes": {"size": ["1MiB", "2MiB"], "network.bandwidth[0]": [25, 50],
                            "model": ["analytical", "flow"]}}, jobs=1),
])
def test_every_variable_and_coordinate_has_units_and_a_long_name(make):
    """issue 16 item 5: coordinates carried no units / long_name, Datasets no Conventions."""
    ds = make()
    assert ds.attrs["Conventions"].startswith("CF-")
    for name, var in ds.variables.items():
        assert var.attrs.get("long_name"), name
        if var.dtype.kind in "iuf":
            assert var.attrs.get("units"), name
    if "network_bandwidth_0" in ds.coords:
        assert ds["network_bandwidth_0"].attrs["units"] == "GiB/s"
        assert ds["size"].attrs["units"] == "bytes"


# ------------------------------------------------------------------ traces
def _check_trace(trace: dict) -> tuple[list[dict], list[dict]]:
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in slices)
    named = {e["pid"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name"}
    assert {e["pid"] for e in slices} <= named
    assert {(e["pid"], e["tid"]) for e in slices} <= threads
    return slices, meta


def test_collective_traces_have_integer_ids_and_names(capsys, tmp_path):
    """issue 16 item 5: pids were strings, tracks had no names."""
    trace = tmp_path / "t.json"
    code, _, err = run(capsys, "collective", "--size", "1MiB", "--model", "flow",
                       "--trace", trace)
    assert code == 0, err
    slices, meta = _check_trace(json.loads(trace.read_text()))
    names = {e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert names == {"dim 0", "NPUs", "links"}


def test_a_workload_trace_covers_every_npu(capsys, tmp_path):
    """issue 15: 'flowsim run --trace' held NPU 0 only."""
    trace = tmp_path / "t.json"
    code, _, err = run(capsys, "run", "--workload", "microbench_allreduce", "--trace", trace)
    assert code == 0, err
    data = json.loads(trace.read_text())
    slices, meta = _check_trace(data)
    assert {e["pid"] for e in slices} == set(range(8))
    assert data["otherData"] == {"npus": 8, "npus_shown": 8}
    assert {e["args"]["name"] for e in meta if e["name"] == "thread_name"} >= {"compute"}


def test_a_workload_trace_is_bounded(monkeypatch):
    from flowsim.results import trace as trace_module

    monkeypatch.setattr(trace_module, "MAX_WORKLOAD_EVENTS", 20)
    work = flowsim.load_workload("microbench_allreduce", flowsim.load_network("ring8"))
    timeline = [{"program": 0, "npus": np.arange(8), "op": work.programs[0].ops[0],
                 "start": np.zeros(8), "end": np.ones(8)} for _ in range(5)]
    out = trace_module.workload_trace(timeline, work)
    slices = [e for e in out["traceEvents"] if e["ph"] == "X"]
    assert len(slices) <= 20 and out["otherData"] == {"npus": 8, "npus_shown": 4}
    assert {e["pid"] for e in slices} == {0, 1, 2, 3}
