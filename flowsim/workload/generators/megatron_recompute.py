"""Megatron-LM's recomputation flags as the transformer's ``recompute`` keys, read as
``megatron/training/arguments.py`` and the transformer config read them (at d98e8a64d):
``--recompute-granularity full`` with ``--recompute-method`` and ``--recompute-num-layers``
(:func:`.imported.recompute_method_keys`), ``--recompute-granularity selective`` with
``--recompute-modules`` (its default: ``core_attn``), ``--recompute-activations``, the
older switch for selective recomputation, which wins over the granularity, and
``--moe-layer-recompute``, the deprecated switch that adds ``moe`` to the modules. The legacy models
(``--use-legacy-models``, and Megatron-LM before 3.0) checkpoint the core attention only when
it is not flash-attn's (``ParallelAttention``), so selective recomputation re-runs nothing
beside ``--use-flash-attn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import config_error
from .imported import RECOMPUTE_MODULE_NAMES, recompute_method_keys, recompute_modules_keys

#: the flags read here
FLAGS = ("recompute-granularity", "recompute-method", "recompute-num-layers",
         "recompute-modules", "moe-layer-recompute")
#: what ``--recompute-modules`` (argparse's ``nargs='+'``) may take
MODULES = (*RECOMPUTE_MODULE_NAMES, "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")


def recompute_keys(flags: Mapping[str, Any], keys: Mapping[str, Any], where: str
                   ) -> dict[str, Any]:
    """The ``recompute`` keys the flags set, ``keys`` being what the switches set."""
    out: dict[str, Any] = {}
    granularity = flags.get("recompute-granularity")
    if granularity is not None and "recompute-activations" not in flags:   # that one wins
        if granularity not in ("full", "selective"):
            raise config_error(where, "--recompute-granularity", "full or selective",
                               granularity)
        out["recompute"] = granularity
    if "moe-layer-recompute" in flags:   # deprecated: selective with moe added
        if out.get("recompute", keys.get("recompute")) == "full":
            raise config_error(where, "--moe-layer-recompute", "not with "
                               "--recompute-granularity full (Megatron-Core refuses both)",
                               "set")
        out["recompute"] = "selective"
    recompute = out.get("recompute", keys.get("recompute"))
    if recompute == "full":
        out.update(recompute_method_keys(flags.get("recompute-method"),
                                         flags.get("recompute-num-layers"), where,
                                         ("--recompute-method", "--recompute-num-layers")))
    if recompute == "selective" and "recompute-modules" in flags:
        if not flags["recompute-modules"]:
            raise config_error(where, "--recompute-modules", "one or more modules (argparse "
                               "takes them with nargs='+')", "none")
        out.update(recompute_modules_keys(flags["recompute-modules"], where,
                                          "--recompute-modules"))
    if "moe-layer-recompute" in flags:   # Megatron-Core appends moe to the modules
        listed = out.get("recompute_modules") or (
            ["core_attn"] if out.get("recompute") == "selective" else [])
        out["recompute_modules"] = [*dict.fromkeys([*listed, "moe"])]
        out["recompute"] = "selective"
    legacy = "use-legacy-models" in flags or "checkpoint-activations" in flags
    if legacy and out.get("recompute", recompute) == "selective" and \
            keys.get("attention") in ("flash", "flash2"):   # no flash attention checkpointed
        rest = [m for m in out.get("recompute_modules") or ["core_attn"] if m != "core_attn"]
        out.update({"recompute_modules": rest} if rest else {"recompute": "none"})
        if not rest:
            out.pop("recompute_modules", None)
    return out
