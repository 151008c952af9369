"""Megatron-FSDP's data-parallel settings as transformer keys, read alike from Megatron-LM's
flags (:mod:`.megatron`) and from Megatron-Bridge's ``ddp:`` block (:mod:`.megatron_bridge`).

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
from collections.abc import Mapping
from typing import Any

from ...errors import FlowsimWarning, config_error
from .imported import flag_int

#: ``data_parallel_sharding_strategy`` -> the key that prices it (None: Megatron's DDP)
SHARDING = {"optim_grads_params": "fsdp", "optim_grads": "distributed_optimizer",
            "optim": "distributed_optimizer", "no_shard": None}
#: ``outer_dp_sharding_strategy`` -> ``fsdp_outer``
OUTER = {"no_shard": "all_reduce_last", "optim": "optim"}
#: Megatron-LM's flags read here
FLAGS = ("use-megatron-fsdp", "data-parallel-sharding-strategy",
         "num-distributed-optimizer-instances", "outer-dp-sharding-strategy")


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
    if key == "fsdp":   # its own buffers, not PyTorch's FSDP2
        keys["fsdp_impl"] = "megatron"
    if instances > 1:
        if key != "fsdp":
            raise config_error(where, names[1], f"1 unless {names[0]} is optim_grads_params "
                               "(replicas of a partial sharding: not modelled)", instances)
        keys.update(fsdp_replicas=instances, fsdp_outer=OUTER[outer])
    return keys


def bridge_fsdp_keys(ddp: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Megatron-Bridge's ``ddp.use_megatron_fsdp`` and its settings as keys (none without
    it; the distributed optimizer's replicas without it are left out with a warning)."""
    replicas = ddp.get("num_distributed_optimizer_instances")
    if not ddp.get("use_megatron_fsdp"):
        if isinstance(replicas, int) and replicas > 1:
            _replicas_warning(where, "ddp.num_distributed_optimizer_instances")
        return {}
    return megatron_fsdp_keys(   # (Megatron-Core's config default strategy: no_shard)
        ddp.get("data_parallel_sharding_strategy") or "no_shard", replicas,
        ddp.get("outer_dp_sharding_strategy"), where,
        ("ddp.data_parallel_sharding_strategy", "ddp.num_distributed_optimizer_instances",
         "ddp.outer_dp_sharding_strategy"))


def flag_fsdp_keys(flags: Mapping[str, str | None], where: str) -> dict[str, Any]:
    """Megatron-LM's ``--use-megatron-fsdp`` and the flags beside it as keys (none without
    it; ``--num-distributed-optimizer-instances`` without it is left out with a warning)."""
    replicas = flag_int(flags, where, "num-distributed-optimizer-instances")
    if "use-megatron-fsdp" not in flags:
        if (replicas or 1) > 1:
            _replicas_warning(where, "--num-distributed-optimizer-instances")
        return {}
    return megatron_fsdp_keys(   # (Megatron-LM's default strategy: ZeRO-3)
        flags.get("data-parallel-sharding-strategy"), replicas,
        flags.get("outer-dp-sharding-strategy"), where,
        ("--data-parallel-sharding-strategy", "--num-distributed-optimizer-instances",
         "--outer-dp-sharding-strategy"))


def _replicas_warning(where: str, name: str) -> None:
    warnings.warn(f"{where}: not modelled, left out: {name} (the distributed optimizer's "
                  "replicas)", FlowsimWarning, stacklevel=5)
