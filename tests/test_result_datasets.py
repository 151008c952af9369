"""Datasets built on xarray's fast path (:mod:`flowsim.results.build`): identical to what
``xarray.Dataset`` builds from the same values, and a simulation that returns one does not
import ``dask.array`` (xarray's check for dask arrays costs ~0.3 s of a process where dask is
installed)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from conftest import loaded_after
from flowsim.results.build import numpy_dataset


def _values():
    data_vars = {"time_ns": ((), 3.5), "finish_ns": (("npu",), np.array([1.0, 2.5, 3.5])),
                 "layer_ns": (("layer", "pass"), np.arange(6, dtype=float).reshape(2, 3)),
                 "when": (("npu",), np.array(["a", "bc", "d"], dtype=object))}
    coords = {"npu": np.arange(3), "layer": np.array(["l0", "l1"], dtype=str),
              "pass": np.array(["fwd", "ig", "wg"]), "layer_npus": (("layer",), [3, 3]),
              "topology": ((), "Ring")}
    return data_vars, coords, {"model": "analytical", "npus": 3}


def test_same_dataset_as_xarray_builds():
    data_vars, coords, attrs = _values()
    fast = numpy_dataset(data_vars, coords, attrs)
    slow = xr.Dataset(data_vars, coords, attrs)
    xr.testing.assert_identical(fast, slow)
    for name in slow.variables:
        assert fast[name].dtype == slow[name].dtype, name
    assert set(fast.indexes) == set(slow.indexes) == {"npu", "layer", "pass"}
    for name in slow.indexes:
        assert fast.indexes[name].equals(slow.indexes[name])


def test_a_simulation_does_not_import_dask_array():
    # where dask is not installed this holds trivially; the dev install (CI) has it
    code = ("import warnings\nimport flowsim\nwarnings.simplefilter('ignore')\n"
            "net = flowsim.load_network('ring8')\n"
            "ds = flowsim.simulate(net, {'generator': 'transformer', 'layers': 2, "
            "'hidden': 256, 'ffn': 1024, 'heads': 8, 'vocab': 1000, 'sequence': 128, "
            "'global_batch': 8, 'micro_batch': 1, 'tp': 8, 'pp': 1, 'dp': 1}, 'nccl')\n"
            "c = flowsim.run_collective(net, 'all_reduce', 1 << 20).to_dataset()\n"
            "assert float(ds.time_ns) > 0 and float(c.time_ns) > 0")
    assert loaded_after(code, ("dask.array",)) == set()
