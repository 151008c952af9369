"""``run_collective`` returns the numbers of ``simulate_collective`` without a Dataset: the
record's Dataset is the same Dataset, and its summary is what ``flowsim collective --json``
prints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import flowsim
from flowsim.cli import main
from flowsim.results import CollectiveRecord

CASES = [("ring8", "all_reduce", "64MiB", None, "analytical"),
         ("r4_fc8_sw4", "all_to_all", "1MiB", "direct_4chunks_3d", "flow"),
         ("dgx_pod_64_leafspine_4to1", "all_gather", "4MiB", None, "flow")]


@pytest.mark.parametrize(("network", "collective", "size", "system", "model"), CASES)
def test_the_records_dataset_is_simulate_collectives(network, collective, size, system,
                                                     model):
    record = flowsim.run_collective(network, collective, size, system, model)
    assert isinstance(record, CollectiveRecord)
    ds = flowsim.simulate_collective(network, collective, size, system, model)
    xr.testing.assert_identical(record.to_dataset(), ds)
    summary = record.summary()
    assert summary["time_ns"] == float(ds.time_ns) > 0
    assert summary["npus"] == ds.sizes["npu"]
    assert summary["algorithm"] == [str(a) for a in ds.algorithm.values]
    np.testing.assert_array_equal(np.array(summary["dim_bytes"], float), ds.dim_bytes.values)
    assert summary["stats"]["flows"] == ds.attrs["stats_flows"]


def test_json_prints_the_records_summary(capsys):
    assert main(["collective", "--json", "--network", "r4_fc8_sw4", "--size", "1MiB",
                 "--collective", "all_to_all", "--model", "flow"]) == 0
    printed = json.loads(capsys.readouterr().out)
    record = flowsim.run_collective("r4_fc8_sw4", "all_to_all", "1MiB", model="flow")
    assert printed == {"network": "r4_fc8_sw4", "system": "default", **record.summary()}


def test_a_fabrics_dimensions_carry_no_bytes_in_json(capsys):
    assert main(["collective", "--json", "--network", "dgx_pod_64_leafspine_4to1",
                 "--size", "1MiB"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["dim_bytes"] == [None] * len(printed["topology"])
