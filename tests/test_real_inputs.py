"""Every file of ``real_inputs/`` (traces and workloads made by the ecosystem's own tools:
Chakra's PyTorch converter and generator, symbolic_tensor_graph, aicb, SimAI) on each network
its README lists, through the command line: it runs (exit 0, a finite positive time, the same
on a repeat) or is refused in one line naming a deliberate, documented limit; bad inputs made
from them stay one line on stderr with exit status 2."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from conftest import VALIDATION
from flowsim.cli import main

REAL = VALIDATION / "real_inputs"
NETWORKS = REAL / "networks"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"real inputs not found at {REAL}")

NET8 = ("ring_8", "switch_8", "fullyconnected_8")
NET16 = ("ring_16", "switch_16")
AICB = sorted(p.name for p in (REAL / "aicb").glob("*.txt")) if REAL.is_dir() else []
ROOFLINE = ["--roofline", "312,2039,0.5"]

#: (workload under real_inputs, networks, extra options): the first network is run twice
RUNS = [
    ("chakra_pytorch/chakra.0.et", ("ring_8", "switch_16"), ["--spmd"]),
    ("chakra_generator/BARRIER", NET8, []),
    ("chakra_generator/BROADCAST", NET8, []),
    ("stg/dp2tp2pp2/workload", NET8, ROOFLINE),
    *[(f"aicb/{name}", NET16, []) for name in AICB],
    ("simai/microAllReduce.txt", NET8, []),
]
#: (workload, network, extra options, the limit the one-line refusal names)
REFUSALS = [
    *[(f"chakra_generator/one_comm_{kind}_node", network, [],
       rf"missing attribute '{peer}': a {kind} needs {peer} and comm_tag")
      for kind, peer in (("send", "comm_dst"), ("recv", "comm_src")) for network in NET8],
    ("stg/dp2tp2pp2/workload", "ring_8", [], r"needs a roofline or a device to time it: "
                                             r"flowsim run --roofline TFLOPS,GBPS"),
    ("chakra_pytorch/chakra.0.et", "ring_8", [], r"trace files for 1 ranks, but the network "
                                                 r"has 8 NPUs .*--spmd"),
]


def run(workload: str | Path, network: str | Path, options: list[str], capsys
        ) -> tuple[int, str, str]:
    """``flowsim run --json``: exit status, stdout, stderr."""
    capsys.readouterr()
    net = network if isinstance(network, Path) else NETWORKS / f"{network}.yml"
    code = main(["run", "--workload", str(workload), "--network", str(net), "--json",
                 *options])
    out, err = capsys.readouterr()
    return code, out, err


def time_of(workload, network, options, capsys) -> float:
    code, out, err = run(workload, network, options, capsys)
    assert code == 0, err
    assert all(line.startswith("flowsim: warning: ") for line in err.splitlines()), err
    time_ns = json.loads(out)["time_ns"]
    assert math.isfinite(time_ns) and time_ns > 0
    return time_ns


def refusal(workload, network, options, capsys) -> str:
    code, out, err = run(workload, network, options, capsys)
    lines = [line for line in err.splitlines() if not line.startswith("flowsim: warning: ")]
    assert code == 2 and out == "" and len(lines) == 1, (code, err)
    assert lines[0].startswith("flowsim: error: ")
    return lines[0]


@pytest.mark.parametrize("workload, network, options",
                         [(w, n, o) for w, nets, o in RUNS for n in nets])
def test_runs(workload, network, options, capsys):
    first = time_of(REAL / workload, network, options, capsys)
    if network == next(nets for w, nets, o in RUNS if w == workload)[0]:
        assert time_of(REAL / workload, network, options, capsys) == first


@pytest.mark.parametrize("workload, network, options, limit", REFUSALS)
def test_refused_in_one_line_naming_the_limit(workload, network, options, limit, capsys):
    import re

    assert re.search(limit, refusal(REAL / workload, network, options, capsys))


def test_simai_workload_on_its_9216_gpus(tmp_path, capsys):
    """SimAI's example on a network of its all_gpus: 2-D Switch 8 x Switch 1152 (its TP 2 and
    ep 16 split both dimensions; pp 12 is named as not modelled)."""
    network = tmp_path / "switch_8x1152.yml"
    network.write_text("topology: [Switch, Switch]\nnpus_count: [8, 1152]\n"
                       "bandwidth: [50, 50]\nlatency: [500, 500]\n")
    code, out, err = run(REAL / "simai" / "workload_analytical.txt", network, [], capsys)
    assert code == 0, err
    assert "key 'pp' = 12 is not modelled" in err
    assert math.isfinite(json.loads(out)["time_ns"]) and json.loads(out)["time_ns"] > 0


# --------------------------------------------------------------------------- bad inputs

def test_a_truncated_trace_is_one_line(tmp_path, capsys):
    raw = (REAL / "chakra_pytorch" / "chakra.0.et").read_bytes()
    (tmp_path / "cut.0.et").write_bytes(raw[: len(raw) // 2])
    line = refusal(tmp_path / "cut.0.et", "ring_8", ["--spmd"], capsys)
    assert "cut.0.et: corrupt Chakra trace at byte" in line
    assert "remain in the file" in line           # the last message's prefix runs past it


def test_a_groups_file_naming_absent_ranks_is_one_line(tmp_path, capsys):
    folder = tmp_path / "stg"
    shutil.copytree(REAL / "stg" / "dp2tp2pp2", folder)
    groups = json.loads((folder / "workload.json").read_text())
    groups["5"] = [0, 9]
    (folder / "workload.json").write_text(json.dumps(groups))
    line = refusal(folder / "workload", "ring_8", ROOFLINE, capsys)
    assert "workload.json: communicator '5': rank(s) 9 outside the network's NPUs 0..7" in line


def test_mismatched_collectives_are_one_line(tmp_path, capsys):
    """Rank 2 of the STG trace issues an all-gather where its TP peer, rank 0, issues a
    reduce-scatter (the third collective of communicator 5 is swapped for a copy of the
    first)."""
    from flowsim.workload.chakra_format import read_et, write_et

    folder = tmp_path / "stg"
    shutil.copytree(REAL / "stg" / "dp2tp2pp2", folder)
    metadata, nodes = read_et(folder / "workload.2.et")
    by_id = {n["id"]: n for n in nodes}
    by_id[16]["attrs"]["comm_type"] = by_id[8]["attrs"]["comm_type"]     # RS -> AG
    by_id[16]["attrs"]["comm_size"] = by_id[8]["attrs"]["comm_size"]
    write_et(folder / "workload.2.et", nodes, metadata["version"],
             metadata_attrs=metadata["attrs"])
    line = refusal(folder / "workload", "ring_8", ROOFLINE, capsys)
    assert "node 16 (all_gather of 524288 B) on NPU" in line or \
        "node 16 (reduce_scatter of 1048576 B) on NPU" in line
    assert "as collective #1 on the same communicator" in line
