"""``flowsim run --set KEY=VALUE`` (and ``flowsim collective``'s): one key of the network,
system or generator spec changed on the command line, in the key language of sweep axes
(``network.cluster.nodes=256``, ``workload.tp=4``, ``system.endpoint-delay=100``,
``network.bandwidth[1]=50``), so that a shell loop over configurations needs no file per
point."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


def parse_set_item(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with the value read as YAML (``256``, ``[100, 50]``, ``h100``)."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise ConfigError(f"argument --set: expected KEY=VALUE (e.g. network.cluster.nodes=256 "
                          f"or workload.tp=4), found {text!r}")
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed


def apply_set_items(args: argparse.Namespace) -> None:
    """Replace ``args.network`` / ``args.system`` / ``args.workload`` by their configs with
    the ``--set`` items applied (only the sections an item names are read as mappings; the
    others stay as given)."""
    items = [parse_set_item(text) for text in args.set]
    if not items:
        return
    from .sweep.overrides import apply_override
    from .sweep.spec import DEFAULT_SYSTEM, resolve_config, resolve_workload

    sections = {key: key.split(".", 1)[0].split("[", 1)[0] for key, _ in items}
    run = hasattr(args, "workload")   # flowsim run; else flowsim collective
    allowed = ("network", "system", "workload") if run else ("network", "system")
    for key, section in sections.items():
        if section not in allowed or "." not in key:
            raise ConfigError(f"argument --set: key '{key}': expected network.<key>, "
                              "network.cluster.<key>, system.<key>"
                              + (" or workload.<key>" if run else "")
                              + " (with an optional [i])")
    folder = Path.cwd()
    point: dict[str, Any] = {"network": args.network, "system": args.system}
    if run:
        point["workload"] = args.workload
    named = set(sections.values())
    if "network" in named:
        point["network"] = resolve_config(args.network, "network", folder, "--network")
    if "system" in named:
        point["system"] = dict(DEFAULT_SYSTEM) if args.system is None else \
            resolve_config(args.system, "system", folder, "--system")
    if "workload" in named:
        point["workload"] = resolve_workload(args.workload, folder, "--workload")
    for key, value in items:
        apply_override(point, key, value, "argument --set")
    if "system" in named and args.system is None:
        point["system"] = _default_system_with(point["system"])
    args.network, args.system = point["network"], point["system"]
    if run:
        args.workload = point["workload"]


def _default_system_with(keys: dict) -> Any:
    """flowsim's default system with the ``--set`` keys: its per-dimension algorithms stay
    "ring in every dimension" unless an item sets one (a system json without them would
    read as ASTRA-sim's one-entry list, and warn on every multi-dimensional network)."""
    from dataclasses import replace

    from .system.config import IMPLEMENTATION_KEYS, SystemConfig
    from .system.load import load_system

    parsed = load_system(keys)
    if any(key in keys for key in IMPLEMENTATION_KEYS.values()):
        return replace(parsed, source="argument --set")
    return replace(parsed, implementations=SystemConfig().implementations,
                   source="argument --set")
