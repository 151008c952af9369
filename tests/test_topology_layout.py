"""The topology package's public surface after its restructuring: one loader with a standard
bounded cache, the replica tiling the scheduler uses, and the names it exports."""

from __future__ import annotations

import numpy as np
import pytest

import flowsim
from flowsim.errors import RoutingError
from flowsim.topology import (
    FabricConfig,
    FabricNetwork,
    Network,
    NetworkConfig,
    load_network,
    parse_network_config,
    read_network_config,
)
from flowsim.topology.load import CACHE_SIZE, build_network

NETS = [
    {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": [4, 3, 2],
     "bandwidth": [50, 25, 10], "latency": [500, 500, 500]},
    {"topology": ["Switch", "Ring"], "npus_count": [2, 8], "bandwidth": [1, 2],
     "latency": [0, 1]},
    {"topology": ["Ring"], "npus_count": [2], "bandwidth": [1], "latency": [1]},
]


def _tile_reference(net: Network, per_link: np.ndarray) -> np.ndarray:
    """What Schedule.expand_replicated computed from the network's private offsets."""
    out = per_link.copy()
    offsets = list(net._dim_link_offset) + [net.num_links]
    for d in range(net.ndims):
        start, stop = offsets[d], offsets[d + 1]
        instances = net.npus // net.dims[d]
        per_instance = (stop - start) // instances
        out[start:stop] = np.tile(per_link[start: start + per_instance], instances)
    return out


@pytest.mark.parametrize("config", NETS)
def test_tile_first_instance_copies_each_dimensions_first_instance(config):
    net = load_network(config)
    values = np.random.default_rng(0).random(net.num_links)
    tiled = net.tile_first_instance(values)
    assert np.array_equal(tiled, _tile_reference(net, values))
    assert not np.shares_memory(tiled, values)
    # every instance of a dimension now holds the first instance's values
    for d in range(net.ndims):
        links = np.nonzero(net.link_dim == d)[0]
        per = links.size // (net.npus // net.dims[d])
        blocks = tiled[links].reshape(-1, per)
        assert (blocks == blocks[0]).all()
    two = np.stack([values, 2 * values], axis=1)
    assert np.array_equal(net.tile_first_instance(two)[:, 1], 2 * tiled)


def test_tile_first_instance_checks_its_input_and_fabrics_have_no_replicas():
    net = load_network(NETS[0])
    with pytest.raises(RoutingError, match="expected 144 per-link values"):
        net.tile_first_instance(np.zeros(3))
    fabric = load_network({"fabric": {"generator": "torus", "dims": [4], "bandwidth": 1}})
    assert isinstance(fabric, FabricNetwork) and not fabric.replicable
    with pytest.raises(RoutingError, match="no replicated dimension instances"):
        fabric.tile_first_instance(np.zeros(fabric.num_links))


def test_built_networks_are_cached_by_config_with_a_bounded_lru_cache():
    a = load_network(NETS[1])
    assert load_network(dict(NETS[1])) is a                   # same config, same network
    assert load_network(parse_network_config(NETS[1])) is a
    assert build_network.cache_info().maxsize == CACHE_SIZE
    for bandwidth in range(1, CACHE_SIZE + 2):              # push it out of the cache
        load_network({**NETS[2], "bandwidth": [bandwidth]})
    assert load_network(NETS[1]) is not a and load_network(NETS[1]).config == a.config


def test_public_names(tmp_path):
    path = tmp_path / "net.yml"
    path.write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [1]\nlatency: [1]\n")
    config = read_network_config(path)
    assert isinstance(config, NetworkConfig) and config.source == str(path)
    assert isinstance(load_network(config), Network) and flowsim.Network is Network
    fabric = load_network({"fabric": {"generator": "mesh", "dims": [2, 2], "bandwidth": 1}})
    assert isinstance(fabric.config, FabricConfig)
