"""``flowsim run --set KEY=VALUE``: a point of a sweep from the command line."""

from __future__ import annotations

import json

import pytest

import flowsim
from flowsim.cli import main
from flowsim.sweep.overrides import DEFAULT_SYSTEM


def _time(argv: list[str], capsys) -> float:
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["time_ns"]


def test_set_items_change_the_cluster_and_the_generator_spec(tmp_path, capsys, monkeypatch):
    (tmp_path / "cfg.json").write_text(
        (flowsim.resources.bundled_dir("model") / "llama3_8b.json").read_text())
    (tmp_path / "run.yml").write_text("generator: huggingface\nconfig: cfg.json\n"
                                      "sequence: 1024\nglobal_batch: 16\nlayers: 2\n")
    (tmp_path / "net.yml").write_text("cluster: {device: h100, nodes: 1}\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")   # the spec's own file is found beside it
    got = _time(["--workload", str(tmp_path / "run.yml"), "--network",
                 str(tmp_path / "net.yml"), "--set", "network.cluster.nodes=2",
                 "--set", "workload.tp=4", "--set", "network.cluster.device=b200"], capsys)
    spec = {"generator": "huggingface", "config": str(tmp_path / "cfg.json"),
            "sequence": 1024, "global_batch": 16, "layers": 2, "tp": 4}
    assert got == float(flowsim.simulate({"cluster": {"device": "b200", "nodes": 2}},
                                         spec).time_ns)


def test_a_system_key_changes_the_default_system(capsys):
    """flowsim's default system (SystemConfig(): ASTRA-sim's Ring_4chunks) with one key
    changed; the value read as a number however the shell writes it (1e3)."""
    got = _time(["--set", "system.endpoint-delay=1e3"], capsys)
    assert got == float(flowsim.simulate(
        "ring8", "resnet50_dp", flowsim.SystemConfig(endpoint_delay_ns=1000)).time_ns)
    assert got != _time([], capsys)


def test_the_sweeps_default_system_is_flowsim_s():
    """DEFAULT_SYSTEM restates SystemConfig()'s defaults as json keys: they must not drift
    (its algorithms are the one-entry list that means ring everywhere)."""
    from dataclasses import fields

    from flowsim.system.load import load_system

    keyed, default = load_system(DEFAULT_SYSTEM), flowsim.SystemConfig()
    for f in fields(default):
        if f.name not in ("implementations", "source"):
            assert getattr(keyed, f.name) == getattr(default, f.name), f.name
    assert {names for _, names in keyed.implementations} == {("ring",)}


@pytest.mark.parametrize("argv, says", [
    (["--network", "dgx_h100", "--set", "network.cluster.nodes=-1"],
     "argument --set network.cluster.nodes=-1: key 'cluster.nodes': expected an integer >= 1"),
    (["--set", "system.endpoint-delay=-5"],
     "argument --set system.endpoint-delay=-5: key 'endpoint-delay': expected a number >= 0"),
])
def test_a_bad_value_names_the_item(argv, says, capsys):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "<dict>" not in err


def test_the_json_record_names_what_was_given(capsys):
    assert main(["collective", "--network", "dgx_h100", "--system", "nccl", "--size", "1MiB",
                 "--set", "network.cluster.nodes=2", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["network"] == "dgx_h100 with network.cluster.nodes=2"
    assert record["system"] == "nccl"


@pytest.mark.parametrize("argv, says", [
    (["--set", "nodes"], "expected KEY=VALUE"),
    (["--set", "nodes=2"], "key 'nodes': expected network.<key>, network.cluster.<key>"),
    (["--set", "model=flow"], "key 'model': expected network.<key>"),
    (["--network", "dgx_h100", "--set", "network.cluster.racks=2"],
     "unknown cluster key 'racks'"),
    (["--set", "network.cluster.nodes=2"], "the network it would set has no cluster block"),
    (["--set", "workload.tp=2"], "workload keys can be varied only for a generator spec"),
])
def test_a_bad_item_is_one_line_naming_it(argv, says, capsys):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_a_collective_takes_network_and_system_items(capsys):
    assert main(["collective", "--network", "dgx_h100", "--system", "nccl", "--size", "1GiB",
                 "--set", "network.cluster.nodes=2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["time_ns"]
    assert got == float(flowsim.simulate_collective(
        {"cluster": {"device": "h100", "nodes": 2}}, "all_reduce", "1GiB", "nccl").time_ns)
    assert main(["collective", "--set", "workload.tp=2"]) == 2
    err = capsys.readouterr().err
    assert "key 'workload.tp': expected network.<key>, network.cluster.<key>, system.<key> " \
           "(with" in err


def test_a_system_item_keeps_the_default_algorithms_without_a_warning(capsys):
    """flowsim's default runs ring in every dimension; a --set system item must not turn
    that into ASTRA-sim's one-entry list, which warns on a multi-dimensional network."""
    assert main(["collective", "--network", "r4_fc8_sw4", "--size", "1MiB", "--json",
                 "--set", "system.endpoint-delay=100"]) == 0
    out = capsys.readouterr()
    assert "warning" not in out.err
    assert json.loads(out.out)["time_ns"] == float(flowsim.simulate_collective(
        "r4_fc8_sw4", "all_reduce", "1MiB",
        flowsim.SystemConfig(endpoint_delay_ns=100)).time_ns)


def test_the_sweeps_page_loop_prints_what_it_says(capsys):
    """docs/guide/sweeps.md's shell loop: the layout and step times it quotes."""
    from conftest import REPO

    page = (REPO / "docs" / "guide" / "sweeps.md").read_text()
    for nodes in (64, 128):
        assert main(["run", "--workload", "llama3_70b", "--network", "dgx_h100", "--system",
                     "nccl", "--set", f"network.cluster.nodes={nodes}",
                     "--set", f"workload.dp={nodes // 4}"]) == 0
        out = capsys.readouterr().out
        layout = out.split("layout:", 1)[1].split(";")[0].strip()
        seconds = out.split("time:", 1)[1].split("(")[0].strip()
        assert seconds in page
        if nodes == 64:
            assert f"`layout: {layout};" in page.replace("\n", " ")


def test_astra_sim_1_files_refuse_keys_they_do_not_have(tmp_path, capsys):
    """A 1.0 system txt is read whole by run and collective; its keys are not 2.x json's, so
    --set and sweeps refuse it in one line instead of misreading it; a 1.0 network JSON
    takes no network.<key> either."""
    from test_astra1_configs import RING8

    (tmp_path / "sys.txt").write_text("scheduling-policy: LIFO\nendpoint-delay: 10\n"
                                      "all-reduce-implementation: ring\n")
    (tmp_path / "net.json").write_text(json.dumps(RING8))
    assert main(["collective", "--network", str(tmp_path / "net.json"), "--system",
                 str(tmp_path / "sys.txt"), "--set", "system.endpoint-delay=100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "an ASTRA-sim 1.0 system file is read whole" in err
    assert main(["collective", "--network", str(tmp_path / "net.json"),
                 "--set", "network.bandwidth[0]=10"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the network is ASTRA-sim 1.0's JSON" in err
