"""The accelerator presets' short names, shared by the compute model's devices and the cluster
presets' interconnect facts (two layers that do not import each other)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: short name -> preset name (``a100``, ``h100`` and ``h800`` are the SXM 80 GB parts,
#: ``h200`` the SXM 141 GB part, ``b200`` the SXM part)
ALIASES: Mapping[str, str] = MappingProxyType({
    "a100": "a100_sxm_80gb", "h100": "h100_sxm_80gb", "h200": "h200_sxm_141gb",
    "h800": "h800_sxm_80gb", "b200": "b200_sxm"})


def preset_name(name: str) -> str:
    """The preset a device name stands for (case-insensitive; a short name's full one)."""
    return ALIASES.get(name.lower(), name.lower())
