"""``load_system``: a system config from any of its forms (ASTRA-sim 2.x json, 1.0 txt, a
mapping, a bundled name), dispatched by format; ``system_for``: the one a run on a network
takes (its own default when it is given none)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._io import read_mapping
from ..errors import public_api
from ..resources import resolve_config_path
from .astra1 import read_astra1_system
from .config import SystemConfig, parse_system_config


def read_system_config(path: str | os.PathLike) -> SystemConfig:
    """Read and validate a system json file (or an ASTRA-sim 1.0 ``.txt`` system file)."""
    if isinstance(path, (str, os.PathLike)) and Path(path).suffix.lower() == ".txt":
        return read_astra1_system(path)
    return parse_system_config(read_mapping(path, what="system config"), source=str(Path(path)))


@public_api
def load_system(source: str | os.PathLike | Mapping[str, Any] | SystemConfig | None
                ) -> SystemConfig:
    """A system config from a path, a bundled name, a mapping, a config, or ``None`` (defaults).

    A path ending in ``.txt`` is read as an ASTRA-sim 1.0 system file
    (:func:`flowsim.system.astra1.parse_astra1_system`).
    """
    if source is None:
        return SystemConfig()
    if isinstance(source, SystemConfig):
        return source
    if isinstance(source, Mapping):
        return parse_system_config(source)
    return read_system_config(resolve_config_path(source, kind="system"))


def default_system_name(network: Any) -> str | None:
    """The bundled system a run on ``network`` (a built network) takes when it is given none:
    a ``cluster:`` preset's (``nccl``); ``None``: flowsim's default."""
    return getattr(getattr(network, "config", None), "system", None)


def system_for(system: Any, network: Any) -> SystemConfig:
    """The system config of a run on ``network`` (a built network): ``system`` in any form
    :func:`load_system` reads, or when it is ``None`` the network's own default
    (:func:`default_system_name`), else flowsim's."""
    if system is None:
        system = default_system_name(network)
    return load_system(system)


def default_system_mapping(network: Any) -> dict[str, Any] | None:
    """The keys of the bundled system a run on ``network`` (a network in any form
    :func:`flowsim.load_network` reads) takes when given none, as a mapping that ``--set
    system.<key>`` items and sweep axes change; ``None``: it has no default of its own, or
    it is not a valid network (the run's own read of it names the error)."""
    if isinstance(network, Mapping) and "cluster" not in network:
        return None   # only a cluster block names one: nothing to build
    from ..errors import ConfigError
    from ..topology import load_network

    try:
        name = default_system_name(load_network(network))
    except ConfigError:
        return None
    if name is None:
        return None
    return dict(read_mapping(resolve_config_path(name, kind="system"), what="system config"))
