"""Another tool's YAML training config, as the importers read it: the file (or the mapping
itself), the command-line overrides a launch script gives it, and its nested blocks.

NeMo's Hydra and LLM Foundry's OmegaConf both take command-line items ``a.b=value`` over the
YAML; :func:`apply_overrides` applies them as those tools do, so the run read is the run
launched.
"""

from __future__ import annotations

import copy
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
    if isinstance(overrides, str):
        items = shell_words(overrides, source, "overrides", "items")
    elif isinstance(overrides, list) and all(isinstance(o, str) for o in overrides):
        items = overrides
    else:
        raise config_error(source, "overrides", f"overrides ({example}) as one string or a "
                           "list", overrides)
    removal = "~" + example.partition("=")[0]
    out = copy.deepcopy(dict(config))
    for item in items:
        path, equals, value = item.lstrip("+~").partition("=")
        if not path or (not equals and not item.startswith("~")):
            raise config_error(source, "overrides", f"items like {example} or {removal}", item)
        *parents, last = path.split(".")
        block = out
        for name in parents:
            if not isinstance(block.get(name), dict):
                block[name] = {}
            block = block[name]
        if item.startswith("~"):
            block.pop(last, None)
        else:
            try:
                block[last] = yaml.safe_load(value)
            except yaml.YAMLError:
                block[last] = value
    return out


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
