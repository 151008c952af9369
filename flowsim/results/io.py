"""Result files: the format follows the extension, every write is atomic, and every target is
checked before anything is computed for it.

=========  ==================================================================================
``.nc``    NetCDF4 (HDF5) through h5netcdf: 64-bit integers (sizes of 2 GiB and more stay
           exact), zlib-compressed, chunked numeric variables. The default.
``.zarr``  a consolidated Zarr store (format 2: text variables stay portable); needs ``zarr``.
``.csv``   one table: a wide one (a column per coordinate and variable) when every variable
           has the same dimensions, as in a sweep; else a long one (``variable``, a column per
           dimension, ``value``). Units and attributes stay in the ``.nc`` / ``.zarr`` forms.
``.json``  ``xarray.Dataset.to_dict`` as JSON (NaN written as ``null``).
=========  ==================================================================================

:func:`open_result` reads every format flowsim writes back, and old NetCDF3 files (written by
flowsim before NetCDF4, through scipy).
"""

from __future__ import annotations

import csv
import gc
import io
import json
import math
import os
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import atomic_output, check_target, json_text, write_text_atomic
from ..errors import ConfigError, FlowsimError

if TYPE_CHECKING:
    import xarray as xr

#: The formats of a Dataset file, by extension.
DATASET_FORMATS = {".nc": "NetCDF4", ".zarr": "Zarr", ".csv": "CSV", ".json": "JSON"}
#: zlib level of NetCDF4 variables (4: most of the gain of 9 at a fraction of its time).
COMPRESSION_LEVEL = 4


def output_format(path: Any, *, option: str | None = None,
                  formats: dict[str, str] | None = None) -> str:
    """Check an output target before any work and return its extension (``".nc"``, ...).

    The folder must exist, the name must not end with a path separator (``-o DIR/`` names a
    folder, not a file), and the extension must be one of ``formats`` (default
    :data:`DATASET_FORMATS`); a ``.zarr`` target needs the ``zarr`` package.

    Raises
    ------
    ConfigError
        Naming ``option`` (the command-line option or argument that gave the path).
    """
    formats = DATASET_FORMATS if formats is None else formats
    where = f"argument {option}: " if option else ""
    suffix = Path(path).suffix.lower() if isinstance(path, (str, os.PathLike)) else ""
    directory = suffix == ".zarr"
    target = check_target(path, option=option, directory=directory)
    text = os.fspath(path)
    if not directory and text.endswith((os.sep, os.altsep or os.sep)):
        raise ConfigError(f"{where}{text} names a folder, expected a file name")
    if suffix not in formats:
        raise ConfigError(f"{where}cannot tell the format of {target.name}: expected a name "
                          f"ending in " + ", ".join(f"{e} ({n})" for e, n in formats.items()))
    if directory:
        try:
            import zarr  # noqa: F401
        except ImportError:
            raise ConfigError(f"{where}writing {target.name} needs the zarr package: pip "
                              f"install 'flowsim[zarr]'") from None
    return suffix


def write_dataset(ds: xr.Dataset, path: str | os.PathLike, *, option: str | None = None
                  ) -> None:
    """Write a Dataset atomically in the format its extension names (see the module).

    Attributes whose names start with ``_`` are private to flowsim and not written.
    """
    suffix = output_format(path, option=option)
    clean = ds.copy()
    clean.attrs = {k: _attr(v) for k, v in ds.attrs.items() if not k.startswith("_")}
    if suffix == ".csv":
        write_text_atomic(path, dataset_csv(clean), option=option)
    elif suffix == ".json":
        write_text_atomic(path, dataset_json(clean), option=option)
    elif suffix == ".zarr":
        with atomic_output(path, option=option, directory=True) as tmp:
            clean.to_zarr(tmp, mode="w", consolidated=True, zarr_format=2)
    else:
        with atomic_output(path, option=option) as tmp:
            clean.to_netcdf(tmp, engine="h5netcdf", encoding=_netcdf4_encoding(clean))


def open_result(path: str | os.PathLike) -> xr.Dataset:
    """Read a result file flowsim wrote (``.nc`` as NetCDF4 or NetCDF3, ``.zarr``, ``.json``)
    into memory.

    Raises
    ------
    FlowsimError
        The file is missing, empty, truncated or not a Dataset of that format.
    """
    file = Path(path)
    hook = sys.unraisablehook
    # h5netcdf's half-built File objects complain from __del__ about a damaged file: the
    # error below says it once, on one line
    sys.unraisablehook = lambda unraisable: None
    try:
        return _open(file)
    except FileNotFoundError:
        error = FlowsimError(f"{file}: no such file")
    except Exception as exc:  # noqa: BLE001 - every reader's failure reads the same way
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        error = FlowsimError(f"{file}: not a readable result file ({reason})")
    finally:
        gc.collect()
        sys.unraisablehook = hook
    raise error


def _open(file: Path) -> xr.Dataset:
    import xarray as xr

    if file.suffix.lower() == ".zarr":
        with xr.open_zarr(file, consolidated=True) as ds:
            return ds.load()
    if file.suffix.lower() == ".json":
        return xr.Dataset.from_dict(json.loads(file.read_text(encoding="utf-8")))
    with open(file, "rb") as handle:
        magic = handle.read(4)
    engine = "scipy" if magic[:3] == b"CDF" else "h5netcdf"
    with xr.open_dataset(file, engine=engine) as ds:
        return ds.load()


# ------------------------------------------------------------------------------ formats
def _netcdf4_encoding(ds: xr.Dataset) -> dict[Hashable, dict[str, Any]]:
    """zlib and chunking for numeric arrays (HDF5 filters do not apply to text)."""
    encoding: dict[Hashable, dict[str, Any]] = {}
    for name, var in ds.variables.items():
        if var.ndim and var.size > 1 and var.dtype.kind in "iufb":
            encoding[name] = {"zlib": True, "complevel": COMPRESSION_LEVEL, "shuffle": True}
    return encoding


def _attr(value: Any) -> Any:
    """An attribute NetCDF4 can hold: booleans as 0/1, ``None`` as empty text."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    return "" if value is None else value


def dataset_json(ds: xr.Dataset) -> str:
    """The Dataset as JSON text (``to_dict``; NaN and infinities as ``null``)."""
    return json_text(ds.to_dict(data="list", encoding=False))



def dataset_csv(ds: xr.Dataset) -> str:
    """The Dataset as one CSV table (see the module docstring): floats in their shortest
    exact form, integers whole."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = list(ds.data_vars)
    shapes = {ds[n].dims for n in names}
    if len(shapes) == 1 and next(iter(shapes)):
        frame = ds.to_dataframe().reset_index()
        return frame.to_csv(index=False, lineterminator="\n")
    if len(shapes) == 1:   # scalars only: one row
        writer.writerow(names)
        writer.writerow([_cell(ds[n].values[()]) for n in names])
        return buffer.getvalue()
    dims = list(ds.dims)
    writer.writerow(["variable", *dims, "value"])
    for name in names:
        var = ds[name]
        labels = [ds[d].values if d in ds.coords else np.arange(ds.sizes[d]) for d in var.dims]
        for index in np.ndindex(var.shape):
            where = dict(zip(var.dims, (labels[k][i] for k, i in enumerate(index))))
            writer.writerow([name, *[_cell(where[d]) if d in where else "" for d in dims],
                             _cell(var.values[index])])
    return buffer.getvalue()


def _cell(value: Any) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if value != value else
                                                         ("inf" if value > 0 else "-inf"))
    return str(value)
