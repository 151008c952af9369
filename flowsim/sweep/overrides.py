"""How one axis value changes a sweep point: a key of its network, system or generator spec,
a key of its network's ``cluster:`` block, a point parameter, or a whole config."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..system.config import _COMPUTE_KEYS, _MODELLED, _NOT_MODELLED, IMPLEMENTATION_KEYS
from ..topology.network_config import NETWORK_KEYS

#: Top-level keys of ``base`` (and of axes that address them).
POINT_KEYS = ("network", "system", "collective", "size", "model", "dims", "root")
#: Top-level keys of a workload sweep's ``base``.
WORKLOAD_POINT_KEYS = ("network", "system", "workload", "iterations", "model")
SYSTEM_KEYS = set(_MODELLED) | set(_NOT_MODELLED) | set(_COMPUTE_KEYS) | set(
    IMPLEMENTATION_KEYS.values())
#: flowsim's default system (:class:`~flowsim.system.config.SystemConfig`'s defaults: ASTRA-
#: sim's Ring_4chunks example, ring in every dimension) as the keys that differ from an empty
#: system json's, so that a sweep without a system runs what ``flowsim run`` and
#: :func:`flowsim.simulate` run without one on a network that has no default of its own (an
#: empty mapping would be ASTRA-sim's defaults for absent keys: one chunk, baseline, no
#: local reduction cost)
DEFAULT_SYSTEM = {"preferred-dataset-splits": 4, "local-mem-bw": 1600,
                  "collective-optimization": "localBWAware"}
_KEY = re.compile(r"^(network|system|workload)\.([A-Za-z0-9_-]+)(?:\.([A-Za-z0-9_-]+))?"
                  r"(?:\[(\d{1,9})\])?$")


def config_key(key: str, value: Any) -> str:
    """The key of a whole-config axis value (``network: dgx_h100``) among the resolved
    configs of a :class:`SweepSpec`."""
    return json.dumps([key, value], sort_keys=True, default=str)


def apply_override(point: dict, key: str, value: Any, source: str,
                   configs: Mapping[str, Any] | None = None) -> None:
    """Set ``key`` (``size``, ``network.bandwidth[1]``, ``network.cluster.nodes``,
    ``network``, ...) of a resolved point in place (``configs``: the resolved configs a
    whole-config axis names)."""
    workload = "workload" in point
    top = WORKLOAD_POINT_KEYS if workload else POINT_KEYS
    if key in ("network", "system"):
        resolved = (configs or {}).get(config_key(key, value))
        if resolved is None:
            raise ConfigError(f"{source}: axis '{key}': {value!r} was not resolved when the "
                              f"spec was loaded")
        point[key] = copy.deepcopy(resolved)
        return
    if key in top:
        point[key] = value
        return
    match = _KEY.match(key)
    if match is None or (match.group(1) == "workload" and not workload):
        sections = "network.<key>[i] / network.cluster.<key> / system.<key>[i]" + (
            " / workload.<key>[i]" if workload else "")
        raise ConfigError(f"{source}: key '{key}': expected one of {', '.join(top)} or "
                          f"{sections}")
    section, name, sub, index = match.group(1), match.group(2), match.group(3), match.group(4)
    if sub is not None:
        config, name = _cluster_block(point, key, name, sub, source), sub
    elif section == "workload":
        if not isinstance(point["workload"], Mapping) or "generator" not in point["workload"]:
            raise ConfigError(f"{source}: key '{key}': workload keys can be varied only for a "
                              f"generator spec ({{generator: ..., ...}} or a YAML file holding "
                              f"one), found {point['workload']!r}")
        config = point[section]
    else:
        if section == "network" and "topology-name" in point["network"]:
            raise ConfigError(f"{source}: key '{key}': the network is ASTRA-sim 1.0's JSON, "
                              f"whose keys these are not; vary a 2.x network YAML or a "
                              f"cluster block")
        known = NETWORK_KEYS if section == "network" else SYSTEM_KEYS
        if name not in known:
            raise ConfigError(f"{source}: key '{key}': unknown {section} key '{name}' "
                              f"(expected one of {', '.join(sorted(known))})")
        config = point[section]
    if index is None:
        config[name] = copy.deepcopy(value)
        return
    current = config.get(name)
    if not isinstance(current, list):
        raise ConfigError(f"{source}: key '{key}': {section} key '{name}' is not a list in "
                          f"the base, found {current!r}")
    i = int(index)
    if i >= len(current):
        raise ConfigError(f"{source}: key '{key}': index {i} is past the end of {name} "
                          f"(length {len(current)})")
    current[i] = copy.deepcopy(value)


def _cluster_block(point: dict, key: str, name: str, sub: str, source: str) -> dict:
    """The ``cluster:`` block of a point's network, which ``network.cluster.<sub>`` sets."""
    from ..topology.clusters import CLUSTER_KEYS

    if not key.startswith("network.") or name != "cluster":
        raise ConfigError(f"{source}: key '{key}': a key inside a key is read only as "
                          f"network.cluster.<key> (a cluster block's key)")
    block = point["network"].get("cluster")
    if not isinstance(block, dict):
        raise ConfigError(f"{source}: key '{key}': the network it would set has no cluster "
                          f"block (a network with 'cluster:', such as dgx_h100)")
    if sub not in CLUSTER_KEYS:
        raise ConfigError(f"{source}: key '{key}': unknown cluster key '{sub}' (expected one "
                          f"of {', '.join(CLUSTER_KEYS)})")
    return block


def apply_settings(point: dict, settings: Any, source: str,
                   configs: Mapping[str, Any] | None = None) -> None:
    """Apply a point's settings in place: whole configs first, so that a key of one
    (``network.cluster.nodes``) applies to the config the point takes whatever the order of
    the axes; then a point without a system (its base gave none) takes its network's own
    default (a ``cluster:`` network's ``nccl``, as ``flowsim run`` does; else
    :data:`DEFAULT_SYSTEM`), which ``system.<key>`` settings change; then the other keys."""
    settings = list(settings)
    for key, value in settings:
        if key in ("network", "system"):
            apply_override(point, key, value, source, configs)
    if point.get("system") is None:
        from ..system.load import default_system_mapping

        point["system"] = default_system_mapping(point["network"]) or dict(DEFAULT_SYSTEM)
    for key, value in settings:
        if key not in ("network", "system"):
            apply_override(point, key, value, source, configs)


def whole_config_bases(base: dict, axes: Any, configs: Mapping[str, Any]) -> list[dict]:
    """``base`` with every combination of the whole configs the ``axes`` give (``base``
    alone when none does; ``configs``: the resolved configs, by :func:`config_key`)."""
    bases = [base]
    for kind in ("network", "system"):
        named = dict.fromkeys(config_key(kind, value) for axis in axes
                              for row in axis.values for key, value in zip(axis.keys, row)
                              if key == kind)
        if named:
            bases = [{**b, kind: configs[name]} for b in bases for name in named]
    return bases
