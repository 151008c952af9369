"""InfraGraph descriptions as fabrics: expansion, units, validation and strict errors."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import flowsim
from conftest import REPO
from flowsim.errors import ConfigError
from flowsim.units import NETWORK_GBPS_TO_BYTES_PER_NS as GB

EXAMPLE = REPO / "topologies" / "infragraph_2hosts.infragraph.json"


def load(infra: dict, **extra):
    return flowsim.load_network({"infragraph": infra, **extra})


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def test_bundled_description_expands_to_gpus_switches_and_links():
    net = flowsim.load_network("infragraph_2hosts")
    assert net.npus == 16 and net.dims == (8, 2)
    names = net.config.node_names
    assert names[0] == "host.0.xpu.0" and names[15] == "host.1.xpu.7"
    # 400 Gb/s NIC links: 400e9 / 8 bytes/s
    i = net.config.link_names.index("host.1.nic.7->leaf.0.port.15")
    assert net.link_bandwidth[i] == pytest.approx(400e9 / 8 / 1e9)
    assert net.link_latency[i] == 1000.0
    # 450 GB/s NVLink (10^9 bytes)
    j = net.config.link_names.index("host.0.xpu.0->host.0.nvsw.0")
    assert net.link_bandwidth[j] == pytest.approx(450.0)
    # GPUs of a host talk over the NVSwitch, GPUs of two hosts over NIC, switch, NIC
    _, _, indptr, links = net.routes_multipath(np.array([0, 0]), np.array([1, 8]))
    first = [net.config.link_names[k] for k in links[indptr[0]:indptr[1]]]
    assert first == ["host.0.xpu.0->host.0.nvsw.0", "host.0.nvsw.0->host.0.xpu.1"]
    assert "leaf" in " ".join(net.config.link_names[k] for k in links[indptr[1]:indptr[2]])


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_collectives_run_on_an_infragraph_fabric(model):
    ds = flowsim.simulate_collective("infragraph_2hosts", "all_reduce", "16MiB", model=model)
    assert float(ds.time_ns) > 0 and ds.sizes["npu"] == 16


def test_package_validation_errors_name_the_file():
    pytest.importorskip("infragraph")
    with pytest.raises(ConfigError, match=r"invalid.infragraph.yaml: not a valid InfraGraph.*"
                                          r"choice"):
        flowsim.load_network({"infragraph": str(REPO / "tests" / "data" /
                                                "invalid.infragraph.yaml")})


def _edit(path, value):
    infra = example()
    target = infra
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return infra


@pytest.mark.parametrize("path,value,match", [
    (("edges", 0, "ep2", "component"), "port[0:99]", r"slice \[0:99\] outside 0..15"),
    (("edges", 0, "ep1", "component"), "nic[9]", r"index or slice \[9\] outside"),
    (("edges", 0, "ep1", "component"), "gpu", "unknown component 'gpu'"),
    (("edges", 0, "ep1", "instance"), "rack[0:2]", "unknown instance 'rack"),
    (("edges", 0, "link"), "eth800", "unknown link 'eth800'"),
    (("edges", 0, "scheme"), "ring", "scheme 'ring' is not supported"),
])
def test_strict_expansion_errors(path, value, match):
    infra = _edit(path, value)
    with pytest.raises(ConfigError, match=match):
        load(infra)


def test_one2one_needs_equal_lists_and_links_need_bandwidth():
    infra = example()
    infra["edges"][0]["ep2"]["component"] = "port[0:8]"
    with pytest.raises(ConfigError, match="one2one between 16 and 8 endpoints"):
        load(infra)
    infra = example()
    infra["links"][0]["physical"].pop("bandwidth")
    with pytest.raises(ConfigError, match="link 'eth400' has no bandwidth"):
        load(infra)
    net = load(infra, default_bandwidth=25)
    i = net.config.link_names.index("host.0.nic.0->leaf.0.port.0")
    assert net.link_bandwidth[i] == pytest.approx(25 * GB)


def test_logical_mapping_must_cover_the_npus():
    with pytest.raises(ConfigError, match="product is the NPU count 16"):
        load(example(), logical_dims=[8, 3])
    assert load(copy.deepcopy(example()), logical_dims=[4, 4]).dims == (4, 4)


def test_bad_latency_self_containing_device_and_wrapper_keys():
    infra = example()
    infra["links"][0]["physical"]["latency"] = {"choice": "ns", "ns": -5}
    with pytest.raises(ConfigError, match=r"latency\.ns.: expected a number >= 0"):
        load(infra)
    infra = example()
    infra["devices"][0]["components"].append({"name": "host", "count": 1, "choice": "device"})
    with pytest.raises(ConfigError, match="contains itself"):
        load(infra)
    infra = example()
    infra["devices"] = ["not a mapping"]
    with pytest.raises(ConfigError, match="expected a list of mappings|not a valid InfraGraph"):
        load(infra)
    with pytest.raises(ConfigError, match="unknown key 'logical_dim'"):
        load(example(), logical_dim=[8, 2])
    with pytest.raises(ConfigError, match="key 'default_bandwidth'"):
        load(example(), default_bandwidth=-5)
    with pytest.raises(ConfigError, match="key 'routing'"):
        load(example(), routing="spray")
    with pytest.raises(ConfigError, match="key 'infragraph'.*not found"):
        flowsim.load_network({"infragraph": "/no/such/file.json"})
