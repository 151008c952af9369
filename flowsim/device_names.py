"""The accelerator presets' names, shared by the compute model's devices and the cluster
presets' interconnect facts (two layers that do not import each other).

A device may be named by its preset (``h100_sxm_80gb``), by a short name (``h100``) or as the
vendor's tools print it (``nvidia-smi``, a PyTorch / Kineto trace's device properties, a
cluster inventory): ``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB``, ``H100 SXM5``,
``NVIDIA GB200``. Such a name stands for a preset when its chip, form factor and memory
agree with it; the PCIe and NVL cards and Grace Hopper's GH200 are other devices (other
clocks, power limits, SM counts or memory), which no preset stands for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

#: short name -> preset name (``a100``, ``h100`` and ``h800`` are the SXM 80 GB parts,
#: ``h200`` the SXM 141 GB part, ``b200`` and ``b300`` the SXM parts)
ALIASES: Mapping[str, str] = MappingProxyType({
    "a100": "a100_sxm_80gb", "h100": "h100_sxm_80gb", "h200": "h200_sxm_141gb",
    "h800": "h800_sxm_80gb", "b200": "b200_sxm", "b300": "b300_sxm"})

#: chip -> {memory in GB the vendor names it with: preset}; a name without its memory is the
#: short name's part
_MEMORY: Mapping[str, Mapping[int, str]] = MappingProxyType({
    "a100": {40: "a100_sxm_40gb", 80: "a100_sxm_80gb"},
    "h100": {80: "h100_sxm_80gb"},
    "h200": {141: "h200_sxm_141gb"},
    "h800": {80: "h800_sxm_80gb"},
    "b200": {180: "b200_sxm", 192: "b200_sxm"},
    "gb200": {186: "gb200", 192: "gb200"},
    "b300": {288: "b300_sxm"},
    "gb300": {288: "gb300"},
})
#: words of a vendor's name that say nothing about which part it is
_NOISE = frozenset({"nvidia", "tesla", "gpu", "sxm", "tensor", "core", "hgx"})
#: chip -> the words of its own form factor, memory and systems (a word of another chip's
#: makes a name that stands for no part: "A100 SXM5", "B200 HBM2"); DGX A100 shipped with
#: 40 GB and 80 GB parts, so it needs its memory
_OWN_WORDS: Mapping[str, frozenset[str]] = MappingProxyType({
    "a100": frozenset({"sxm4", "hbm2", "hbm2e", "dgx"}),
    "h100": frozenset({"sxm5", "hbm3", "dgx"}),
    "h200": frozenset({"sxm5", "hbm3e", "dgx"}),
    "h800": frozenset({"sxm5", "hbm3"}),
    "b200": frozenset({"sxm6", "hbm3e", "dgx"}),
    "gb200": frozenset({"hbm3e", "nvl72", "nvl36", "superchip", "dgx"}),
    # nvidia-smi names the air-cooled HGX part "NVIDIA B300 SXM6 AC"
    "b300": frozenset({"sxm6", "ac", "hbm3e", "dgx"}),
    "gb300": frozenset({"hbm3e", "nvl72", "superchip", "dgx"}),
})
#: words naming another form factor than the presets' (an add-in card of lower power)
_OTHER_FORMS = frozenset({"pcie", "nvl"})


def preset_name(name: str) -> str:
    """The preset a device name stands for (case-insensitive; a short name's full one; a
    vendor's name of the same part); a name that stands for none comes back lower-cased, so
    that the caller's check refuses it."""
    lowered = name.strip().lower()
    if lowered in ALIASES:
        return ALIASES[lowered]
    return _vendor_name(lowered) or lowered


def _vendor_name(lowered: str) -> str | None:
    """The preset a vendor-style name stands for, or None."""
    words = [w for w in re.split(r"[\s_\-/,()]+", lowered) if w]
    chips = [w for w in words if w in _MEMORY]
    if len(chips) != 1 or any(w in _OTHER_FORMS for w in words):
        return None
    chip = chips[0]
    memory = None
    for word in words:
        if word == chip or word in _NOISE or word in _OWN_WORDS[chip]:
            continue
        size = re.fullmatch(r"(\d+)(gb|g)?", word)
        if size is None or memory is not None:
            return None   # a word that names something else: not a name flowsim can read
        memory = int(size.group(1))
    if memory is None:   # DGX A100: its 40 GB or its 80 GB part, which only memory says
        return None if "dgx" in words and chip == "a100" else ALIASES.get(chip, chip)
    return _MEMORY[chip].get(memory)
