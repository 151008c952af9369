"""``load_system``: a system config from any of its forms (ASTRA-sim 2.x json, 1.0 txt, a
mapping, a bundled name), dispatched by format."""

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
