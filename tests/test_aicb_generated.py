"""Workloads aicb's own generator wrote (``tests/data/aicb/README.md`` says how): a
mixture-of-experts run and a pipelined one run through the command line on 32 NPUs, and
read as what aicb says they are."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

import flowsim
from flowsim.cli import main
from flowsim.workload.load import load_workload

DATA = Path(__file__).parent / "data" / "aicb"
NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 4], "bandwidth": [200, 50],
       "latency": [500, 2000]}


@pytest.mark.parametrize("name", ["moe_tp2_ep16_32gpu.txt", "dense_tp4_pp2_32gpu.txt"])
@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_runs_to_a_finite_time(name, model, tmp_path, capsys):
    network = tmp_path / "net.yml"
    network.write_text(json.dumps(NET))
    code = main(["run", "--workload", str(DATA / name), "--network", str(network),
                 "--model", model, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert all(line.startswith("flowsim: warning: ") for line in err.splitlines()), err
    time_ns = json.loads(out)["time_ns"]
    assert math.isfinite(time_ns) and time_ns > 0


def test_the_experts_all_to_alls_run_on_their_expert_parallel_groups():
    """aicb's ``ALLTOALL_EP`` is an all-to-all among the 16 ranks of an expert-parallel
    group (``ep: 16`` in the header), not among all 32."""
    net = flowsim.load_network(NET)
    work = load_workload(str(DATA / "moe_tp2_ep16_32gpu.txt"), net, 1)
    ops = [op for p in work.programs for op in p.ops if op.kind == "collective"]
    assert Counter(op.collective for op in ops)["all_to_all"] > 0
    sizes = work.network.npus_count   # the logical network the workload runs on
    assert sizes[0] == 2              # tensor parallelism innermost
    ranks = {math.prod(sizes[d] for d in op.dims) for op in ops
             if op.collective == "all_to_all"}
    assert ranks == {16}


def test_a_pipeline_activation_size_written_as_a_float_is_read(tmp_path):
    net = flowsim.load_network(NET)
    with pytest.warns(flowsim.FlowsimWarning, match="key 'pp' = 2 is not modelled"):
        work = load_workload(str(DATA / "dense_tp4_pp2_32gpu.txt"), net, 1)
    assert work.programs
    half = tmp_path / "half.txt"   # a fraction of a byte is still refused
    half.write_text((DATA / "dense_tp4_pp2_32gpu.txt").read_text().replace(
        "8388608.0", "8388608.5", 1))
    with pytest.raises(flowsim.ConfigError, match=r"pp_comm must be a non-negative integer, "
                                                  r"found '8388608\.5'"):
        load_workload(str(half), net, 1)
