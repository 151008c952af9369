"""Another tool's YAML training config, as the importers read it: the file (or the mapping
itself), the command-line overrides a launch script gives it, and its nested blocks.

NeMo's Hydra and LLM Foundry's OmegaConf both take command-line items ``a.b=value`` over the
YAML; :func:`apply_overrides` applies them as those tools do, so the run read is the run
launched. NeMo-Run's items (NeMo 2: Python literals, ``+=``-style operators) are read by
:func:`apply_nemo_run_items`.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Mapping
from typing import Any

import yaml

from ...errors import ConfigError, config_error
from .imported import read_beside, shell_words


def load_config(config: Any, source: str, *, what: str, expected: str
                ) -> tuple[str, Mapping[str, Any]]:
    """The config mapping (``config`` itself, or the YAML file it names relative to the spec
    file ``source``), and where it came from for messages.

    Raises
    ------
    ConfigError
        The file cannot be read, is not YAML, or does not hold a mapping (``what`` the key
        should be, ``expected`` what the file should hold).
    """
    if isinstance(config, Mapping):
        return f"{source}: config", config
    path, text = read_beside(config, source, "config", what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected {expected}, found {type(data).__name__}")
    return str(path), data


def apply_overrides(config: Mapping[str, Any], overrides: Any, source: str, *,
                    example: str) -> Mapping[str, Any]:
    """``config`` with command-line overrides applied: ``a.b=value`` (Hydra's ``+`` and
    ``++`` prefixes too) sets a key, the value read as YAML; ``~a.b`` removes one.
    ``overrides`` is one string (split as a shell would) or a list of items; ``example`` is
    an item as the tool's users write it, for messages."""
    if overrides is None:
        return config
    items = override_items(overrides, source, f"overrides ({example})")
    removal = "~" + example.partition("=")[0]
    out = copy.deepcopy(dict(config))
    for item in items:
        path, equals, value = item.lstrip("+~").partition("=")
        if not path or (not equals and not item.startswith("~")):
            raise config_error(source, "overrides", f"items like {example} or {removal}", item)
        *parents, last = path.split(".")
        block = nested_block(out, parents)
        if item.startswith("~"):
            block.pop(last, None)
        else:
            try:
                block[last] = yaml.safe_load(value)
            except yaml.YAMLError:
                block[last] = value
    return out


def override_items(overrides: Any, source: str, what: str) -> list[str]:
    """The command-line items ``overrides`` gives: one string split as a shell would, or a
    list of strings (``what`` they should be, for the error)."""
    if isinstance(overrides, str):
        return shell_words(overrides, source, "overrides", "items")
    if isinstance(overrides, list) and all(isinstance(o, str) for o in overrides):
        return overrides
    raise config_error(source, "overrides", f"{what} as one string or a list", overrides)


def nested_block(config: dict[str, Any], path: list[str]) -> dict[str, Any]:
    """The nested block at ``path``, made (or made a block) where an item needs it."""
    block = config
    for name in path:
        if not isinstance(block.get(name), dict):
            block[name] = {}
        block = block[name]
    return block


def config_block(config: Mapping[str, Any], key: str, where: str, *, what: str
                 ) -> Mapping[str, Any]:
    """The nested block ``key`` of ``config`` (absent or null: empty).

    Raises
    ------
    ConfigError
        The block is not a mapping (``what`` it should be), naming ``where`` and ``key``.
    """
    block = config.get(key)
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise config_error(where, key, f"a mapping ({what})", block)
    return block


#: NeMo-Run's command-line item: a dotted path (``[i]`` indexes a list), an operator, a value
_NEMO_RUN_ITEM = re.compile(r"^(?P<path>[A-Za-z_][\w.\[\]]*?)(?P<op>[+\-*/]?=)(?P<value>.*)$")


def nemo_run_value(text: str) -> Any:
    """A value as NeMo-Run's command line reads it: a Python literal (``8``, ``(4096, 0)``,
    ``'x'``), ``true`` / ``false`` / ``none`` / ``null`` in any case, else the text itself
    (a factory's name such as ``bf16_with_fp8_mixed``)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        lowered = text.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered in ("none", "null"):
            return None
        return text


def apply_nemo_run_items(config: Mapping[str, Any], overrides: Any, source: str, *,
                         example: str) -> tuple[dict[str, Any], list[str]]:
    """``config`` after NeMo-Run's command-line items (``a.b=value``, and ``+=``, ``-=``,
    ``*=``, ``/=`` on numbers), and the paths that index a list (``callbacks[1].x``: not
    applied, returned for the caller to name)."""
    if overrides is None:
        return copy.deepcopy(dict(config)), []
    items = override_items(overrides, source, f"NeMo-Run's items ({example})")
    out = copy.deepcopy(dict(config))
    indexed = []
    for item in items:
        match = _NEMO_RUN_ITEM.match(item)
        if match is None:
            raise config_error(source, "overrides", f"items like {example}", item)
        path, op, value = match["path"], match["op"], nemo_run_value(match["value"])
        if "[" in path:
            indexed.append(path)
            continue
        *parents, last = path.split(".")
        block = nested_block(out, parents)
        if op != "=":
            old = block.get(last)
            if not _number(old) or not _number(value):
                raise config_error(source, f"overrides ({path})", f"a number on both sides of "
                                   f"{op}", f"{old!r} {op} {value!r}")
            value = {"+=": old + value, "-=": old - value, "*=": old * value,
                     "/=": old / value if value else float("inf")}[op]
        block[last] = value
    return out, indexed


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
