"""Megatron-Core's fine-grained activation offloading (:mod:`.transformer_module_offload`)
as transformer keys, read alike from Megatron-LM's flags (:mod:`.megatron`) and from
Megatron-Bridge's ``model:`` block (:mod:`.megatron_bridge`): the switch with the modules,
the tensor size limit and the in-flight cap (Megatron-LM 24bad8e67's ``TransformerConfig``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import config_error
from .imported import flag_int
from .transformer_choices import OFFLOAD_MODULES

#: Megatron-LM's flags read here
FLAGS = ("fine-grained-activation-offloading", "offload-modules", "min-offloaded-tensor-size",
         "fine-grained-offloading-max-inflight-offloads", "use-transformer-engine-op-fuser")


def offload_keys(enabled: bool, modules: Any, min_elements: Any, max_inflight: Any,
                 op_fuser: bool | None, where: str, names: tuple[str, str, str]
                 ) -> dict[str, Any]:
    """The keys of fine-grained activation offloading when ``enabled``, of ``modules``
    (``names``: the switch's, the modules' and the op fuser's settings, for errors); the
    tensor size limit and the in-flight cap as given (None: Megatron-Core's defaults);
    ``op_fuser``: Transformer Engine's op fuser on, off, or not said.

    Raises
    ------
    ConfigError
        No modules, a module Megatron-Core does not name, or ``fused_group_mlp`` with the
        op fuser off (Megatron-Core refuses both).
    """
    if not enabled:
        return {}
    listed: Sequence[Any] = [modules] if isinstance(modules, str) else list(modules or [])
    if not listed:
        raise config_error(where, names[1], f"modules to offload (with {names[0]})", modules)
    unknown = [m for m in listed if m not in OFFLOAD_MODULES]
    if unknown:
        raise config_error(where, names[1], "a list of " + ", ".join(OFFLOAD_MODULES),
                           unknown[0])
    keys: dict[str, Any] = {"offload_modules": list(listed)}
    if "fused_group_mlp" in listed:   # a module only Transformer Engine's fused grouped MLP
        if op_fuser is False:   # has (the op fuser's): priced as that kernel
            raise config_error(where, names[2], f"set with {names[1]} fused_group_mlp "
                               "(Megatron-Core refuses it without)", op_fuser)
        keys["fused_grouped_mlp"] = True
    for key, value in (("offload_min_elements", min_elements),
                       ("offload_max_inflight", max_inflight)):
        if value is not None:
            keys[key] = value
    return keys


def bridge_offload_keys(model: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Megatron-Bridge's ``model.fine_grained_activation_offloading`` and its settings as
    keys (none without it)."""
    return offload_keys(
        bool(model.get("fine_grained_activation_offloading")), model.get("offload_modules"),
        model.get("min_offloaded_tensor_size"),
        model.get("fine_grained_offloading_max_inflight_offloads"),
        model.get("use_transformer_engine_op_fuser"), where,
        ("model.fine_grained_activation_offloading", "model.offload_modules",
         "model.use_transformer_engine_op_fuser"))


def flag_offload_keys(flags: Mapping[str, str | None], where: str) -> dict[str, Any]:
    """Megatron-LM's ``--fine-grained-activation-offloading`` and the flags beside it as
    keys (an absent ``--use-transformer-engine-op-fuser`` is off, argparse's default)."""
    modules = flags.get("offload-modules")
    return offload_keys(
        "fine-grained-activation-offloading" in flags,
        None if modules is None else modules.split(),
        flag_int(flags, where, "min-offloaded-tensor-size"),
        flag_int(flags, where, "fine-grained-offloading-max-inflight-offloads"),
        "use-transformer-engine-op-fuser" in flags, where,
        ("--fine-grained-activation-offloading", "--offload-modules",
         "--use-transformer-engine-op-fuser"))
