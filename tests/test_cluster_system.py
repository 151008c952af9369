"""A ``cluster:`` network runs NCCL's settings (the bundled ``nccl`` system) when it is given
no system, through every entry point: ``flowsim.simulate``, ``simulate_collective``,
``estimate``, ``flowsim run`` with and without ``--set system.<key>``, ``--fail`` on its
fabric form, and a sweep. ASTRA-sim's network files keep ASTRA-sim's default."""

from __future__ import annotations

import json

import pytest

import flowsim
from flowsim.cli import main
from flowsim.sweep import sweep
from flowsim.sweep.overrides import DEFAULT_SYSTEM

CLUSTER = {"cluster": {"device": "h100", "nodes": 2}}
#: experts over both nodes: the all-to-all's algorithm (NCCL's direct exchange, ASTRA-sim's
#: default ring) and chunking matter
MOE = {"generator": "transformer", "layers": 2, "hidden": 1024, "heads": 8, "sequence": 2048,
       "global_batch": 16, "micro_batch": 1, "dp": 16, "ep": 16, "experts": 16, "top_k": 2,
       "moe_ffn": 1024, "gated_mlp": True, "vocab": 32000}


def _time(ds) -> float:
    return float(ds.time_ns)


def test_a_cluster_runs_nccl_s_settings_without_a_system():
    nccl = _time(flowsim.simulate(CLUSTER, MOE, "nccl", model="flow"))
    assert _time(flowsim.simulate(CLUSTER, MOE, model="flow")) == nccl
    astra = _time(flowsim.simulate(CLUSTER, MOE, flowsim.SystemConfig(), model="flow"))
    assert astra != nccl   # four chunks, rings for all-to-alls, no endpoint cost: not it
    fabric = {"cluster": {**CLUSTER["cluster"], "form": "fabric"}}
    assert flowsim.load_network(fabric).config.system == "nccl"
    assert flowsim.load_network(CLUSTER).config.system == "nccl"


def test_astra_sim_networks_keep_astra_sim_s_default():
    net = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [370, 46],
           "latency": [500, 2000]}
    assert flowsim.load_network(net).config.system is None
    assert _time(flowsim.simulate(net, MOE)) == \
        _time(flowsim.simulate(net, MOE, flowsim.SystemConfig()))


def test_collectives_and_estimates_on_a_cluster_take_it_too():
    for model in ("analytical", "flow"):
        nccl = _time(flowsim.simulate_collective(CLUSTER, "all_to_all", "64MiB", "nccl",
                                                 model=model))
        assert _time(flowsim.simulate_collective(CLUSTER, "all_to_all", "64MiB",
                                                 model=model)) == nccl
        assert flowsim.estimate(CLUSTER, "all_to_all", "64MiB", model=model) == nccl
    assert float(flowsim.estimate_batch(CLUSTER, "all_reduce", [2**20, 2**26])[1]) == \
        _time(flowsim.simulate_collective(CLUSTER, "all_reduce", 2**26, "nccl"))


def _cli(argv: list[str], capsys) -> float:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["time_ns"]


def test_set_items_change_the_cluster_s_own_system(tmp_path, capsys):
    """``--set system.<key>`` without ``--system`` changes NCCL's settings on a cluster (a
    ``--set network.cluster...`` item keeps it a cluster); on an ASTRA-sim network, flowsim's
    default."""
    (tmp_path / "net.yml").write_text(json.dumps(CLUSTER))
    (tmp_path / "moe.yml").write_text(json.dumps(MOE))
    run = ["run", "--workload", str(tmp_path / "moe.yml"), "--network",
           str(tmp_path / "net.yml")]
    nccl = _time(flowsim.simulate(CLUSTER, MOE, "nccl"))
    assert _cli(run, capsys) == nccl
    assert _cli([*run, "--set", "system.endpoint-delay=7000"], capsys) == nccl   # nccl's own
    slower = _cli([*run, "--set", "system.endpoint-delay=20000"], capsys)
    system = {**json.loads(flowsim.resources.resolve_config_path("nccl", kind="system")
                           .read_text()), "endpoint-delay": 20000}
    assert slower == _time(flowsim.simulate(CLUSTER, MOE, system)) > nccl
    four = {"cluster": {"device": "h100", "nodes": 4}}
    spec = {**MOE, "dp": 32, "ep": 32, "experts": 32, "global_batch": 32}
    (tmp_path / "moe32.yml").write_text(json.dumps(spec))
    assert _cli(["run", "--workload", str(tmp_path / "moe32.yml"), "--network",
                 str(tmp_path / "net.yml"), "--set", "network.cluster.nodes=4",
                 "--set", "system.endpoint-delay=20000"], capsys) == \
        _time(flowsim.simulate(four, spec, system))


def test_a_cluster_with_failed_links_keeps_its_system(tmp_path, capsys):
    (tmp_path / "net.yml").write_text(json.dumps(
        {"cluster": {"device": "h100", "nodes": 4, "form": "fabric", "hosts_per_leaf": 2}}))
    argv = ["collective", "--network", str(tmp_path / "net.yml"), "--collective",
            "all_to_all", "--size", "64MiB", "--fail", "leaf0->spine0"]
    got = _cli(argv, capsys)
    assert got == _cli([*argv, "--system", "nccl"], capsys)
    assert got != _cli([*argv, "--system", "ring_4chunks"], capsys)


def test_a_logical_view_of_a_cluster_keeps_its_system():
    from flowsim.topology import logical_view

    for groups in ((4, 2, 4), (2, 16)):   # a view that cuts dimensions, one that straddles
        view, _ = logical_view(flowsim.load_network({"cluster": {"device": "h100",
                                                                 "nodes": 4}}), groups)
        assert (view.config.system, view.config.device) == ("nccl", "h100_sxm_80gb")
    assert _time(flowsim.simulate_collective(view, "all_to_all", "64MiB")) == \
        _time(flowsim.simulate_collective(view, "all_to_all", "64MiB", "nccl"))


@pytest.mark.parametrize("base_network, expected", [
    (CLUSTER, "nccl"),
    ({"topology": ["Switch"], "npus_count": [16], "bandwidth": [50], "latency": [500]}, None)])
def test_a_sweep_without_a_system_takes_its_base_network_s(base_network, expected):
    ds = sweep({"base": {"network": base_network, "workload": MOE},
                "axes": {"model": ["analytical"]}}, jobs=1)
    system = expected or dict(DEFAULT_SYSTEM)
    assert float(ds.time_ns.squeeze()) == _time(flowsim.simulate(base_network, MOE, system))


def test_the_summary_names_the_system_the_run_took(capsys):
    def system(argv: list[str]) -> str:
        capsys.readouterr()
        assert main([*argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["system"]

    collective = ["collective", "--size", "1MiB"]
    assert system([*collective, "--network", "dgx_h100"]) == "nccl"
    assert system([*collective, "--network", "r4_fc8_sw4"]) == "default"
    assert system([*collective, "--network", "dgx_h100", "--system", "ring_4chunks"]) == \
        "ring_4chunks"
    assert system(["run", "--network", "dgx_h100", "--workload", "llama3_70b", "--set",
                   "system.endpoint-delay=100"]) == "nccl with system.endpoint-delay=100"
    for command in ("collective", "run"):   # the text summary's first line too
        capsys.readouterr()
        assert main([command, "--network", "dgx_h100"]) == 0
        assert capsys.readouterr().out.splitlines()[0].endswith(", system nccl")


def test_each_point_of_a_whole_network_axis_takes_its_own_network_s():
    """A sweep given no system: a cluster in a network axis runs nccl, an ASTRA-sim network
    beside it flowsim's default, whichever the base is; system keys change each one's."""
    astra = {"topology": ["Switch"], "npus_count": [16], "bandwidth": [50], "latency": [500]}
    cluster = {"cluster": {"device": "h100", "nodes": 2}}
    for base in (astra, cluster):
        ds = sweep({"base": {"network": base, "collective": "all_to_all", "size": "64MiB"},
                    "axes": {"network": [astra, cluster],
                             "system.endpoint-delay": [10, 7000]}}, jobs=1)
        for i, net in enumerate((astra, cluster)):
            own = dict(DEFAULT_SYSTEM) if net is astra else json.loads(
                flowsim.resources.resolve_config_path("nccl", kind="system").read_text())
            for delay in (10, 7000):
                got = ds.time_ns.isel(network=i).sel(system_endpoint_delay=delay)
                assert float(got) == _time(flowsim.simulate_collective(
                    net, "all_to_all", "64MiB", {**own, "endpoint-delay": delay}))


def test_a_system_file_named_default_keeps_its_name(tmp_path, capsys):
    (tmp_path / "default_mine.json").write_text(json.dumps({"endpoint-delay": 100}))
    capsys.readouterr()
    assert main(["collective", "--network", "dgx_h100", "--size", "1MiB", "--system",
                 str(tmp_path / "default_mine.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == \
        str(tmp_path / "default_mine.json")


def test_json_says_whether_the_memory_estimate_fits(capsys):
    """``memory_fits`` beside the estimate and the device's capacity (Llama-3-70B-class on
    four nodes: micro-batches of 1 fit in 80 GiB, of 4 do not)."""
    def memory(micro_batch: int) -> dict:
        capsys.readouterr()
        assert main(["run", "--network", "dgx_h100", "--workload", "llama3_70b", "--set",
                     "network.cluster.nodes=4", "--set", "workload.dp=1", "--set",
                     f"workload.micro_batch={micro_batch}", "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    for micro_batch, fits in ((1, True), (4, False)):
        got = memory(micro_batch)
        assert got["memory_fits"] is fits
        assert (got["memory_gib"] <= got["memory_capacity_gib"]) is fits


def test_cluster_keys_without_their_block_name_it(tmp_path, capsys):
    (tmp_path / "net.yml").write_text("device: h100\nnodes: 4\n")
    assert main(["run", "--network", str(tmp_path / "net.yml")]) == 2
    assert "key 'nodes': expected inside a 'cluster:' block" in capsys.readouterr().err
