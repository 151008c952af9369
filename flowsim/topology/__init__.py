"""Topology layer: network configs (multi-dimensional, fabric, ASTRA-sim 1.0, InfraGraph),
their link arrays and routes."""

from .fabric_config import FabricConfig, parse_fabric_config
from .fabric_network import FabricNetwork
from .load import load_network, parse_network_mapping, read_network_file
from .network import Network
from .network_config import NetworkConfig, parse_network_config, read_network_config
from .view import LogicalView, logical_view

__all__ = ["FabricConfig", "FabricNetwork", "LogicalView", "Network", "NetworkConfig",
           "load_network", "logical_view",
           "parse_fabric_config", "parse_network_config", "parse_network_mapping",
           "read_network_config", "read_network_file"]
