"""``load_network``: every network format into a built network, cached by its config.

Formats, told apart by their keys: a ``fabric:`` graph (:mod:`.fabric_config`), an
``infragraph:`` description (:mod:`.infragraph`), an ASTRA-sim 1.0 analytical JSON
(:mod:`.astra1`) and, otherwise, ASTRA-sim 2.x multi-dimensional YAML
(:mod:`.network_config`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from .._io import read_mapping
from .._validate import as_config
from ..errors import public_api
from ..resources import resolve_config_path
from .astra1 import is_astra1_network, parse_astra1_network
from .network import Network
from .network_config import NetworkConfig, parse_network_config
from .view import LogicalView

if TYPE_CHECKING:   # the other formats load when a config uses them (a shell loop's start-up)
    from .fabric_config import FabricConfig
    from .fabric_network import FabricNetwork

#: How many built networks :func:`load_network` keeps (least recently used dropped first).
CACHE_SIZE = 64

AnyConfig: TypeAlias = "NetworkConfig | FabricConfig"
AnyNetwork: TypeAlias = "Network | FabricNetwork | LogicalView"


@public_api
def load_network(source: Any) -> AnyNetwork:
    """Load a network from a path or bundled name, a mapping of config keys, a config or a
    network.

    Built networks are cached by config (the :data:`CACHE_SIZE` most recently used), so
    repeated loads of the same topology are free and return the same object.

    Examples
    --------
    >>> net = load_network({"topology": ["Ring"], "npus_count": [8],
    ...                     "bandwidth": [50], "latency": [500]})
    >>> net.npus, net.num_links
    (8, 16)
    """
    if isinstance(source, (Network, LogicalView)) or _is_fabric(source, "fabric_network",
                                                                  "FabricNetwork"):
        return source
    if isinstance(source, NetworkConfig) or _is_fabric(source, "fabric_config", "FabricConfig"):
        config = source
    elif isinstance(source, Mapping):
        config = parse_network_mapping(source, "<dict>")
    else:
        config = read_network_file(source)
    return build_network(config)


@functools.lru_cache(maxsize=CACHE_SIZE)
def build_network(config: AnyConfig) -> AnyNetwork:
    """The network of a validated config (cached: configs are frozen and hashable)."""
    if isinstance(config, NetworkConfig):
        return Network.from_config(config)
    from .fabric_network import FabricNetwork

    return FabricNetwork.from_config(config)


def _is_fabric(obj: Any, module: str, name: str) -> bool:
    """``obj`` is an instance of the fabric class ``name`` (no fabric: nothing imported)."""
    loaded = sys.modules.get(f"{__package__}.{module}")
    return loaded is not None and isinstance(obj, getattr(loaded, name))


def read_network_file(path: str | os.PathLike) -> AnyConfig:
    """Read and validate a network file of any format (or a bundled network's name)."""
    file = resolve_config_path(path, kind="network")
    return parse_network_mapping(read_mapping(file, what="network config"), str(file))


def parse_network_mapping(data: Mapping[str, Any], source: str = "<dict>") -> AnyConfig:
    """Validate a network mapping of any format (see the module docstring)."""
    as_config(data, source=source, what="network")
    if "cluster" in data:   # a real machine: it runs NCCL's settings unless told otherwise
        from .clusters import as_cluster, cluster_mapping

        return as_cluster(parse_network_mapping(cluster_mapping(data, source), source))
    if "fabric" in data:
        from .fabric_config import parse_fabric_config

        return parse_fabric_config(data, source)
    if "infragraph" in data:
        from .infragraph import parse_infragraph_config

        return parse_infragraph_config(data, source)
    if is_astra1_network(data):
        return parse_astra1_network(data, source)
    return parse_network_config(data, source)
