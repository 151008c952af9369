"""Topology layer: network configs (multi-dimensional, fabric, ASTRA-sim 1.0, InfraGraph),
their link arrays and routes.

Names load on first use: a multi-dimensional run never imports the fabric's routing (scipy,
Numba)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .fabric_config import FabricConfig, parse_fabric_config
    from .fabric_network import FabricNetwork
    from .load import load_network, parse_network_mapping, read_network_file
    from .network import Network
    from .network_config import NetworkConfig, parse_network_config, read_network_config
    from .view import LogicalView, logical_view

_NAMES = {"FabricConfig": ".fabric_config", "parse_fabric_config": ".fabric_config",
          "FabricNetwork": ".fabric_network",
          "load_network": ".load", "parse_network_mapping": ".load",
          "read_network_file": ".load",
          "Network": ".network",
          "NetworkConfig": ".network_config", "parse_network_config": ".network_config",
          "read_network_config": ".network_config",
          "LogicalView": ".view", "logical_view": ".view"}

__all__ = ["FabricConfig", "FabricNetwork", "LogicalView", "Network", "NetworkConfig",
           "load_network", "logical_view",
           "parse_fabric_config", "parse_network_config", "parse_network_mapping",
           "read_network_config", "read_network_file"]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
