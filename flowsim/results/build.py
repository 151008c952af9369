"""One Dataset from plain numpy arrays, without the checks xarray runs for foreign arrays.

``xarray.Dataset`` passes every value it is given through ``as_compatible_data``, which asks
whether it is a dask array and, where dask is installed (the ``dask`` extra), imports
``dask.array`` to find out: ~0.3 s of every process that builds a result, for arrays flowsim
made itself with numpy. Variables built on xarray's fast path skip that question (and only
that: dims, dtypes and indexes are as ``xarray.Dataset`` builds them; a test compares the two).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import xarray as xr


def _variable(name: str, value: Any) -> xr.Variable:
    import xarray as xr

    if isinstance(value, tuple):
        dims, data = value
    else:                         # a bare array: a dimension coordinate of that name
        dims, data = (name,), value
    data = np.asarray(data)
    if data.dtype.kind == "O":    # not ours to vouch for: let xarray convert it
        return xr.Variable(dims, data)
    return xr.Variable(dims, data, fastpath=True)


def numpy_dataset(data_vars: Mapping[str, Any], coords: Mapping[str, Any],
                  attrs: Mapping[str, Any]) -> xr.Dataset:
    """``xarray.Dataset(data_vars, coords, attrs)`` for values that are numpy arrays or
    scalars, given as ``(dims, values)`` or, for a dimension coordinate, bare values."""
    import xarray as xr

    return xr.Dataset(data_vars={k: _variable(k, v) for k, v in data_vars.items()},
                      coords={k: _variable(k, v) for k, v in coords.items()},
                      attrs=dict(attrs))
