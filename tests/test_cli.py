"""The command line: defaults, JSON output, files written, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import xarray as xr

from flowsim.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_collective_runs_on_bundled_configs(capsys):
    code, out, err = run(capsys, "collective")
    assert code == 0, err
    assert "all-reduce of 64 MiB on 8 NPUs" in out and "time:" in out


def test_json_output(capsys):
    code, out, _ = run(capsys, "collective", "--network", "r4_fc8_sw4", "--system",
                       "ring_4chunks_3d", "--collective", "all-to-all", "--size", "1MiB",
                       "--model", "flow", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["model"] == "flow" and result["npus"] == 128
    assert result["time_ns"] > 0 and result["collective"] == "all_to_all"


def test_output_and_trace_files(capsys, tmp_path):
    nc, trace = tmp_path / "out.nc", tmp_path / "trace.json"
    code, out, err = run(capsys, "collective", "--size", "1MiB", "--model", "flow",
                         "-o", str(nc), "--trace", str(trace))
    assert code == 0, err
    ds = xr.open_dataset(nc)
    assert float(ds.time_ns) > 0 and ds.sizes["npu"] == 8
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names >= {"dim 0", "NPUs", "links"}
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")


@pytest.mark.parametrize("argv,message", [
    (["collective", "--network", "no/such.yml"], "network config not found"),
    (["collective", "--size", "-3"], "'size'"),
    (["collective", "--collective", "allgatherish"], "'collective'"),
    (["collective", "--dims", "x"], "--dims"),
    (["collective", "--collective", "send-recv"], "send_recv needs both"),
])
def test_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_system_file_names_file_and_key(capsys, tmp_path):
    bad = tmp_path / "sys.json"
    bad.write_text('{"preferred-dataset-splits": 0}')
    code, _, err = run(capsys, "collective", "--system", str(bad))
    assert code == 2 and "sys.json" in err and "preferred-dataset-splits" in err


def test_console_script_help_and_version():
    for flag in ("--help", "--version"):
        done = subprocess.run([sys.executable, "-m", "flowsim.cli", flag],
                              capture_output=True, text=True)
        assert done.returncode == 0 and "flowsim" in done.stdout
