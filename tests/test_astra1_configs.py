"""ASTRA-sim 1.0 configs: the analytical network JSON and the ``key: value`` system text.

The closed-form times are ASTRA-sim 1.0's own results for the hand-made configs
(``shared/validation/astra_sim_1/README.md``, "Hand-made workloads and hand checks").
"""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

import flowsim
from conftest import VALIDATION
from flowsim.errors import ConfigError, FlowsimWarning
from flowsim.system.astra1 import parse_astra1_system
from flowsim.topology.astra1 import is_astra1_network, parse_astra1_network

CONFIGS = VALIDATION / "astra_sim_1" / "configs"
NETWORKS = sorted((CONFIGS / "network").glob("*.json"))
SYSTEMS = sorted((CONFIGS / "system").glob("*.txt"))
needs_configs = pytest.mark.skipif(not NETWORKS or not SYSTEMS,
                                   reason=f"ASTRA-sim 1.0 configs not found at {CONFIGS}")

RING8 = {"topology-name": "Hierarchical", "topologies-per-dim": ["Ring"],
         "dimension-type": ["N"], "dimensions-count": 1, "units-count": [8],
         "links-count": [2], "link-latency": [500],
         "link-bandwidth": [46.56612873077392578125], "nic-latency": [0],
         "router-latency": [0], "hbm-latency": [0], "hbm-bandwidth": [370], "hbm-scale": [0]}


def one_dim(**overrides) -> dict:
    out = dict(RING8)
    out.update({key.replace("_", "-"): value for key, value in overrides.items()})
    return out


def write_json(tmp_path, data: dict, name: str = "net.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def write_text(tmp_path, text: str, name: str = "sys.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- every bundled config loads
@needs_configs
@pytest.mark.parametrize("path", NETWORKS, ids=lambda p: p.name)
def test_every_network_config_loads(path):
    net = flowsim.load_network(path)  # FlowsimWarning is an error in the test suite
    data = json.loads(path.read_text())
    assert net.config.npus_count == tuple(data["units-count"])
    assert net.config.topology == tuple(data["topologies-per-dim"])
    assert net.config.source == str(path)


@needs_configs
@pytest.mark.parametrize("path", SYSTEMS, ids=lambda p: p.name)
def test_every_system_config_loads(path):
    system = flowsim.load_system(path)
    assert system.local_mem_bw_gbps == 500_000
    assert system.source == str(path)
    assert flowsim.load_system(str(path)) == system


def test_is_astra1_network():
    assert is_astra1_network(RING8)
    assert not is_astra1_network({"topology": ["Ring"], "npus_count": [8]})
    assert not is_astra1_network(["topology-name"])


# ---------------------------------------------------------------- per-message cost
@needs_configs
def test_ring8_hand_is_100_bytes_per_ns_and_500_ns_hops():
    net = flowsim.load_network(CONFIGS / "network" / "ring8_hand.json")
    assert net.config.bandwidth_bytes_per_ns == pytest.approx((100.0,), rel=1e-12)
    assert net.config.latency_ns == (500.0,)
    indptr, links = net.routes(np.array([0, 0]), np.array([1, 3]))
    assert net.path_latency(indptr, links).tolist() == [500.0, 1500.0]
    assert net.path_bottleneck(indptr, links) == pytest.approx([100.0, 100.0], rel=1e-12)


HAND = [  # network, system, collective, bytes, ASTRA-sim 1.0's time (ns)
    ("ring8_hand.json", "hand_ring1d_sys.txt", "all_reduce", 800_000, 21150),
    ("ring8_hand.json", "hand_ring1d_sys.txt", "all_reduce", 1_600_000, 35150),
    ("ring2x4_hand.json", "hand_ring2d_sys.txt", "all_reduce", 800_000, 24100),
    ("ring8_hand.json", "hand_ring1d_sys.txt", "all_gather", 100_000, 10580),
    ("ring2x4_hand.json", "hand_ring2d_sys.txt", "all_gather", 100_000, 9060),
    ("ring8_hand.json", "hand_ring1d_sys.txt", "reduce_scatter", 800_000, 10580),
    ("ring8_hand.json", "hand_ring1d_sys.txt", "all_to_all", 800_000, 42290),
]


@needs_configs
@pytest.mark.parametrize("network,system,collective,size,expected", HAND)
def test_hand_collectives_match_astra_sim_1(network, system, collective, size, expected):
    ds = flowsim.simulate_collective(CONFIGS / "network" / network, collective, size,
                                     system=CONFIGS / "system" / system)
    assert float(ds.time_ns) == pytest.approx(expected, abs=0.5)  # ASTRA-sim's own times


@needs_configs
@pytest.mark.parametrize("name,topology,bandwidth_gbps,path_latency", [
    # 1 link of 25 GB/s; 2 hops of 500 ns + 10 ns of router (hbm term never the larger)
    ("Switch16.json", ("Switch",), (25.0,), (1010.0,)),
    # Ring: links-count 2 doubles the link bandwidth; latency 1 ns per hop
    ("sample_Torus3D.json", ("Ring",) * 3, (64.0, 32.0, 32.0), (1.0, 1.0, 1.0)),
    # Ring 250 x 2; FullyConnected 7 links over 7 peers: 25 x 1; Switch 12.5 x 1, 2 hops
    ("sample_Ring_FullyConnected_Switch.json", ("Ring", "FullyConnected", "Switch"),
     (500.0, 25.0, 12.5), (500.0, 500.0, 1000.0)),
])
def test_sample_configs_per_dimension(name, topology, bandwidth_gbps, path_latency):
    net = flowsim.load_network(CONFIGS / "network" / name)
    assert net.config.topology == topology
    assert net.config.bandwidth_gbps == pytest.approx(bandwidth_gbps)
    for d, stride in enumerate(net.strides):
        # one message to the next NPU of dimension d
        indptr, links = net.routes(np.array([0]), np.array([stride]))
        assert net.path_latency(indptr, links)[0] == pytest.approx(path_latency[d])
        assert net.path_bottleneck(indptr, links)[0] == pytest.approx(
            bandwidth_gbps[d] * 2**30 / 1e9)


def test_ring_odd_links_round_down_to_even():
    config = parse_astra1_network(one_dim(links_count=[3]))
    assert config.bandwidth_gbps == pytest.approx((2 * 46.56612873077392578125,))


def test_fully_connected_uses_whole_links_per_peer():
    config = parse_astra1_network(one_dim(topologies_per_dim=["FullyConnected"],
                                          units_count=[4], links_count=[7],
                                          link_bandwidth=[10]))
    assert config.bandwidth_gbps == (20.0,)  # 7 // 3 = 2 links per peer


def test_nic_latency_folds_in_where_exact():
    switch = parse_astra1_network(one_dim(topologies_per_dim=["Switch"], nic_latency=[30],
                                          router_latency=[10]))
    assert switch.latency_ns == (500 + 5 + 30,)  # x 2 links = 2*500 + 10 + 2*30
    fc = parse_astra1_network(one_dim(topologies_per_dim=["FullyConnected"], nic_latency=[30],
                                      links_count=[7]))
    assert fc.latency_ns == (560.0,)
    small_ring = parse_astra1_network(one_dim(units_count=[3], nic_latency=[30]))
    assert small_ring.latency_ns == (560.0,)


def test_missing_optional_keys_take_astra_sim_defaults():
    data = {k: v for k, v in RING8.items()
            if k not in ("dimensions-count", "nic-latency", "router-latency", "hbm-latency",
                         "hbm-bandwidth", "hbm-scale")}
    assert parse_astra1_network(data) == parse_astra1_network(RING8)


def test_hbm_term_that_can_win_warns():
    data = one_dim(topologies_per_dim=["Switch"], hbm_bandwidth=[10], hbm_scale=[1])
    with pytest.warns(FlowsimWarning, match=r"hbm-scale\[0\].*larger than \d+ bytes"):
        parse_astra1_network(data, "net.json")
    data = one_dim(hbm_latency=[600], hbm_bandwidth=[10**6], hbm_scale=[1])
    with pytest.warns(FlowsimWarning, match="smaller than"):
        parse_astra1_network(data, "net.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_astra1_network(one_dim(hbm_latency=[500], hbm_scale=[1]))  # never the larger


# ---------------------------------------------------------------- bad network files
@pytest.mark.parametrize("change,key,expected", [
    ({"links-count": None}, "links-count", "missing key 'links-count'"),
    ({"units-count": [8, 8]}, "units-count", "a list of 1 values"),
    ({"link-latency": 500}, "link-latency", "a list of 1 values"),
    ({"topology-name": "Torus"}, "topology-name", "'Hierarchical'"),
    ({"topologies-per-dim": ["Mesh"]}, r"topologies-per-dim\[0\]", "one of Ring"),
    ({"dimension-type": ["X"]}, r"dimension-type\[0\]", "one of T, N, P, PP"),
    ({"units-count": [1]}, r"units-count\[0\]", "an integer >= 2"),
    ({"units-count": [8.5]}, r"units-count\[0\]", "an integer >= 2"),
    ({"links-count": [0]}, r"links-count\[0\]", "an integer >= 1"),
    ({"links-count": [1]}, r"links-count\[0\]", "an integer >= 2 .* in pairs"),
    ({"link-bandwidth": [0]}, r"link-bandwidth\[0\]", "a number > 0"),
    ({"link-bandwidth": ["fast"]}, r"link-bandwidth\[0\]", "a number > 0"),
    ({"link-latency": [-1]}, r"link-latency\[0\]", "a number >= 0"),
    ({"hbm-bandwidth": [0]}, r"hbm-bandwidth\[0\]", "a number > 0"),
    ({"dimensions-count": 0}, "dimensions-count", "an integer >= 1"),
    ({"nic-latency": [5]}, r"nic-latency\[0\]", "0 on a Ring of more than 3 NPUs"),
    ({"topologies-per-dim": ["FullyConnected"], "links-count": [6]}, r"links-count\[0\]",
     "an integer >= 7"),
    ({"link_bandwidth": [1]}, "link_bandwidth", "unknown key"),
])
def test_bad_network_file(tmp_path, change, key, expected):
    data = dict(RING8)
    for k, v in change.items():
        if v is None:
            del data[k]
        else:
            data[k] = v
    path = write_json(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        flowsim.load_network(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert re.search(f"'{key}'", message), message
    assert re.search(expected, message), message


# ---------------------------------------------------------------- system text
def test_system_text_keys_and_defaults():
    text = ("scheduling-policy: FIFO   \nendpoint-delay:\t7 active-chunks-per-dimension: 2\n"
            "preferred-dataset-splits: 3\ncollective-optimization: localBWAware\n"
            "all-reduce-implementation: ring_doubleBinaryTree\n"
            "all-to-all-implementation: oneDirect\nboost-mode: 0\n"
            "intra-dimension-scheduling: FIFO\ninter-dimension-scheduling: baseline\n"
            "L: 0 o: 0 g: 0 G: 0 model-shared-bus: 0 seprate-log: 1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # harmless values: no warning
        cfg = parse_astra1_system(text, "s.txt")
    assert (cfg.scheduling_policy, cfg.endpoint_delay_ns, cfg.active_chunks, cfg.splits,
            cfg.collective_optimization) == ("FIFO", 7.0, 2, 3, "localBWAware")
    assert cfg.implementation("all_reduce") == ("ring", "doubleBinaryTree")
    assert cfg.implementation("all_to_all") == ("oneDirect",)
    assert cfg.implementation("all_gather") == ("ring",)
    empty = parse_astra1_system("")
    assert (empty.endpoint_delay_ns, empty.active_chunks, empty.splits,
            empty.scheduling_policy, empty.collective_optimization) == (
        10.0, 1, 1, "LIFO", "baseline")


def test_reduction_cost_is_astra_sim_1_memory():
    cfg = parse_astra1_system("")
    # 3 * floor(bytes / 500000) ns
    assert [cfg.reduction_ns(b) for b in (499_999, 500_000, 1_600_000)] == [0.0, 3.0, 9.0]


@pytest.mark.parametrize("text,key", [
    ("boost-mode: 1", "boost-mode"),
    ("intra-dimension-scheduling: SCF", "intra-dimension-scheduling"),
    ("inter-dimension-scheduling: themis", "inter-dimension-scheduling"),
    ("model-shared-bus: 1", "model-shared-bus"),
    ("seprate-log: 0", "seprate-log"),
    ("all-to-all-implementation: direct4", r"all-to-all-implementation\[0\]"),
])
def test_unmodelled_values_warn(text, key):
    with pytest.warns(FlowsimWarning, match=f"'{key}' = .* is not modelled"):
        cfg = parse_astra1_system(text, "s.txt")
    if "direct4" in text:
        assert cfg.implementation("all_to_all") == ("direct",)


def test_shared_bus_uses_astra_sim_1_reduction_delay_default():
    with pytest.warns(FlowsimWarning, match="model-shared-bus"):
        cfg = parse_astra1_system("model-shared-bus: 1")
    assert cfg.local_reduction_delay_ns == 1.0


@pytest.mark.parametrize("text,key,expected", [
    ("endpoint-delay: 10\nfoo: 1", "foo:", r"line 2: unknown key 'foo:'"),
    ("endpoint-delay: ten", "endpoint-delay", "a whole number >= 0, found 'ten'"),
    ("endpoint-delay: 2.5", "endpoint-delay", "a whole number >= 0"),
    ("active-chunks-per-dimension: 0", "active-chunks-per-dimension", "a whole number >= 1"),
    ("L: nan", "L", "a number >= 0"),
    ("scheduling-policy: lifo", "scheduling-policy", "one of LIFO, FIFO"),
    ("collective-optimization: fast", "collective-optimization", "one of baseline"),
    ("all-reduce-implementation: ring_tree", r"all-reduce-implementation\[1\]",
     "one of ring, direct"),
    ("all-reduce-implementation: _", "all-reduce-implementation", "joined by '_'"),
    ("all-reduce-implementation: oneRing_ring", "all-reduce-implementation",
     "a single flat algorithm"),
    ("inter-dimension-scheduling: fastest", "inter-dimension-scheduling", "one of baseline"),
    ("endpoint-delay 10", "endpoint-delay", "must end with ':'"),
    ("scheduling-policy: LIFO\nendpoint-delay:", "endpoint-delay",
     "line 2: missing key 'endpoint-delay': expected a value after the key"),
])
def test_bad_system_file(tmp_path, text, key, expected):
    path = write_text(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        flowsim.load_system(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert re.search(f"'{key}'", message), message
    assert re.search(expected, message), message


def test_missing_system_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        flowsim.load_system(tmp_path / "absent.txt")
