"""Where the bundled configs live, and how a config argument becomes a file path.

A config argument is either a path to a file or the name of a bundled config (with or without
its extension), e.g. ``ring8`` for ``topologies/ring8.yml`` or ``dgx_h100`` for the cluster
preset ``topologies/clusters/dgx_h100.yml``. Bundled configs are looked up in
the source tree's ``topologies/`` (editable installs, the README's way) and then in
``<prefix>/share/flowsim/`` (wheel installs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .errors import ConfigError, ConfigTypeError, describe

_KIND_DIRS = {"network": "topologies", "system": "topologies/systems",
              "workload": "workloads", "model": "workloads/models"}
_KIND_SUFFIXES = {"network": (".yml", ".yaml"), "system": (".json", ".txt"),
                  "workload": (".txt", ".yml", ".yaml"), "model": (".json",)}
_SHARE_DIRS = {"network": "topologies", "system": "systems", "workload": "workloads",
               "model": "workloads/models"}
#: sub-folders of a kind's folder whose configs are bundled too (by their bare names)
_KIND_SUBFOLDERS = {"network": ("clusters",), "system": (), "workload": (), "model": ()}

#: Bundled network used when ``--network`` is not given (without ``--system`` the defaults of
#: :class:`flowsim.SystemConfig` apply: ASTRA-sim's Ring_4chunks settings in every dimension).
DEFAULT_NETWORK = "ring8"
#: Bundled workload ``flowsim run`` runs when ``--workload`` is not given.
DEFAULT_WORKLOAD = "resnet50_dp"


def bundled_dir(kind: str) -> Path:
    """Folder holding the bundled configs of ``kind`` (``"network"``, ``"system"``,
    ``"workload"`` or ``"model"``: Hugging Face model configs)."""
    source_tree = Path(__file__).resolve().parent.parent / _KIND_DIRS[kind]
    if source_tree.is_dir():
        return source_tree
    return Path(sys.prefix) / "share" / "flowsim" / _SHARE_DIRS[kind]


def bundled_names(kind: str) -> list[str]:
    """Names of the bundled configs of ``kind``, sorted."""
    return sorted(p.stem for p in _bundled_files(kind))


def _bundled_files(kind: str) -> list[Path]:
    """The bundled config files of ``kind``, its folder's and then its sub-folders'."""
    top = bundled_dir(kind)
    out = []
    for folder in (top, *(top / sub for sub in _KIND_SUBFOLDERS[kind])):
        if folder.is_dir():
            out += sorted(p for p in folder.iterdir() if p.suffix in _KIND_SUFFIXES[kind])
    return out


def resolve_config_path(value: str | os.PathLike, *, kind: str) -> Path:
    """Turn a path or a bundled config name into an existing file path."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigTypeError(f"argument '{kind}': expected a file path or a bundled {kind} "
                              f"name, found {describe(value)}")
    path = Path(value)
    if path.is_file():
        return path
    if path.is_dir():
        raise ConfigError(f"{value}: is a directory, not a {kind} config file")
    # a bare name (no folder, no extension) may name a bundled config
    if path.name == str(value) and not path.suffix:
        for candidate in _bundled_files(kind):
            if candidate.stem == path.name:
                return candidate
    names = ", ".join(bundled_names(kind)) or "none found"
    raise ConfigError(f"{value}: {kind} config not found (expected a file path or a bundled "
                      f"name: {names})")
