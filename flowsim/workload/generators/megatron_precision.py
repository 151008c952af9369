"""Megatron-LM's flags for a precision per layer and per module (:mod:`.transformer_precision`),
read as Megatron-LM d98e8a64d reads them: ``--first-last-layers-bf16`` with
``--num-layers-at-start-in-bf16`` and ``--num-layers-at-end-in-bf16`` (each 1 by default, the
transformer config's), and ``--te-precision-config-file`` (a quantization recipe's YAML file,
relative to the spec file). The layers in BF16 count only in FP8 or FP4 training, as in
Megatron-Core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import config_error

#: the flags read here
FLAGS = ("first-last-layers-bf16", "num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16",
         "te-precision-config-file")


def precision_keys(flags: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``bf16_layers_at_start``, ``bf16_layers_at_end`` and ``quant_recipe`` keys the
    flags set."""
    keys: dict[str, Any] = {}
    low = {"fp8-format", "fp4-format"} & set(flags)
    if "first-last-layers-bf16" in flags and low:
        for end in ("start", "end"):
            flag = f"num-layers-at-{end}-in-bf16"
            value = str(flags.get(flag, 1))
            if not value.isdigit():
                raise config_error(where, f"--{flag}", "a count of layers (>= 0)", value)
            keys[f"bf16_layers_at_{end}"] = int(value)
    path = flags.get("te-precision-config-file")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise config_error(where, "--te-precision-config-file", "a recipe file's path",
                               path)
        keys["quant_recipe"] = path
    return keys
