"""Datasets of sweeps: flat per-point records (parts and shards) and the merged grid."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._version import __version__

if TYPE_CHECKING:
    import xarray as xr

#: per point: (output values in the order of the output names, error message or "")
PointResults = Mapping[int, tuple[tuple, str]]


def sweep_points_dataset(names: Sequence[str], results: PointResults, digest: str,
                         shard: tuple[int, int] | None = None) -> xr.Dataset:
    """Flat Dataset of some points (dimension ``point``), as stored in part / shard files."""
    import xarray as xr

    index = np.array(sorted(results), dtype=np.int64)
    data = {name: ("point", np.array([results[i][0][k] for i in index], dtype=np.float64))
            for k, name in enumerate(names)}
    data["error"] = ("point", np.array([results[i][1] for i in index], dtype=str))
    attrs: dict[str, Any] = {"spec_digest": digest, "flowsim_version": __version__}
    if shard is not None:
        attrs.update({"shard": shard[0], "shards": shard[1]})
    return xr.Dataset(data, coords={"point": index}, attrs=attrs)


def sweep_grid_dataset(axes: Sequence[tuple[str, Sequence[tuple[str, Sequence[Any]]]]],
                       shape: tuple[int, ...], outputs: Mapping[str, str],
                       results: PointResults, attrs: Mapping[str, Any]) -> xr.Dataset:
    """The grid of a sweep: one variable per output (with its units), one dimension per axis.

    Parameters
    ----------
    axes : sequence of (axis name, [(coordinate name, values), ...])
        Each axis and the coordinates along it (a zipped axis has several); numbers become
        numeric coordinates, anything else text (non-strings as JSON).
    shape : tuple of int
        Points per axis; results are indexed in C order over it.
    outputs : mapping of output name to units
    results : mapping of point index to (outputs, error)
    attrs : mapping
        Attributes of the Dataset (the version is added).
    """
    import xarray as xr

    size = int(np.prod(shape))
    names = [name for name, _ in axes]
    data: dict[str, tuple] = {}
    for k, (name, units) in enumerate(outputs.items()):
        values = np.array([results[i][0][k] for i in range(size)], dtype=np.float64)
        data[name] = (names, values.reshape(shape), {"units": units})
    errors = np.array([results[i][1] for i in range(size)], dtype=str)
    data["error"] = (names, errors.reshape(shape))
    coords = {}
    for axis_name, columns in axes:
        for coord_name, column in columns:
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in column):
                values = np.array(column)
            else:
                values = np.array([v if isinstance(v, str) else json.dumps(v)
                                   for v in column], dtype=str)
            coords[coord_name] = (axis_name, values)
    return xr.Dataset(data, coords=coords, attrs={
        **attrs, "flowsim_version": __version__,
        "points_failed": int(np.count_nonzero(errors != ""))})
