"""Reading user files safely: YAML through ``safe_load`` and JSON, errors naming the file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


def read_text(path: str | os.PathLike, what: str) -> str:
    """A text file's contents; a missing or unreadable file is a :class:`ConfigError`
    naming it and ``what`` it should hold."""
    file = Path(path)
    try:
        return file.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{file}: {what} file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read {what}: {exc}") from None


def read_mapping(path: str | os.PathLike, *, what: str) -> dict[str, Any]:
    """Read a YAML or JSON file whose top level must be a mapping.

    Parameters
    ----------
    path : path-like
        The file. ``.json`` files are read as JSON, everything else as YAML (a superset of JSON).
    what : str
        What the file should hold, for error messages (e.g. ``"network config"``).
    """
    file = Path(path)
    text = read_text(file, what)
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}: JSON syntax error at line {exc.lineno}: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{file}: YAML syntax error{line}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of keys to values at the top level "
                          f"of the {what}, found {type(data).__name__}")
    return data


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so no half file remains."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so no half file remains."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
