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
    if isinstance(parsed, str):   # YAML 1.1 reads 1e3 as text: a shell user means a number
        try:
            parsed = float(parsed) if any(c in parsed for c in ".eE") else int(parsed)
        except ValueError:
            pass
    return key.strip(), parsed


def apply_set_items(args: argparse.Namespace, *, workload: bool) -> None:
    """Replace ``args.network`` / ``args.system`` (and with ``workload``, ``flowsim run``'s
    ``args.workload``) by their configs with the ``--set`` items applied, checked here so
    that an error names the items (only the sections an item names are read as mappings;
    the others stay as given); ``args.network_name`` / ``args.system_name`` say what was
    given, for the record."""
    args.network_name, args.system_name = str(args.network), str(args.system or "default")
    args.system_given = args.system is not None
    items = [parse_set_item(text) for text in args.set]
    if not items:
        return
    from .sweep.overrides import DEFAULT_SYSTEM, apply_override
    from .sweep.spec import resolve_config, resolve_workload
    from .system.load import default_system_mapping

    allowed = ("network", "system", "workload") if workload else ("network", "system")
    by_section: dict[str, list[str]] = {}
    for (key, _), text in zip(items, args.set):
        section = key.split(".", 1)[0].split("[", 1)[0]
        if section not in allowed or "." not in key:
            raise ConfigError(f"argument --set: key '{key}': expected network.<key>, "
                              "network.cluster.<key>, system.<key>"
                              + (" or workload.<key>" if workload else "")
                              + " (with an optional [i])")
        by_section.setdefault(section, []).append(text)
    folder = Path.cwd()
    point: dict[str, Any] = {"network": args.network, "system": args.system}
    if workload:
        point["workload"] = args.workload
    if "network" in by_section:
        point["network"] = resolve_config(args.network, "network", folder, "--network")
    if "workload" in by_section:
        point["workload"] = resolve_workload(args.workload, folder, "--workload")
    system_items = [(key, value) for key, value in items if key.startswith("system")]
    for key, value in items:   # the network's first: without --system it sets the system's
        if not key.startswith("system"):
            apply_override(point, key, value, "argument --set")
    network_default = None
    if system_items:
        if args.system is None:
            network_default = default_system_mapping(point["network"])
        point["system"] = resolve_config(args.system, "system", folder, "--system") \
            if args.system is not None else network_default or dict(DEFAULT_SYSTEM)
    for key, value in system_items:
        apply_override(point, key, value, "argument --set")
    _check_sections(point, by_section)
    if system_items and args.system is None and network_default is None:
        point["system"] = _default_system_with(point["system"])
    args.network, args.system = point["network"], point["system"]
    if workload:
        args.workload = point["workload"]
    for section, texts in by_section.items():
        if section in ("network", "system"):
            setattr(args, f"{section}_name", getattr(args, f"{section}_name") + " with "
                    + ", ".join(texts))


def _check_sections(point: dict, by_section: dict[str, list[str]]) -> None:
    """The network and system the items made, read now: an error names the items (a
    config read later would be only ``<dict>``); built networks are cached, so the run's
    own read is free."""
    from .system.load import load_system
    from .topology import load_network

    for section, load in (("network", load_network), ("system", load_system)):
        if section in by_section:
            try:
                load(point[section])
            except ConfigError as exc:
                text = str(exc).removeprefix("<dict>: ")
                raise ConfigError(f"argument --set {', '.join(by_section[section])}: "
                                  f"{text}") from None


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
