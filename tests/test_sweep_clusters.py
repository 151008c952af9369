"""Sweeps over real machines: a key of the network's ``cluster:`` block as an axis
(``network.cluster.nodes``), and whole networks or systems (``network: [dgx_h100, ...]``)."""

from __future__ import annotations

import pytest
import xarray as xr
import yaml

import flowsim
from flowsim.errors import ConfigError
from flowsim.sweep import load_spec, merge, sweep

RUN = {"generator": "huggingface", "config": "llama3_8b", "sequence": 1024,
       "global_batch": 32, "layers": 2, "tp": 8}
BASE = {"network": {"cluster": {"device": "h100", "nodes": 2}}, "system": "nccl",
        "workload": RUN}


def test_a_cluster_key_as_an_axis_is_each_point_s_cluster():
    ds = sweep({"base": BASE, "axes": {"network.cluster.nodes": [1, 2, 4],
                                       "network.cluster.device": ["h100", "a100"]}}, jobs=1)
    assert dict(ds.sizes) == {"network_cluster_nodes": 3, "network_cluster_device": 2}
    assert (ds.error == "").all()
    for nodes in (1, 2, 4):
        for name in ("h100", "a100"):
            direct = flowsim.simulate({"cluster": {"device": name, "nodes": nodes}}, RUN,
                                      "nccl")
            point = ds.sel(network_cluster_nodes=nodes, network_cluster_device=name)
            assert float(point.time_ns) == float(direct.time_ns)
    assert (ds.time_ns.sel(network_cluster_device="a100") >
            ds.time_ns.sel(network_cluster_device="h100")).all()


def test_whole_networks_as_an_axis_are_read_when_the_spec_loads(tmp_path):
    (tmp_path / "small.yml").write_text("cluster: {device: h100, nodes: 1}\n")
    spec = {"base": BASE, "axes": {"network": ["small.yml", "dgx_h100",
                                               {"cluster": {"device": "b200", "nodes": 1}}]}}
    (tmp_path / "spec.yml").write_text(yaml.safe_dump(spec))
    loaded = load_spec(tmp_path / "spec.yml")
    assert len(loaded.configs) == 3   # resolved once, carried by the spec
    (tmp_path / "small.yml").unlink()   # no point reads a file
    ds = sweep(loaded, tmp_path / "out.nc", jobs=1)
    assert list(ds.network.values) == ["small.yml", "dgx_h100",
                                       '{"cluster": {"device": "b200", "nodes": 1}}']
    assert ds.error.values[0] == "" and ds.error.values[2] == ""
    # 1,024 GPUs leave dp 128, which 32 sequences cannot feed: an error entry, not a failure
    assert "key 'global_batch'" in str(ds.error.values[1])
    direct = flowsim.simulate({"cluster": {"device": "b200", "nodes": 1}}, RUN, "nccl")
    assert float(ds.time_ns.values[2]) == float(direct.time_ns)


def test_shards_of_a_whole_network_sweep_merge_to_the_serial_result(tmp_path):
    spec = {"base": BASE, "axes": {"network": [{"cluster": {"device": "h100", "nodes": 1}},
                                               {"cluster": {"device": "a100", "nodes": 1}}],
                                   "system": ["nccl", {"endpoint-delay": 7000}]}}
    serial = sweep(spec, jobs=1)
    for i in range(2):
        sweep(spec, tmp_path / "shards", shard=f"{i}/2", jobs=1)
    xr.testing.assert_identical(serial.drop_attrs(), merge(tmp_path / "shards").drop_attrs())


@pytest.mark.parametrize("axes, match", [
    ({"network.cluster.racks": [2]}, r"unknown cluster key 'racks' \(expected one of device"),
    ({"network.topology.size": [2]}, r"read only as network\.cluster\.<key>"),
    ({"network": ["no_such_network"]}, r"axis 'network': no_such_network: network config "
                                       r"not found"),
    ({"network": [3]}, r"axis 'network': expected a path, a bundled name or a mapping"),
    ({"system": ["nope.json"]}, r"axis 'system': nope\.json: system config not found"),
])
def test_bad_cluster_and_whole_config_axes_fail_when_the_spec_loads(axes, match):
    with pytest.raises(ConfigError, match=match):
        load_spec({"base": BASE, "axes": axes})


def test_a_cluster_key_needs_a_cluster_network():
    base = {**BASE, "network": {"topology": ["Switch"], "npus_count": [8],
                                "bandwidth": [50], "latency": [500]}}
    with pytest.raises(ConfigError, match="the network it would set has no cluster block"):
        load_spec({"base": base, "axes": {"network.cluster.nodes": [2]}})


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_spec_file_s_own_files_are_found_beside_it_from_any_folder(tmp_path, monkeypatch,
                                                                     jobs):
    """A generator YAML naming a file beside it (a model config, a launch script) runs in a
    sweep started from another folder, in this process or in workers, as it does when the
    file is given to flowsim run."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "cfg.json").write_text(
        (flowsim.resources.bundled_dir("model") / "llama3_8b.json").read_text())
    (tmp_path / "run.yml").write_text("generator: huggingface\nconfig: models/cfg.json\n"
                                      "sequence: 1024\nglobal_batch: 16\nlayers: 2\n")
    (tmp_path / "sweep.yml").write_text(
        "base:\n  network: {cluster: {device: h100, nodes: 1}}\n  workload: run.yml\n"
        "axes:\n  workload.tp: [4, 8]\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    ds = sweep(str(tmp_path / "sweep.yml"), jobs=jobs)
    assert (ds.error == "").all()
    for tp in (4, 8):
        direct = flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, {
            "generator": "huggingface", "config": str(tmp_path / "models" / "cfg.json"),
            "sequence": 1024, "global_batch": 16, "layers": 2, "tp": tp})
        assert float(ds.time_ns.sel(workload_tp=tp)) == float(direct.time_ns)


def test_a_sweep_without_a_system_runs_flowsim_s_default_system():
    """As flowsim run and flowsim.simulate without one (4 chunks, localBWAware, local
    reduction cost), for a training run and for a collective."""
    net = {"cluster": {"device": "h100", "nodes": 1}}
    run = {**RUN, "tp": 4}
    ds = sweep({"base": {"network": net, "workload": run}, "axes": {"model": ["analytical"]}},
               jobs=1)
    assert float(ds.time_ns.squeeze()) == float(flowsim.simulate(net, run).time_ns)
    ds = sweep({"base": {"network": "r4_fc8_sw4", "collective": "all_reduce",
                         "size": "16MiB"}, "axes": {"model": ["analytical"]}}, jobs=1)
    assert float(ds.time_ns.squeeze()) == float(
        flowsim.simulate_collective("r4_fc8_sw4", "all_reduce", "16MiB").time_ns)


def test_a_cluster_key_applies_to_each_whole_network_whatever_the_axis_order():
    for axes in ({"network.cluster.nodes": [1, 2],
                  "network": [{"cluster": {"device": "h100", "nodes": 8}},
                              {"cluster": {"device": "a100", "nodes": 8}}]},
                 {"network": [{"cluster": {"device": "h100", "nodes": 8}},
                              {"cluster": {"device": "a100", "nodes": 8}}],
                  "network.cluster.nodes": [1, 2]}):
        ds = sweep({"base": BASE, "axes": axes}, jobs=1)
        assert (ds.error == "").all()
        point = ds.isel(network=1).sel(network_cluster_nodes=2)
        assert float(point.time_ns) == float(flowsim.simulate(
            {"cluster": {"device": "a100", "nodes": 2}}, RUN, "nccl").time_ns)


def test_keys_are_checked_on_every_whole_config_they_meet():
    """A cluster key with a network axis: checked on each of its networks when the spec
    loads (a network without a cluster block is refused there, not in a worker); inside a
    zip group, on the network its row takes, whatever the order of the keys."""
    base = {**BASE, "network": "ring8"}
    with pytest.raises(ConfigError, match=r"network\.cluster\.nodes.*no cluster block"):
        load_spec({"base": {**BASE, "network": "dgx_h100"},
                   "axes": {"network": ["dgx_h100", "ring8"], "network.cluster.nodes": [1]}})
    zipped = {"layout": {"network.cluster.nodes": [1, 2],
                         "network": [{"cluster": {"device": "h100", "nodes": 8}},
                                     {"cluster": {"device": "a100", "nodes": 8}}]}}
    ds = sweep({"base": base, "zip": zipped}, jobs=1)
    assert (ds.error == "").all()
    assert float(ds.time_ns.values[1]) == float(flowsim.simulate(
        {"cluster": {"device": "a100", "nodes": 2}}, RUN, "nccl").time_ns)


def test_a_point_whose_settings_do_not_combine_is_an_error_entry():
    """A spec built by hand (past the load check) whose point cannot be built records the
    error and the sweep goes on."""
    from flowsim.sweep.spec import Axis, SweepSpec

    spec = load_spec({"base": BASE, "axes": {"network.cluster.nodes": [1, 2]}})
    broken = SweepSpec(base={**spec.base, "network": {"topology": ["Switch"],
                                                      "npus_count": [8], "bandwidth": [50],
                                                      "latency": [500]}},
                       axes=(Axis("n", ("network.cluster.nodes",), ((1,),)),),
                       source="hand", text="")
    ds = sweep(broken, jobs=1)
    assert "no cluster block" in str(ds.error.values[0])


def test_an_inline_spec_s_files_are_found_beside_the_sweep_file(tmp_path, monkeypatch):
    """A generator spec written inside the sweep file names its files relative to that file,
    as the base network and a generator YAML do; the sweep's identity holds that folder."""
    (tmp_path / "cfg.json").write_text(
        (flowsim.resources.bundled_dir("model") / "llama3_8b.json").read_text())
    (tmp_path / "sweep.yml").write_text(yaml.safe_dump({
        "base": {"network": {"cluster": {"device": "h100", "nodes": 1}},
                 "workload": {"generator": "huggingface", "config": "cfg.json",
                              "sequence": 1024, "global_batch": 16, "layers": 2}},
        "axes": {"workload.tp": [4, 8]}}))
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    ds = sweep(str(tmp_path / "sweep.yml"), jobs=1)
    assert (ds.error == "").all()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "cfg.json").write_text((tmp_path / "cfg.json").read_text())
    (tmp_path / "other" / "sweep.yml").write_text((tmp_path / "sweep.yml").read_text())
    assert load_spec(tmp_path / "sweep.yml").digest != \
        load_spec(tmp_path / "other" / "sweep.yml").digest
