"""Sweeps that never lose work: checksums on parts and shards checked at merge and resume,
stray and broken files handled with a clear message, parts saved by time, a point's internal
error kept as an error entry, and real processes killed (SIGKILL) or interrupted (SIGINT to
the process group) at random moments resuming to exactly the uninterrupted result.

Tests marked "issue 15" failed on the main branch before this change.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

from flowsim.errors import FlowsimError, FlowsimWarning
from flowsim.sweep import SweepInterrupted, merge, sweep
from flowsim.sweep import run as sweep_run

REPO = Path(__file__).resolve().parent.parent
SPEC = {"base": {"network": {"topology": ["Ring", "Switch"], "npus_count": [4, 4],
                             "bandwidth": [100, 25], "latency": [200, 1000]},
                 "system": {"preferred-dataset-splits": 2},
                 "collective": "all_reduce", "size": "1MiB"},
        "axes": {"size": ["1MiB", "2MiB", "4MiB"], "model": ["analytical", "flow"]}}


def _shards(folder: Path, n: int = 2) -> xr.Dataset:
    for i in range(n):
        sweep(SPEC, folder, shard=f"{i}/{n}", jobs=1)
    return sweep(SPEC, jobs=1)


def _flip_time_bit(path: Path, position: int = 0, bit: int = 3) -> None:
    """Flip one bit of one ``time_ns`` value inside a NetCDF4 file (a silent corruption that
    leaves the file readable)."""
    import h5py

    with h5py.File(path, "r+") as f:
        values = f["time_ns"][...]
        raw = values.view(np.uint64)
        raw[position] ^= np.uint64(1 << bit)
        f["time_ns"][...] = raw.view(np.float64)


def test_a_flipped_bit_in_a_shard_time_is_detected_at_merge(tmp_path):
    """issue 15: one flipped bit in a shard's time_ns was merged silently."""
    _shards(tmp_path)
    _flip_time_bit(tmp_path / "shard-00001-of-00002.nc")
    with pytest.raises(FlowsimError, match=r"shard-00001-of-00002\.nc: checksum mismatch"):
        merge(tmp_path)


def test_random_byte_flips_in_a_shard_never_merge_a_wrong_result(tmp_path):
    expected = _shards(tmp_path)
    path = tmp_path / "shard-00000-of-00002.nc"
    original = path.read_bytes()
    rng = random.Random(15)
    for position in rng.sample(range(len(original)), 24):
        data = bytearray(original)
        data[position] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        try:
            merged = merge(tmp_path)
        except FlowsimError:
            continue   # detected, named
        xr.testing.assert_identical(merged.drop_attrs(), expected.drop_attrs())


def test_a_stray_merged_file_in_the_shard_folder_is_ignored(tmp_path):
    """issue 15: an earlier merged .nc in the shard folder raised AttributeError."""
    expected = _shards(tmp_path)
    merge(tmp_path, tmp_path / "merged.nc")
    (tmp_path / "notes.nc").write_bytes(b"")
    xr.testing.assert_identical(merge(tmp_path).drop_attrs(), expected.drop_attrs())


@pytest.mark.parametrize("content, match", [(b"", "corrupt or unreadable shard"),
                                            (b"CDF\x01garbage", "corrupt or unreadable"),
                                            (b"\x89HDF\r\n\x1a\n", "corrupt or unreadable")])
def test_an_empty_or_truncated_shard_is_named(tmp_path, content, match):
    """issue 15: an empty shard raised 'cannot mmap an empty file'."""
    _shards(tmp_path)
    (tmp_path / "shard-00001-of-00002.nc").write_bytes(content)
    with pytest.raises(FlowsimError, match=match) as info:
        merge(tmp_path)
    assert "shard-00001-of-00002.nc" in str(info.value) and "\n" not in str(info.value)


def test_a_renamed_shard_is_refused(tmp_path):
    _shards(tmp_path, 3)
    a, b = tmp_path / "shard-00000-of-00003.nc", tmp_path / "shard-00001-of-00003.nc"
    a.rename(tmp_path / "x")
    b.rename(a)
    (tmp_path / "x").rename(b)
    with pytest.raises(FlowsimError, match="renamed"):
        merge(tmp_path)


def test_a_corrupt_or_empty_part_is_set_aside_on_resume(tmp_path, monkeypatch):
    """issue 15: a corrupt part raised IndexError on resume."""
    out = tmp_path / "r.nc"
    calls = {"n": 0}
    real = sweep_run.evaluate_point

    def stop_after_three(point, *rest):
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return real(point, *rest)

    monkeypatch.setattr(sweep_run, "evaluate_point", stop_after_three)
    with pytest.raises(SweepInterrupted):
        sweep(SPEC, out, jobs=1, checkpoint_seconds=0)
    parts = sorted((tmp_path / "r.nc.parts").glob("part-*.nc"))
    assert len(parts) == 3   # checkpoint_seconds=0: every point saved as it finished
    parts[0].write_bytes(b"")
    _flip_time_bit(parts[1])
    monkeypatch.setattr(sweep_run, "evaluate_point", real)
    with pytest.warns(FlowsimWarning, match="its points run again"):
        ds = sweep(SPEC, out, jobs=1)
    xr.testing.assert_identical(ds.drop_attrs(), sweep(SPEC, jobs=1).drop_attrs())


def test_parts_are_saved_by_time_not_by_count(tmp_path, monkeypatch):
    """issue 15: parts were saved every >= 64 points, so a kill lost up to a slice of work."""
    saved = []
    from flowsim.sweep import parts as parts_module

    real = parts_module.write_part
    monkeypatch.setattr(parts_module, "write_part",
                        lambda folder, spec, results: saved.append(len(results)) or
                        real(folder, spec, results))
    clock = iter(range(0, 10_000, 3))   # every point "takes" 3 s
    from flowsim.sweep import execute as execute_module

    monkeypatch.setattr(execute_module, "_clock", lambda: next(clock))
    sweep(SPEC, tmp_path / "r.nc", jobs=1, checkpoint_seconds=5)
    assert sum(saved) == 6 and max(saved) <= 2


def test_a_point_raising_a_non_flowsim_error_becomes_an_error_entry(monkeypatch):
    """issue 15: a point raising something other than a FlowsimError killed the sweep."""
    import flowsim.system as system

    real = system.run_collective

    def buggy(network, collective, size, *args, **kwargs):
        if size == "2MiB":
            raise ZeroDivisionError("a bug")
        return real(network, collective, size, *args, **kwargs)

    monkeypatch.setattr(system, "run_collective", buggy)
    ds = sweep(SPEC, jobs=1)
    errors = ds.error.sel(size=2 << 20).values.tolist()
    assert errors == ["internal error (ZeroDivisionError): a bug"] * 2
    assert np.isfinite(ds.time_ns.sel(size=1 << 20)).all()


# ------------------------------------------------------------------ real processes
KILL_SPEC = {"base": {"network": {"topology": ["Ring", "Switch"], "npus_count": [8, 8],
                                  "bandwidth": [100, 25], "latency": [200, 1000]},
                      "system": {"preferred-dataset-splits": 4},
                      "collective": "all_reduce", "size": "1MiB", "model": "flow"},
             # 1,152 points, ~7 ms each: a run must outlast its first checkpoint by seconds
             # (with 288 points the start-up-free workers finished before the first signal)
             "axes": {"size": [f"{k}MiB" for k in range(1, 49)],
                      "network.latency[1]": [250 * k for k in range(1, 25)]}}


def _default_sigint() -> None:
    """In the child: Ctrl-C as in a terminal. A test run started in the background of a
    script has SIGINT ignored, and a child would inherit that and never see the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(spec: Path, out: Path, jobs: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "flowsim.cli", "sweep", str(spec), "-o",
                             str(out), "--jobs", str(jobs), "--no-progress",
                             "--checkpoint", "0.2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_sigint)


@pytest.mark.slow
def test_killing_and_interrupting_a_sweep_at_random_moments_loses_nothing(tmp_path):
    """SIGKILL or Ctrl-C (SIGINT to the whole process group, workers included) at random
    moments, then resume: the merged result equals an uninterrupted run, bit for bit, and an
    interrupt exits 130 with one line and no worker traceback (issue 15: Ctrl-C on
    'sweep --jobs 2' hung once and printed worker tracebacks three times)."""
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(KILL_SPEC, sort_keys=False))
    out = tmp_path / "r.nc"
    rng = random.Random(2024)
    parts = tmp_path / "r.nc.parts"
    stopped = 0
    for attempt in range(8):
        if stopped >= 2:
            break
        before = len(list(parts.glob("part-*.nc"))) if parts.is_dir() else 0
        proc = _start(spec, out, jobs=2)
        deadline = time.monotonic() + 60   # until this run has saved a part: it computes
        while proc.poll() is None and time.monotonic() < deadline and \
                (len(list(parts.glob("part-*.nc"))) if parts.is_dir() else 0) <= before:
            time.sleep(0.02)
        # a random moment of the next checkpoint interval (0.2 s): while points are computed
        # or a part is written, and while the run surely goes on however fast the machine
        time.sleep(rng.uniform(0.0, 0.2))
        how = signal.SIGKILL if attempt % 2 else signal.SIGINT
        try:
            os.killpg(proc.pid, how)
        except ProcessLookupError:
            pass   # it had finished
        _, err = proc.communicate(timeout=60)
        if proc.returncode == 0 or out.exists():
            # finished before the signal (or while the interpreter was exiting): start over
            out.unlink(missing_ok=True)
            shutil.rmtree(parts, ignore_errors=True)
            stopped = 0
            continue
        stopped += 1
        if how == signal.SIGINT:
            assert proc.returncode == 130, err
            assert "Traceback" not in err and err.count("\n") == 1, err
        else:
            assert proc.returncode == -signal.SIGKILL
    assert stopped >= 2
    proc = _start(spec, out, jobs=2)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    resumed = xr.open_dataset(out).load()
    expected = sweep(KILL_SPEC, jobs=1)
    xr.testing.assert_identical(resumed.drop_attrs(), expected.drop_attrs())
    assert not (tmp_path / "r.nc.parts").exists()


def test_slurm_script_quotes_the_output_folder_in_the_merge_job(tmp_path):
    """issue 15: the merge job's --wrap put $OUT inside single quotes (a quote in the path
    broke out of them)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "flowsim"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "sbatch").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (bin_dir / "sbatch").chmod(0o755)
    marker = tmp_path / "pwned"
    out = f"res'; touch {marker}; echo '"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "0",
           "SLURM_ARRAY_JOB_ID": "7"}
    done = subprocess.run(["bash", str(REPO / "scripts" / "slurm_sweep.sh"), "spec.yml", out],
                          env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    wrap = next(line for line in done.stdout.splitlines() if line.startswith("--wrap="))
    subprocess.run(["bash", "-c", wrap[len("--wrap="):]], env=env, cwd=tmp_path)
    assert not marker.exists()
