"""Topology layer: network configs and their link arrays and routes."""

from .config import NetworkConfig, parse_network_config, read_network_config
from .network import Network, load_network

__all__ = ["Network", "NetworkConfig", "load_network", "parse_network_config",
           "read_network_config"]
