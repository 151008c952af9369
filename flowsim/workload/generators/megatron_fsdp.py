"""Megatron-FSDP's data-parallel settings and Megatron-Core's fine-grained activation
offloading as transformer keys, read alike from Megatron-LM's flags (:mod:`.megatron`) and
from Megatron-Bridge's ``ddp:`` and ``model:`` blocks (:mod:`.megatron_bridge`).

Megatron-FSDP (``use_megatron_fsdp``) shards what ``data_parallel_sharding_strategy`` names:
everything (``optim_grads_params``, its ZeRO-3: ``fsdp``), the optimizer state and
gradients or the state alone (priced as the distributed optimizer), or nothing (Megatron's
DDP). With ``num_distributed_optimizer_instances`` above one the data-parallel ranks form
that many replicas of a sharding group (``fsdp_replicas``), which all-reduce the gradient
shards after the last micro-batch, or with ``outer_dp_sharding_strategy: optim`` shard them
and the optimizer state further (``fsdp_outer``). Read from Megatron-LM 24bad8e67
(``megatron/core/distributed/fsdp/src/megatron_fsdp/``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ...errors import FlowsimWarning, config_error
from .transformer_choices import OFFLOAD_MODULES

#: ``data_parallel_sharding_strategy`` -> the key that prices it (None: Megatron's DDP)
SHARDING = {"optim_grads_params": "fsdp", "optim_grads": "distributed_optimizer",
            "optim": "distributed_optimizer", "no_shard": None}
#: ``outer_dp_sharding_strategy`` -> ``fsdp_outer``
OUTER = {"no_shard": "all_reduce_last", "optim": "optim"}
#: Megatron-LM's flags read here
FLAGS = ("use-megatron-fsdp", "data-parallel-sharding-strategy",
         "use-transformer-engine-op-fuser",
         "num-distributed-optimizer-instances", "outer-dp-sharding-strategy",
         "fine-grained-activation-offloading", "offload-modules", "min-offloaded-tensor-size",
         "fine-grained-offloading-max-inflight-offloads")


def megatron_fsdp_keys(strategy: Any, instances: Any, outer: Any, where: str,
                       names: tuple[str, str, str]) -> dict[str, Any]:
    """The keys of Megatron-FSDP with ``strategy`` (None: Megatron-LM's default,
    ``optim_grads_params``), ``instances`` replicas (None: one) and the replicas'
    ``outer`` strategy (None: ``no_shard``); ``names``: the three settings' names, for
    errors.

    Raises
    ------
    ConfigError
        A strategy Megatron-FSDP does not know, a replica count that is not a positive
        integer, or replicas of anything but full sharding (not modelled).
    """
    strategy = "optim_grads_params" if strategy is None else strategy
    outer = "no_shard" if outer is None else outer
    instances = 1 if instances is None else instances
    if strategy not in SHARDING:
        raise config_error(where, names[0], "one of " + ", ".join(SHARDING), strategy)
    if outer not in OUTER:
        raise config_error(where, names[2], "one of " + ", ".join(OUTER), outer)
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise config_error(where, names[1], "a positive integer", instances)
    key = SHARDING[strategy]
    keys: dict[str, Any] = {} if key is None else {key: True}
    if instances > 1:
        if key != "fsdp":
            raise config_error(where, names[1], f"1 unless {names[0]} is optim_grads_params "
                               "(replicas of a partial sharding: not modelled)", instances)
        keys.update(fsdp_replicas=instances, fsdp_outer=OUTER[outer])
    return keys


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


def bridge_fsdp_keys(ddp: Mapping[str, Any], model: Mapping[str, Any], where: str
                     ) -> dict[str, Any]:
    """Megatron-Bridge's ``ddp.use_megatron_fsdp`` and ``model.fine_grained_activation_
    offloading`` settings as keys (none without them)."""
    keys: dict[str, Any] = {}
    replicas = ddp.get("num_distributed_optimizer_instances")
    if not ddp.get("use_megatron_fsdp") and isinstance(replicas, int) and replicas > 1:
        warnings.warn(f"{where}: not modelled, left out: ddp.num_distributed_optimizer_"
                      "instances (the distributed optimizer's replicas)", FlowsimWarning,
                      stacklevel=4)
    if ddp.get("use_megatron_fsdp"):   # (MCore's config default strategy: no_shard)
        keys.update(megatron_fsdp_keys(
            ddp.get("data_parallel_sharding_strategy") or "no_shard",
            ddp.get("num_distributed_optimizer_instances"),
            ddp.get("outer_dp_sharding_strategy"), where,
            ("ddp.data_parallel_sharding_strategy", "ddp.num_distributed_optimizer_instances",
             "ddp.outer_dp_sharding_strategy")))
    keys.update(offload_keys(
        bool(model.get("fine_grained_activation_offloading")), model.get("offload_modules"),
        model.get("min_offloaded_tensor_size"),
        model.get("fine_grained_offloading_max_inflight_offloads"),
        model.get("use_transformer_engine_op_fuser"), where,
        ("model.fine_grained_activation_offloading", "model.offload_modules",
         "model.use_transformer_engine_op_fuser")))
    return keys


def flag_keys(flags: Mapping[str, str | None], where: str) -> dict[str, Any]:
    """Megatron-LM's ``--use-megatron-fsdp`` and ``--fine-grained-activation-offloading``
    flags (with the settings beside them) as keys; ``--num-distributed-optimizer-instances``
    without Megatron-FSDP (the distributed optimizer's partial replicas) is left out with a
    warning."""
    number = partial(_flag_int, flags, where)
    keys: dict[str, Any] = {}
    if "use-megatron-fsdp" in flags:   # (Megatron-LM's default strategy: ZeRO-3)
        keys.update(megatron_fsdp_keys(
            flags.get("data-parallel-sharding-strategy"),
            number("num-distributed-optimizer-instances"),
            flags.get("outer-dp-sharding-strategy"), where,
            ("--data-parallel-sharding-strategy", "--num-distributed-optimizer-instances",
             "--outer-dp-sharding-strategy")))
    elif (number("num-distributed-optimizer-instances") or 1) > 1:
        warnings.warn(f"{where}: not modelled, left out: --num-distributed-optimizer-"
                      "instances (the distributed optimizer's replicas)", FlowsimWarning,
                      stacklevel=4)
    modules = flags.get("offload-modules")
    keys.update(offload_keys(
        "fine-grained-activation-offloading" in flags,
        None if modules is None else modules.split(), number("min-offloaded-tensor-size"),
        number("fine-grained-offloading-max-inflight-offloads"),
        "use-transformer-engine-op-fuser" in flags, where,   # (absent: off, argparse's)
        ("--fine-grained-activation-offloading", "--offload-modules",
         "--use-transformer-engine-op-fuser")))
    return keys


def _flag_int(flags: Mapping[str, str | None], where: str, flag: str) -> int | None:
    value = flags.get(flag)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise config_error(where, f"--{flag}", "an integer", value) from None
