"""Where a sweep keeps its points: part files while it runs (a killed or interrupted run
resumes from them) and the shard files of array jobs.

Every part and shard is a NetCDF4 file written atomically, holding the SHA-256 of its points
(:func:`flowsim.results.sweep.points_checksum`), checked whenever it is read: a corrupt part
is set aside with a warning and its points run again; a corrupt shard stops the merge with
a message naming it. Only files named as flowsim names them are read (``part-<digest>-*.nc``,
``shard-IIIII-of-NNNNN.nc``): anything else in the folder, such as an earlier merged result,
is left alone.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from ..errors import ConfigError, FlowsimError, FlowsimWarning
from ..results.io import open_result, write_dataset
from ..results.sweep import read_points
from .execute import Results, SweepInterrupted, compute
from .run import outputs, part_dataset, shard_indices
from .spec import SweepSpec


def parts_folder(output: Path) -> Path:
    """The folder of part files of a sweep writing ``output``."""
    return output.with_name(output.name + ".parts")


def shard_name(shard: int, shards: int) -> str:
    return f"shard-{shard:05d}-of-{shards:05d}.nc"


def read_points_file(path: Path, spec: SweepSpec) -> Results:
    """The points of a part or shard file of ``spec``, checksum checked.

    Raises
    ------
    FlowsimError
        Unreadable, empty, of another sweep, or corrupt (naming the file).
    """
    ds = open_result(path)
    if ds.attrs.get("spec_digest") != spec.digest:
        raise ConfigError(f"{path}: belongs to another sweep (spec changed?); remove it or "
                          f"write to another folder")
    return read_points(ds, list(outputs(spec)), str(path))


def read_parts(folder: Path, spec: SweepSpec) -> Results:
    """Points of the part files of ``spec`` in ``folder``; a part that cannot be trusted is
    skipped with a warning (its points run again)."""
    results: Results = {}
    for path in sorted(folder.glob(f"part-{spec.digest}-*.nc")):
        try:
            results.update(read_points_file(path, spec))
        except FlowsimError as exc:
            warnings.warn(f"{exc}; its points run again", FlowsimWarning, stacklevel=2)
    return results


def write_part(folder: Path, spec: SweepSpec, results: Results) -> Path:
    """Save finished points as one part file (named by its first point: the points of two
    parts of one sweep never overlap, so neither do the names)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{spec.digest}-{min(results):09d}.nc"
    write_dataset(part_dataset(spec, results), path)
    return path


def run_with_parts(spec: SweepSpec, indices: list[int], folder: Path, **options) -> Results:
    """Evaluate ``indices``, resuming from and checkpointing into the part files of
    ``folder`` (``options`` go to :func:`~.execute.compute`)."""
    results = read_parts(folder, spec) if folder.is_dir() else {}
    results = {i: results[i] for i in indices if i in results}
    todo = [i for i in indices if i not in results]
    try:
        results.update(compute(spec, todo, checkpoint=lambda fresh: write_part(
            folder, spec, fresh), **options))
    except SweepInterrupted as stop:
        raise SweepInterrupted({**results, **stop.results}) from None
    return results


def read_shard(path: Path, spec: SweepSpec, shard: tuple[int, int]) -> Results:
    """A shard file's points, checked: checksum, and exactly the points of that shard."""
    results = read_points_file(path, spec)
    if sorted(results) != shard_indices(spec.size, *shard):
        raise FlowsimError(f"{path}: holds other points than shard {shard[0]} of {shard[1]} "
                           f"(renamed or edited?)")
    return results


def shard_headers(folder: Path) -> list[tuple[Path, dict]]:
    """The shard files of ``folder`` and their attributes (readable flowsim shards only).

    Raises
    ------
    FlowsimError
        No shard files, or one that is empty, unreadable or not a flowsim shard.
    """
    files = sorted(folder.glob("shard-*-of-*.nc"))
    if not files:
        raise FlowsimError(f"{folder}: no shard files (shard-IIIII-of-NNNNN.nc) found")
    headers = []
    for path in files:
        try:
            attrs = dict(open_result(path).attrs)
        except FlowsimError as exc:
            raise FlowsimError(f"{path}: corrupt or unreadable shard ({exc})") from None
        if not {"spec_digest", "shard", "shards", "spec_json"} <= set(attrs):
            raise FlowsimError(f"{path}: not a flowsim sweep shard")
        headers.append((path, attrs))
    return headers
