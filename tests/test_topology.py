"""Topology layer: link arrays, NPU numbering, routing, and every bad network input."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from conftest import REPO, block, ring
from flowsim.errors import ConfigError, RoutingError
from flowsim.units import NETWORK_GBPS_TO_BYTES_PER_NS


def test_bandwidth_uses_astra_sim_gigabytes():
    net = flowsim.load_network(ring(bw=50))
    # 50 "GB/s" = 50 * 2**30 bytes/s: 1 GiB takes exactly 20 ms
    assert net.link_bandwidth[0] == pytest.approx(50 * 2**30 / 1e9)
    assert (1 << 30) / net.link_bandwidth[0] == pytest.approx(20e6)
    assert NETWORK_GBPS_TO_BYTES_PER_NS == 2**30 / 1e9


@pytest.mark.parametrize("name,p,links,switches", [
    ("Ring", 8, 16, 0), ("Ring", 2, 2, 0), ("FullyConnected", 8, 56, 0), ("Switch", 16, 32, 1)])
def test_link_counts(name, p, links, switches):
    net = flowsim.load_network(block(name, p))
    assert (net.npus, net.num_links, net.num_switches) == (p, links, switches)
    # every directed link is distinct
    pairs = set(zip(net.link_src.tolist(), net.link_dst.tolist()))
    assert len(pairs) == links


def test_npu_numbering_dimension_zero_fastest():
    net = flowsim.load_network({"topology": ["Ring", "Switch"], "npus_count": [4, 3],
                                "bandwidth": [1, 1], "latency": [1, 1]})
    assert net.coords(np.array([0, 1, 4, 11])).tolist() == [[0, 0], [1, 0], [0, 1], [3, 2]]
    assert net.dim_groups(0).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert net.dim_groups(1).tolist() == [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(2, 5), min_size=1, max_size=4), data=st.data())
def test_dim_groups_are_the_npus_sharing_every_other_coordinate(sizes, data):
    # the definition, from coordinates: rows in mixed-radix order of the other coordinates,
    # columns in that of the group's, lowest dimension fastest
    net = flowsim.load_network({"topology": ["Switch"] * len(sizes), "npus_count": sizes,
                                "bandwidth": [1] * len(sizes), "latency": [1] * len(sizes)})
    dims = tuple(sorted(data.draw(st.sets(st.sampled_from(range(len(sizes))), min_size=1))))
    coords = net.coords(np.arange(net.npus))

    def radix(ds):
        key, scale = np.zeros(net.npus, np.int64), 1
        for d in ds:
            key, scale = key + coords[:, d] * scale, scale * sizes[d]
        return key, scale

    (inner, width), (outer, rows) = radix(dims), radix(
        [d for d in range(len(sizes)) if d not in dims])
    expected = np.empty((rows, width), np.int64)
    expected[outer, inner] = np.arange(net.npus)
    got = net.dim_groups(dims)
    assert got.tolist() == expected.tolist()
    assert got.flags.writeable and got.flags.c_contiguous   # the caller's own
    assert net.dim_groups(dims + dims).tolist() == got.tolist()   # a repeat counts once
    shared = net.shared_dim_groups(dims)
    assert shared.tolist() == got.tolist() and not shared.flags.writeable
    assert net.shared_dim_groups(dims) is shared   # cached


def _path_nodes(net, src, dst):
    indptr, links = net.routes(np.array([src]), np.array([dst]))
    hops = links[indptr[0]:indptr[1]]
    nodes = [int(net.link_src[hops[0]])] + [int(net.link_dst[h]) for h in hops]
    # consecutive links must chain
    assert all(net.link_dst[a] == net.link_src[b] for a, b in zip(hops[:-1], hops[1:]))
    return nodes


def test_ring_routes_shortest_way_ties_clockwise():
    net = flowsim.load_network(ring(8))
    assert _path_nodes(net, 0, 3) == [0, 1, 2, 3]
    assert _path_nodes(net, 0, 6) == [0, 7, 6]
    assert _path_nodes(net, 1, 5) == [1, 2, 3, 4, 5]  # distance 4 both ways: clockwise
    assert _path_nodes(net, 5, 1) == [5, 6, 7, 0, 1]


def test_fully_connected_direct_and_switch_up_down():
    fc = flowsim.load_network(block("FullyConnected", 5))
    assert _path_nodes(fc, 4, 1) == [4, 1]
    sw = flowsim.load_network(block("Switch", 5))
    assert _path_nodes(sw, 4, 1) == [4, 5, 1]  # node 5 is the switch


def test_multi_dimensional_routes_are_dimension_ordered():
    net = flowsim.load_network({"topology": ["Ring", "FullyConnected", "Switch"],
                                "npus_count": [4, 3, 2], "bandwidth": [1, 2, 3],
                                "latency": [10, 20, 30]})
    src, dst = 1, 3 + 2 * 4 + 1 * 12  # coords (1,0,0) -> (3,2,1)
    nodes = _path_nodes(net, src, dst)
    assert nodes[:3] == [1, 2, 3]              # ring dim 0: distance 2 either way, clockwise
    assert nodes[3] == 3 + 2 * 4               # FC dim 1: direct
    assert nodes[-1] == dst and nodes[4] >= net.npus  # via the switch of dim 2
    indptr, links = net.routes(np.array([src]), np.array([dst]))
    assert net.path_latency(indptr, links)[0] == 2 * 10 + 20 + 2 * 30
    assert net.path_bottleneck(indptr, links)[0] == pytest.approx(NETWORK_GBPS_TO_BYTES_PER_NS)
    # ASTRA-sim's congestion-unaware charge: only the lowest differing dimension
    indptr, links = net.routes(np.array([src]), np.array([dst]), lowest_dim_only=True)
    assert set(net.link_dim[links].tolist()) == {0}


def test_routes_vectorized_match_one_by_one():
    net = flowsim.load_network({"topology": ["Ring", "Switch"], "npus_count": [5, 4],
                                "bandwidth": [1, 1], "latency": [1, 1]})
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 20, 200), rng.integers(0, 20, 200)
    indptr, links = net.routes(src, dst)
    for i in range(200):
        one_ptr, one = net.routes(src[i:i + 1], dst[i:i + 1])
        assert links[indptr[i]:indptr[i + 1]].tolist() == one.tolist()
    assert np.all(np.diff(indptr)[src == dst] == 0)


@pytest.mark.parametrize("name", ["ring8", "fc8", "switch64", "ring_switch_8x16", "r4_fc8_sw4",
                                  "r16_fc16_sw16", "switch16_inr"])
def test_bundled_configs_load(name):
    net = flowsim.load_network(REPO / "topologies" / f"{name}.yml")
    assert net.npus >= 8
    assert flowsim.load_network(name) is net  # bundled name, cached


BAD_NETWORKS = [
    ({"topology": ["Torus"], "npus_count": [8], "bandwidth": [1], "latency": [1]},
     "topology[0]"),
    ({"topology": ["Ring", "Switch"], "npus_count": [8], "bandwidth": [1, 1],
      "latency": [1, 1]}, "npus_count"),
    ({"topology": ["Ring"], "npus_count": [8], "bandwidth": [0], "latency": [1]},
     "bandwidth[0]"),
    ({"topology": ["Ring"], "npus_count": [8], "bandwidth": [-5], "latency": [1]},
     "bandwidth[0]"),
    ({"topology": ["Ring"], "npus_count": [8], "bandwidth": ["fast"], "latency": [1]},
     "bandwidth[0]"),
    ({"topology": ["Ring"], "npus_count": [8], "bandwidth": [1], "latency": [-1]},
     "latency[0]"),
    ({"topology": ["Ring"], "npus_count": [1], "bandwidth": [1], "latency": [1]},
     "npus_count[0]"),
    ({"topology": ["Ring"], "npus_count": [2.5], "bandwidth": [1], "latency": [1]},
     "npus_count[0]"),
    ({"topology": ["Ring"], "npus_count": [8], "latency": [1]}, "bandwidth"),
    ({"topology": ["Ring"], "npus_count": [8], "bandwidth": [1], "latency": [1],
      "in_network_reduction": [True]}, "in_network_reduction[0]"),
]


@pytest.mark.parametrize("config,key", BAD_NETWORKS)
def test_bad_network_names_the_key(config, key):
    with pytest.raises(ConfigError, match=re.escape(f"key '{key}'")):
        flowsim.load_network(config)


def test_bad_files_name_the_file(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("topology: [Ring\nnpus_count: 8\n")
    with pytest.raises(ConfigError, match="broken.yml: YAML syntax error"):
        flowsim.load_network(broken)
    scalar = tmp_path / "scalar.yml"
    scalar.write_text("just text\n")
    with pytest.raises(ConfigError, match="scalar.yml: expected a mapping"):
        flowsim.load_network(scalar)
    with pytest.raises(ConfigError, match="not found"):
        flowsim.load_network(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("topology: [Ring]\nnpus_count: [8]\nbandwidth: [0]\nlatency: [5]\n")
    with pytest.raises(ConfigError, match=r"bad.yml: key 'bandwidth\[0\]': expected a number > 0"):
        flowsim.load_network(bad)


def test_unknown_network_key_warns(tmp_path):
    with pytest.warns(flowsim.FlowsimWarning, match="unknown network key 'colour'"):
        flowsim.load_network({**ring(), "colour": "blue"})


def test_route_to_missing_npu_is_an_error(net8):
    with pytest.raises(RoutingError, match="NPU 8 does not exist"):
        net8.routes(np.array([0]), np.array([8]))
    with pytest.raises(RoutingError, match="NPU -1 does not exist"):
        net8.routes(np.array([-1]), np.array([2]))


def test_only_bare_names_fall_back_to_bundled_configs(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        flowsim.load_network(tmp_path / "ring8.yml")   # a missing path is not 'ring8'
    with pytest.raises(ConfigError, match="is a directory"):
        flowsim.load_network(tmp_path)
    assert flowsim.load_network("ring8").npus == 8


def test_sizes_accept_numpy_integers_and_refuse_overflow():
    from flowsim.units import parse_size
    assert parse_size(np.int64(1024)) == 1024
    with pytest.raises(ConfigError, match="'size'"):
        parse_size("1e400")


def test_a_dimension_named_twice_is_one_error():
    # dim_groups reads [0, 0] as [0], but a collective over a dimension twice is a mistake:
    # the op says so in one line, as a single collective's dims do
    net = flowsim.load_network({"topology": ["Ring", "Switch"], "npus_count": [4, 2],
                                "bandwidth": [100, 50], "latency": [500, 500]})
    assert net.dim_groups((0, 0)).tolist() == net.dim_groups(0).tolist()
    op = {"id": 0, "kind": "collective", "collective": "all-reduce", "size": "1MiB",
          "dims": [0, 0]}
    with pytest.raises(ConfigError, match=r"dims \[0, 0\] name a dimension twice") as info:
        flowsim.simulate(net, {"name": "d", "programs": [
            {"npus": [0, 1, 2, 3], "ops": [op]}, {"npus": [4, 5, 6, 7], "ops": [op]}]})
    assert "\n" not in str(info.value)
