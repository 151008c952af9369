"""Reading and writing user files safely.

Reading: :func:`read_text` (UTF-8, one clear error naming the file) and :func:`read_data` /
:func:`read_mapping` (YAML or JSON) are the only ways flowsim reads a structured file a user
hands it. They bound what a file can make flowsim do before any value is looked at:

* size: at most :data:`MAX_FILE_BYTES`;
* nesting depth: at most :data:`MAX_DEPTH` (deeper YAML or JSON is a ConfigError, not a
  ``RecursionError``);
* node count *after* expanding YAML aliases and merge keys: at most :data:`MAX_NODES`, so
  an alias bomb ("billion laughs") is refused from its small node graph, never expanded;
  recursive aliases are refused;
* duplicate keys in a mapping are an error naming the key and line (YAML and JSON);
* integers too long for Python's int-from-text limit are an error, not a ``ValueError``.

YAML goes through a subclass of PyYAML's ``SafeLoader`` only (no Python object tags); a
date-like scalar (``2024-01-01``) stays text, as no config value is a date.

Writing: :func:`atomic_output` and, on top of it, :func:`write_text_atomic` and
:func:`write_bytes_atomic`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ._atomic import atomic_output, check_target, write_bytes_atomic, write_text_atomic
from .errors import ConfigError, ConfigTypeError, describe

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_NODES", "atomic_output", "check_structure",
           "check_target", "parse_data", "read_data", "read_mapping", "read_text",
           "write_bytes_atomic", "write_text_atomic"]

#: Largest structured or text file flowsim reads (bytes).
MAX_FILE_BYTES = 64 << 20
#: Deepest nesting of lists and mappings in a YAML or JSON file.
MAX_DEPTH = 64
#: Most values (scalars, lists, mappings, keys) a YAML or JSON file may hold once its
#: aliases are expanded.
MAX_NODES = 1_000_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
#: Longest integer a mapping built in Python may hold (Python's own limit for reading and
#: printing ints is 4300 digits).
_MAX_INT_DIGITS = 4000
_MAX_INT_BITS = int(_MAX_INT_DIGITS * 3.3219)


def read_text(path: str | os.PathLike, what: str) -> str:
    """A text file's contents, decoded as UTF-8.

    A missing, unreadable, too large or non-UTF-8 file is a :class:`ConfigError` naming it
    and ``what`` it should hold.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigTypeError(f"expected a path to a {what} file, found {describe(path)}")
    file = Path(path)
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{file}: {what} file is larger than {MAX_FILE_BYTES >> 20} MiB")
        data = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{file}: {what} file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{file}: is a directory, expected a {what} file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ConfigError(f"{file}: cannot read {what}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{file}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line "
                          f"{line}); expected a {what}") from None


def read_mapping(path: str | os.PathLike, *, what: str) -> dict[str, Any]:
    """Read a YAML or JSON file whose top level must be a mapping (see :func:`read_data`)."""
    data = read_data(path, what=what)
    file = Path(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of keys to values at the top level "
                          f"of the {what}, found {type(data).__name__}")
    return data


def read_data(path: str | os.PathLike, *, what: str) -> Any:
    """Read a YAML or JSON file with the bounds of the module docstring.

    Parameters
    ----------
    path : path-like
        The file. ``.json`` files are read as JSON, everything else as YAML (a superset of
        JSON).
    what : str
        What the file should hold, for error messages (e.g. ``"network config"``).
    """
    text = read_text(path, what)
    file = Path(path)
    return parse_data(text, source=str(file), json_syntax=file.suffix.lower() == ".json")


def parse_data(text: str, *, source: str, json_syntax: bool = False) -> Any:
    """Parse YAML (or, with ``json_syntax``, JSON) text with the bounds of the module
    docstring; errors name ``source``."""
    try:
        if json_syntax:
            data = json.loads(text, object_pairs_hook=_unique_pairs)
            check_structure(data, source)
            return data
        return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader subclass
    except _Refused as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: JSON syntax error at line {exc.lineno}: "
                          f"{exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}: YAML syntax error{line}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # e.g. Python's limit on digits in an int read from text
        raise ConfigError(f"{source}: unreadable value: {str(exc).splitlines()[0]}") from None


def check_structure(data: Any, source: str, *, max_depth: int = MAX_DEPTH,
                    max_nodes: int = MAX_NODES) -> None:
    """Refuse nested lists / mappings (dicts, lists, tuples) deeper than ``max_depth``, with
    more than ``max_nodes`` values once shared references are expanded, or holding
    themselves; for mappings built in Python (``flowsim.sweep({...})``) and parsed JSON."""
    def children(value: Any) -> list[Any]:
        if isinstance(value, dict):
            return [v for pair in value.items() for v in pair]
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise _Refused(f"an integer of more than {_MAX_INT_DIGITS} digits")
        return []

    try:
        _check_expansion(data, children, max_depth, max_nodes)
    except _Refused as exc:
        raise ConfigError(f"{source}: {exc}") from None


# ------------------------------------------------------------------------------ internals
class _Refused(Exception):
    """A file exceeds a bound (depth, node count, duplicate key); becomes a ConfigError."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON object hook: a key given twice is an error (JSON would keep the last one)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {describe(key)} (each key may appear once)")
        out[key] = value
    return out


def _check_expansion(root: Any, children: Callable[[Any], list[Any]], max_depth: int,
                     max_nodes: int) -> None:
    """Count the values of ``root`` as if every shared reference were expanded, and its
    depth, in time proportional to the *unexpanded* graph (one visit per distinct value)."""
    done: dict[int, tuple[int, int]] = {}   # id -> (expanded count, depth)
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        value, finished = stack.pop()
        key = id(value)
        if finished:
            kids = [done[id(c)] for c in children(value)]
            count = 1 + sum(k[0] for k in kids)
            depth = 1 + max((k[1] for k in kids), default=0)
            if depth > max_depth:
                raise _Refused(f"nested more than {max_depth} levels deep")
            if count > max_nodes:
                raise _Refused(f"more than {max_nodes} values once its aliases are expanded "
                               f"(an alias bomb?)")
            done[key] = (count, depth)
            on_path.discard(key)
            continue
        if key in done:
            continue
        if key in on_path:
            raise _Refused("a list or mapping contains itself (recursive alias)")
        on_path.add(key)
        stack.append((value, True))
        for child in children(value):
            if id(child) in on_path:
                raise _Refused("a list or mapping contains itself (recursive alias)")
            if id(child) not in done:
                stack.append((child, False))


def _node_children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's ``SafeLoader`` with bounded nesting, bounded alias expansion and an error
    for duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # composing recurses once per level: stop long before Python's recursion limit
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> MappingNode:  # anchor: str or None
        node = super().compose_mapping_node(anchor)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue   # merged keys may be overridden; complex keys fail later
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise _Refused(f"duplicate key {describe(key)} at line "
                               f"{key_node.start_mark.line + 1} (each key may appear once)")
            seen.add(key)
        return node

    def get_single_node(self) -> Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node, _node_children, MAX_DEPTH, MAX_NODES)
        return node


# no config value is a date: keep date-like scalars as the text they are
def _timestamp_as_text(loader: yaml.SafeLoader, node: ScalarNode) -> Any:
    return loader.construct_scalar(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


def json_text(value: Any) -> str:
    """``value`` as strict JSON (RFC 8259 has no NaN or Infinity): non-finite floats become
    ``null`` and numpy arrays and scalars Python values, so ``jq`` and JavaScript read it."""
    return json.dumps(_json_value(value), allow_nan=False)


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if not isinstance(value, (str, bytes, int, float)) and hasattr(value, "tolist"):
        return _json_value(value.tolist())   # numpy arrays and scalars, without numpy
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
