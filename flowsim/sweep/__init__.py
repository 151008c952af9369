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

import numpy as np
import xarray as xr

from .._io import parse_data
from ..errors import ConfigError, ConfigTypeError, FlowsimError, config_error, public_api
from ..results.io import output_format, write_dataset
from .execute import CHECKPOINT_SECONDS, SweepInterrupted, compute
from .parts import (
    parts_folder,
    read_shard,
    run_with_parts,
    shard_headers,
    shard_name,
)
from .run import grid_dataset, parse_shard, part_dataset, shard_indices
from .spec import Axis, SweepSpec, load_spec

__all__ = ["SweepInterrupted", "SweepSpec", "load_spec", "merge", "sweep"]


def _with_spec(ds: xr.Dataset, spec: SweepSpec) -> xr.Dataset:
    ds.attrs["spec"] = spec.text
    ds.attrs["spec_json"] = json.dumps(
        {"base": spec.base, "axes": [[a.name, list(a.keys), [list(v) for v in a.values]]
                                     for a in spec.axes], "source": spec.source,
         **({"configs": spec.configs} if spec.configs else {})},
        default=str)
    return ds


def _spec_from_attrs(attrs: Mapping[str, Any], where: str) -> SweepSpec:
    try:
        data = parse_data(attrs["spec_json"], source=where, json_syntax=True)
        axes = tuple(Axis(name, tuple(keys), tuple(tuple(v) for v in values))
                     for name, keys, values in data["axes"])
        return SweepSpec(base=data["base"], axes=axes, source=data["source"],
                         text=attrs.get("spec", ""), configs=data.get("configs", {}))
    except (KeyError, ValueError, TypeError):
        raise ConfigError(f"{where}: not a flowsim sweep shard (no readable spec)") from None


@public_api
def sweep(spec: str | os.PathLike | Mapping[str, Any] | SweepSpec, output: Any = None, *,
          jobs: int | None = None, client: Any = None, shard: str | tuple | None = None,
          progress: bool = False, max_work: float | None = None,
          checkpoint_seconds: float = CHECKPOINT_SECONDS) -> xr.Dataset:
    """Run a sweep and return its Dataset (one dimension per axis).

    Parameters
    ----------
    spec : path, mapping or SweepSpec
    output : path, optional
        Result file; the format follows the extension (``.nc``, ``.zarr``, ``.csv``,
        ``.json``, see :mod:`flowsim.results.io`) and is checked before anything runs.
        Finished points are kept in ``<output>.parts/`` while the sweep runs (every
        ``checkpoint_seconds``), so an interrupted or killed sweep resumes where it stopped.
        With ``shard``, the folder that receives the shard file.
    jobs : int, optional
        Processes (default: all cores; 1 runs in this process).
    client : dask.distributed.Client, optional
        Run the points on this Dask cluster instead of local processes.
    shard : "I/N" or (I, N), optional
        Run only shard I of N (every N-th point). Default: from ``SLURM_ARRAY_TASK_ID`` /
        ``SLURM_ARRAY_TASK_COUNT`` (or ``PBS_ARRAY_INDEX`` and ``FLOWSIM_SHARDS``) when set.
    progress : bool
        Show a progress bar with an ETA.
    max_work : float, optional
        Work budget of each point (see :mod:`flowsim.system.budget`); a point over it is an
        error entry.
    checkpoint_seconds : float
        Seconds between two part files.

    Raises
    ------
    SweepInterrupted
        On Ctrl-C, after saving the finished points (run the same call again to resume).
    """
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    jobs = _jobs(jobs)
    if isinstance(shard, tuple):
        shard = f"{shard[0]}/{shard[1]}"
    shard_t = parse_shard(shard)
    options = {"jobs": jobs, "client": client, "progress": progress, "max_work": max_work,
               "every": _seconds(checkpoint_seconds)}
    if shard_t is not None:
        return _run_shard(spec, output, shard_t, options)
    if output is None:
        return _with_spec(grid_dataset(spec, compute(spec, list(range(spec.size)),
                                                     **options)), spec)
    output_format(output, option="output")
    output = Path(output)
    parts = parts_folder(output)
    results = run_with_parts(spec, list(range(spec.size)), parts, **options)
    ds = _with_spec(grid_dataset(spec, results), spec)
    write_dataset(ds, output, option="output")
    shutil.rmtree(parts, ignore_errors=True)
    return ds


def _jobs(jobs: Any) -> int:
    if jobs is None:
        return os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer)) or jobs < 1:
        raise config_error("argument", "jobs", "an integer >= 1", jobs,
                           cls=ConfigTypeError if not isinstance(jobs, (int, np.integer))
                           else ConfigError)
    return int(jobs)


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 <= value <= 86400:
        raise config_error("argument", "checkpoint_seconds", "seconds from 0 to 86400", value)
    return float(value)


def _run_shard(spec: SweepSpec, output: Any, shard: tuple[int, int],
               options: dict[str, Any]) -> xr.Dataset:
    """One shard of an array job: skipped when its file is there, resumable while it runs."""
    if output is None:
        raise ConfigError("argument 'output': a shard needs the folder to write it to")
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"argument output: {folder} exists and is not a folder")
    path = folder / shard_name(*shard)
    if path.exists():
        try:
            results = read_shard(path, spec, shard)
        except ConfigError:
            raise
        except FlowsimError as exc:
            raise FlowsimError(f"{exc}; delete it to run the shard again") from None
        return _with_spec(part_dataset(spec, results, shard), spec)
    parts = folder / f".{path.name}.parts"
    results = run_with_parts(spec, shard_indices(spec.size, *shard), parts, **options)
    ds = _with_spec(part_dataset(spec, results, shard), spec)
    folder.mkdir(parents=True, exist_ok=True)
    write_dataset(ds, path)
    shutil.rmtree(parts, ignore_errors=True)
    return ds


@public_api
def merge(folder: str | os.PathLike, output: str | os.PathLike | None = None) -> xr.Dataset:
    """Assemble the shard files of ``folder`` into the sweep's Dataset.

    Every shard's checksum is checked; files in ``folder`` not named as shards are ignored.

    Raises
    ------
    FlowsimError
        When shards of different sweeps are mixed, some shards are missing (they are listed
        by index), or one is empty, corrupt or unreadable (it is named).
    """
    if output is not None:
        output_format(output, option="output")
    if not isinstance(folder, (str, os.PathLike)):
        raise config_error("argument", "folder", "a folder path", folder, cls=ConfigTypeError)
    folder = Path(folder)
    headers = shard_headers(folder)
    specs = {attrs["spec_digest"]: (path, attrs) for path, attrs in headers}
    if len(specs) > 1:
        names = ", ".join(f"{p.name} ({d})" for d, (p, _) in specs.items())
        raise FlowsimError(f"{folder}: shards of different sweeps: {names}")
    counts = {int(attrs["shards"]) for _, attrs in headers}
    if len(counts) > 1:
        raise FlowsimError(f"{folder}: shards split into different counts {sorted(counts)}")
    total = counts.pop()
    seen = {int(attrs["shard"]) for _, attrs in headers}
    missing = sorted(set(range(total)) - seen)
    if missing:
        raise FlowsimError(f"{folder}: {len(missing)} of {total} shards missing: indices "
                           f"{missing[:50]}" + (" ..." if len(missing) > 50 else ""))
    first, attrs = headers[0]
    spec = _spec_from_attrs(attrs, str(first))
    results: dict = {}
    for path, attrs in headers:
        shard = (int(attrs["shard"]), total)
        if path.name != shard_name(*shard):
            raise FlowsimError(f"{path}: holds shard {shard[0]} of {total} (renamed?)")
        results.update(read_shard(path, spec, shard))
    ds = _with_spec(grid_dataset(spec, results), spec)
    if output is not None:
        write_dataset(ds, output, option="output")
    return ds
