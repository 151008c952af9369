"""Datasets of sweeps: flat per-point records (parts and shards) and the merged grid."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._version import __version__
from ..errors import FlowsimError
from .units import set_axis_units, set_units

if TYPE_CHECKING:
    import xarray as xr

#: per point: (output values in the order of the output names, error message or "")
PointResults = Mapping[int, tuple[tuple, str]]
#: The attribute of a part or shard file holding the checksum of its points.
CHECKSUM_ATTR = "points_sha256"


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
    ds = xr.Dataset(data, coords={"point": index}, attrs=attrs)
    ds.attrs[CHECKSUM_ATTR] = points_checksum(ds, names)
    return set_units(ds)


def points_checksum(ds: xr.Dataset, names: Sequence[str]) -> str:
    """SHA-256 of what a part or shard file says: the sweep's digest, the point indices, the
    outputs (their float64 bytes) and the error messages, so that one flipped bit anywhere
    in them is caught when the file is read back."""
    sha = hashlib.sha256(str(ds.attrs.get("spec_digest", "")).encode())
    sha.update(np.ascontiguousarray(ds["point"].values, dtype="<i8").tobytes())
    for name in names:
        sha.update(name.encode() + b"\0")
        sha.update(np.ascontiguousarray(ds[name].values, dtype="<f8").tobytes())
    for text in ds["error"].values.tolist():
        encoded = str(text).encode("utf-8", "surrogatepass")
        sha.update(len(encoded).to_bytes(8, "little") + encoded)
    return sha.hexdigest()


def read_points(ds: xr.Dataset, names: Sequence[str], where: str) -> dict[int, tuple[tuple, str]]:
    """The points of a part or shard Dataset after checking its checksum.

    Raises
    ------
    FlowsimError
        The file is not a points file of these outputs, or its content does not match its
        checksum (a corrupted or edited file).
    """
    missing = [n for n in ("point", "error", *names) if n not in ds.variables]
    if missing or ds["point"].ndim != 1 or CHECKSUM_ATTR not in ds.attrs:
        lacks = ", ".join(missing) if missing else "a checksum"
        raise FlowsimError(f"{where}: not a flowsim sweep part or shard (no {lacks})")
    if points_checksum(ds, names) != ds.attrs[CHECKSUM_ATTR]:
        raise FlowsimError(f"{where}: checksum mismatch, the file is corrupt (its points "
                           f"differ from what was written)")
    values = np.stack([ds[n].values.astype(np.float64) for n in names], axis=1) \
        if names else np.zeros((ds.sizes["point"], 0))
    errors = ds["error"].values.tolist()
    return {int(i): (tuple(float(v) for v in values[k]), str(errors[k]))
            for k, i in enumerate(ds["point"].values.tolist())}


def sweep_grid_dataset(axes: Sequence[tuple[str, Sequence[tuple[str, str, Sequence[Any]]]]],
                       shape: tuple[int, ...], outputs: Mapping[str, str],
                       results: PointResults, attrs: Mapping[str, Any]) -> xr.Dataset:
    """The grid of a sweep: one variable per output (with its units), one dimension per axis.

    Parameters
    ----------
    axes : sequence of (axis name, [(coordinate name, config key, values), ...])
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
    coords, keys = {}, {}
    for axis_name, columns in axes:
        for coord_name, key, column in columns:
            keys[coord_name] = key
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in column):
                values = np.array(column)
            else:
                values = np.array([v if isinstance(v, str) else json.dumps(v)
                                   for v in column], dtype=str)
            coords[coord_name] = (axis_name, values)
    ds = xr.Dataset(data, coords=coords, attrs={
        **attrs, "flowsim_version": __version__,
        "points_failed": int(np.count_nonzero(errors != ""))})
    set_units(ds)
    for coord_name, key in keys.items():
        set_axis_units(ds, coord_name, key)
    return ds
