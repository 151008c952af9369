"""symbolic_tensor_graph's other options (FSDP, context parallelism, deeper pipelines), as
that tool writes them (``tests/data/stg/README.md`` says how): each trace runs through the
command line on 8-NPU Ring, Switch and FullyConnected networks, to a finite positive time,
the same on a repeat."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from flowsim.cli import main

DATA = Path(__file__).parent / "data" / "stg"
VARIANTS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
TOPOLOGIES = ("Ring", "Switch", "FullyConnected")


def test_the_variants_are_there():
    assert VARIANTS == ["cp2_dp2tp2", "fsdp_dp4tp2", "pp4_dp2"]


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_trace_runs_and_repeats(variant, topology, tmp_path, capsys):
    network = tmp_path / "net.yml"
    network.write_text(f"topology: [{topology}]\nnpus_count: [8]\nbandwidth: [50]\n"
                       "latency: [500]\n")
    args = ["run", "--workload", str(DATA / variant / "workload"), "--network", str(network),
            "--roofline", "312,2039,0.5", "--json"]
    times = []
    for _ in range(2):
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
        assert code == 0, err
        assert all(line.startswith("flowsim: warning: ") for line in err.splitlines()), err
        times.append(json.loads(out)["time_ns"])
    assert math.isfinite(times[0]) and times[0] > 0
    assert times[1] == times[0]
