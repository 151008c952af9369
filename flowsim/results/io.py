"""Writing Datasets to files."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._io import atomic_output

if TYPE_CHECKING:
    import xarray as xr


def write_dataset(ds: xr.Dataset, path: str | os.PathLike) -> None:
    """Write a Dataset atomically (a temporary file in the target's folder, then a rename):
    NetCDF via scipy."""
    clean = ds.copy()
    clean.attrs = {k: v for k, v in ds.attrs.items() if not k.startswith("_")}
    with atomic_output(path) as tmp:
        clean.to_netcdf(tmp, engine="scipy")
