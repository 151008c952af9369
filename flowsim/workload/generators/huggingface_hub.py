"""Where a Hugging Face model's ``config.json`` is on this machine, when ``config`` names the
model rather than the file: a model folder (a checkpoint downloaded or saved with
``save_pretrained``: ``config.json`` inside), or a Hub id (``meta-llama/Llama-3.1-8B``)
found in the local Hugging Face cache, as ``huggingface_hub`` lays it out
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; a repository
``models--<owner>--<name>`` with ``refs/main`` naming the snapshot whose ``config.json`` is
read). Nothing is downloaded: a Hub id not in the cache is one error saying where it was
looked for and the command that fetches the file."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import ConfigError

#: a Hub model id: an owner and a name (letters, digits, ``-``, ``_``, ``.``)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache() -> Path:
    """The folder ``huggingface_hub`` caches downloads in, by its own precedence:
    ``HF_HUB_CACHE``, the legacy ``HUGGINGFACE_HUB_CACHE``, else ``hub`` under ``HF_HOME``
    (default ``$XDG_CACHE_HOME/huggingface``, ``~/.cache/huggingface``)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def model_config_path(name: str, beside: Path, source: str) -> Path | None:
    """The ``config.json`` that ``name`` stands for.

    Parameters
    ----------
    name : str
        The spec's ``config``: a file's or a model folder's path, or a Hub id.
    beside : Path
        The folder relative paths are read from (the spec file's).
    source : str
        The spec, for messages.

    Returns
    -------
    Path or None
        The file inside a model folder, or in the Hub cache for a Hub id that names no file
        here; None when ``name`` is a file's path (read as it is).

    Raises
    ------
    ConfigError
        A model folder without ``config.json``; a Hub id the cache does not hold.
    """
    path = beside / name
    if path.is_dir():
        inside = path / "config.json"
        if not inside.is_file():
            raise ConfigError(f"{source}: key 'config': {path} is a folder without a "
                              "config.json (a model folder holds one)")
        return inside
    if path.exists() or not HUB_ID.match(name) or name.endswith(".json"):
        return None
    repo = hub_cache() / ("models--" + name.replace("/", "--"))
    found = _snapshot_config(repo)
    if found is None:
        raise ConfigError(
            f"{source}: key 'config': {name!r} is neither a file beside the spec nor a model "
            f"in the Hugging Face cache ({repo}); fetch its config with "
            f"'huggingface-cli download {name} config.json' (or give the file's path)")
    return found


def _snapshot_config(repo: Path) -> Path | None:
    """The cached ``config.json`` of the snapshot ``refs/main`` names, else of the newest
    snapshot holding one."""
    ref = repo / "refs" / "main"
    if ref.is_file():
        named = repo / "snapshots" / ref.read_text().strip() / "config.json"
        if named.is_file():
            return named
    configs = sorted(repo.glob("snapshots/*/config.json"), key=lambda p: p.stat().st_mtime)
    return configs[-1] if configs else None
