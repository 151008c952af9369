"""Sweeps: grids of collectives or training runs over configurations, run locally, as array
jobs or on Dask.

``flowsim.sweep(spec, output=...)`` and ``flowsim.merge(folder, output=...)``; the spec
format is in :mod:`flowsim.sweep.spec`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import xarray as xr

from .._io import atomic_output, parse_data
from ..errors import ConfigError, FlowsimError
from .run import (
    SweepInterrupted,
    compute,
    grid_dataset,
    parse_shard,
    part_dataset,
    read_parts,
    shard_indices,
    write_part,
)
from .spec import Axis, SweepSpec, load_spec

__all__ = ["SweepInterrupted", "SweepSpec", "load_spec", "merge", "sweep"]


def _parts_folder(output: Path) -> Path:
    return output.with_name(output.name + ".parts")


def _shard_name(shard: int, shards: int) -> str:
    return f"shard-{shard:05d}-of-{shards:05d}.nc"


def _with_spec(ds: xr.Dataset, spec: SweepSpec) -> xr.Dataset:
    ds.attrs["spec"] = spec.text
    ds.attrs["spec_json"] = json.dumps(
        {"base": spec.base, "axes": [[a.name, list(a.keys), [list(v) for v in a.values]]
                                     for a in spec.axes], "source": spec.source},
        default=str)
    return ds


def _spec_from_attrs(attrs: Mapping[str, Any], where: str) -> SweepSpec:
    try:
        data = parse_data(attrs["spec_json"], source=where, json_syntax=True)
        axes = tuple(Axis(name, tuple(keys), tuple(tuple(v) for v in values))
                     for name, keys, values in data["axes"])
        return SweepSpec(base=data["base"], axes=axes, source=data["source"],
                         text=attrs.get("spec", ""))
    except (KeyError, ValueError, TypeError):
        raise ConfigError(f"{where}: not a flowsim sweep shard (no readable spec)") from None


def write_result(ds: xr.Dataset, output: Path) -> None:
    """Write a sweep result atomically: NetCDF (scipy backend) or zarr for ``*.zarr``."""
    if output.suffix == ".zarr":
        with atomic_output(output, directory=True) as tmp:
            ds.to_zarr(tmp, mode="w", consolidated=False, zarr_format=2)  # portable strings
    else:
        from ..results import write_dataset
        write_dataset(ds, output)


def sweep(spec: str | os.PathLike | Mapping[str, Any] | SweepSpec, output: Any = None, *,
          jobs: int | None = None, client: Any = None, shard: str | tuple | None = None,
          progress: bool = False) -> xr.Dataset:
    """Run a sweep and return its Dataset (one dimension per axis).

    Parameters
    ----------
    spec : path, mapping or SweepSpec
    output : path, optional
        Result file (``.nc``; ``.zarr`` with zarr installed). Finished points are kept in
        ``<output>.parts/`` while the sweep runs, so an interrupted sweep resumes where it
        stopped. With ``shard``, the folder that receives the shard file.
    jobs : int, optional
        Processes (default: all cores; 1 runs in this process).
    client : dask.distributed.Client, optional
        Run the points on this Dask cluster instead of local processes.
    shard : "I/N" or (I, N), optional
        Run only shard I of N (every N-th point). Default: from ``SLURM_ARRAY_TASK_ID`` /
        ``SLURM_ARRAY_TASK_COUNT`` (or ``PBS_ARRAY_INDEX`` and ``FLOWSIM_SHARDS``) when set.
    progress : bool
        Show a progress bar with an ETA.
    """
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    jobs = os.cpu_count() or 1 if jobs is None else int(jobs)
    if jobs < 1:
        raise ConfigError(f"argument 'jobs': expected an integer >= 1, found {jobs}")
    if isinstance(shard, tuple):
        shard = f"{shard[0]}/{shard[1]}"
    shard_t = parse_shard(shard)
    if shard_t is not None:
        if output is None:
            raise ConfigError("argument 'output': a shard needs the folder to write it to")
        folder = Path(output)
        path = folder / _shard_name(*shard_t)
        if path.exists():
            with xr.open_dataset(path, engine="scipy") as written:
                if written.attrs.get("spec_digest") == spec.digest:
                    return written.load()
            raise ConfigError(f"{path}: belongs to another sweep (spec changed?); "
                              f"remove it or write the shards to another folder")
        results = compute(spec, shard_indices(spec.size, *shard_t), jobs=jobs, client=client,
                          progress=progress)
        ds = _with_spec(part_dataset(spec, results, shard_t), spec)
        write_part(folder, path.name, ds)
        return ds
    if output is None:
        return _with_spec(grid_dataset(spec, compute(spec, list(range(spec.size)), jobs=jobs,
                                                     client=client, progress=progress)), spec)
    output = Path(output)
    parts = _parts_folder(output)
    results = read_parts(parts, spec) if parts.is_dir() else {}
    todo = [i for i in range(spec.size) if i not in results]
    # checkpoint in slices so that a crash loses at most one slice of work
    step = max(64, len(todo) // 20, 16 * jobs)
    for start in range(0, len(todo), step):
        piece = todo[start: start + step]
        try:
            done = compute(spec, piece, jobs=jobs, client=client, progress=progress)
        except SweepInterrupted as stop:
            if stop.results:
                write_part(parts, f"part-{spec.digest}-{piece[0]:09d}-partial.nc",
                           part_dataset(spec, stop.results))
            raise SweepInterrupted(stop.results) from None
        write_part(parts, f"part-{spec.digest}-{piece[0]:09d}.nc", part_dataset(spec, done))
        results.update(done)
    ds = _with_spec(grid_dataset(spec, results), spec)
    write_result(ds, output)
    shutil.rmtree(parts, ignore_errors=True)
    return ds


def merge(folder: str | os.PathLike, output: str | os.PathLike | None = None) -> xr.Dataset:
    """Assemble the shard files of ``folder`` into the sweep's Dataset.

    Raises
    ------
    FlowsimError
        When shards of different sweeps are mixed, or some shards are missing (they are
        listed by index).
    """
    folder = Path(folder)
    files = sorted(folder.glob("shard-*-of-*.nc"))
    if not files:
        raise ConfigError(f"{folder}: no shard files (shard-IIIII-of-NNNNN.nc) found")
    specs, counts, seen = {}, set(), set()
    results: dict = {}
    for path in files:
        try:
            with xr.open_dataset(path, engine="scipy") as ds:
                attrs = dict(ds.attrs)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported the same
            raise FlowsimError(f"{path}: corrupt or unreadable shard ({exc})") from None
        if "spec_digest" not in attrs or "shards" not in attrs:
            raise FlowsimError(f"{path}: not a flowsim sweep shard")
        specs[attrs["spec_digest"]] = (path, attrs)
        counts.add(int(attrs["shards"]))
        seen.add(int(attrs["shard"]))
    if len(specs) > 1:
        names = ", ".join(f"{p.name} ({d})" for d, (p, _) in specs.items())
        raise FlowsimError(f"{folder}: shards of different sweeps: {names}")
    if len(counts) > 1:
        raise FlowsimError(f"{folder}: shards split into different counts {sorted(counts)}")
    total = counts.pop()
    missing = sorted(set(range(total)) - seen)
    if missing:
        raise FlowsimError(f"{folder}: {len(missing)} of {total} shards missing: indices "
                           f"{missing[:50]}" + (" ..." if len(missing) > 50 else ""))
    digest, (first, attrs) = next(iter(specs.items()))
    spec = _spec_from_attrs(attrs, str(first))
    results = read_parts(folder, spec)
    ds = _with_spec(grid_dataset(spec, results), spec)
    if output is not None:
        write_result(ds, Path(output))
    return ds
