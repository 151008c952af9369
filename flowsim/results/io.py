"""Writing Datasets to files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr


def write_dataset(ds: xr.Dataset, path: str | os.PathLike) -> None:
    """Write a Dataset atomically (temporary file, then rename): NetCDF via scipy."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    clean = ds.copy()
    clean.attrs = {k: v for k, v in ds.attrs.items() if not k.startswith("_")}
    try:
        clean.to_netcdf(tmp, engine="scipy")
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
