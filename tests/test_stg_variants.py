"""symbolic_tensor_graph's other options (FSDP, context parallelism, deeper pipelines), as
that tool writes them (``tests/data/stg/README.md`` says how): each trace runs through the
command line on 8-NPU Ring, Switch and FullyConnected networks, to a finite positive time,
the same on a repeat."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from flowsim.cli import main

DATA = Path(__file__).parent / "data" / "stg"
VARIANTS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
TOPOLOGIES = ("Ring", "Switch", "FullyConnected")


def test_the_variants_are_there():
    assert VARIANTS == ["cp2_dp2tp2", "cp2_dp2tp2pp2", "dp4tp2", "fsdp_dp4tp2",
                        "gpt_dp2tp2pp2", "mixed_dp4tp2", "notpsp_dp2tp4", "pp4_dp2"]


def _run(variant: str, topology: str, tmp_path, capsys) -> dict:
    """``flowsim run --json`` of a variant on a network of its rank count: its summary."""
    ranks = len(list((DATA / variant).glob("workload.*.et")))
    network = tmp_path / "net.yml"
    network.write_text(f"topology: [{topology}]\nnpus_count: [{ranks}]\nbandwidth: [50]\n"
                       "latency: [500]\n")
    capsys.readouterr()
    code = main(["run", "--workload", str(DATA / variant / "workload"), "--network",
                 str(network), "--roofline", "312,2039,0.5", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert all(line.startswith("flowsim: warning: ") for line in err.splitlines()), err
    return json.loads(out)


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_trace_runs_and_repeats(variant, topology, tmp_path, capsys):
    first = _run(variant, topology, tmp_path, capsys)["time_ns"]
    assert math.isfinite(first) and first > 0
    assert _run(variant, topology, tmp_path, capsys)["time_ns"] == first


def test_weight_sharding_adds_the_parameter_gathers(tmp_path, capsys):
    """The FSDP trace is its unsharded twin plus STG's parameter all-gathers: more
    collectives and more bytes over the links, read as such."""
    plain = _run("dp4tp2", "Switch", tmp_path, capsys)
    sharded = _run("fsdp_dp4tp2", "Switch", tmp_path, capsys)
    assert sharded["collectives"] > plain["collectives"]
    assert sum(sharded["dim_bytes"]) > sum(plain["dim_bytes"])


def test_tensor_parallelism_without_sequence_parallelism_all_reduces(tmp_path, capsys):
    """``--tpsp false``: each layer's tensor-parallel communication is an all-reduce where
    sequence parallelism gathers and reduce-scatters, so fewer collectives carry the same
    activations; with ``--tpsp true`` (the other traces) it is the other way round."""
    import flowsim
    from flowsim.workload.load import load_workload

    def kinds(variant: str) -> Counter:
        ranks = len(list((DATA / variant).glob("workload.*.et")))
        net = flowsim.load_network({"topology": ["Switch"], "npus_count": [ranks],
                                    "bandwidth": [50], "latency": [500]})
        work = load_workload(str(DATA / variant / "workload"), net, 1)
        return Counter(op.collective for p in work.programs for op in p.ops
                       if op.kind == "collective")

    without, with_sp = kinds("notpsp_dp2tp4"), kinds("dp4tp2")
    assert without["reduce_scatter"] == 0 and without["all_reduce"] > with_sp["all_reduce"]
    assert with_sp["reduce_scatter"] > 0 and with_sp["all_gather"] > without["all_gather"]
    assert _run("notpsp_dp2tp4", "Switch", tmp_path, capsys)["time_ns"] > 0
