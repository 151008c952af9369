"""Megatron-LM's optimizer flags as the transformer's ``optimizer``
(:mod:`.transformer_optimizer`), read as ``megatron/training/arguments.py`` reads them (at
d98e8a64d): ``--optimizer muon``, and ``dist_muon``, its deprecated spelling of ``muon`` with
the layer-wise distributed optimizer, which ``--use-distributed-optimizer`` also turns on
beside Muon (taking the place of the element-wise one). The layer-wise optimizer shards on its
parameter layout by default, ZeRO-1's collectives (``optimizer: muon`` with
``distributed_optimizer``); ``--no-use-layer-wise-param-layout`` keeps its first path
(``optimizer: dist_muon``). Other emerging optimizers are priced as Adam, with a warning.
Muon is priced with each tensor-parallel rank orthogonalizing its own shard
(``--muon-tp-mode blockwise``); Megatron-LM's default, ``duplicated``, gathers every matrix
whole onto every tensor-parallel rank, which is not modelled: refused with TP > 1.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import FlowsimWarning, config_error

#: the flags read here
FLAGS = ("optimizer", "no-use-layer-wise-param-layout", "muon-tp-mode")
#: Megatron-LM's optimizers that are not emerging ones
ELEMENT_WISE = ("adam", "sgd")


def optimizer_keys(flags: Mapping[str, Any], keys: Mapping[str, Any], where: str
                   ) -> dict[str, Any]:
    """The ``optimizer`` (and ``distributed_optimizer``) keys ``flags`` set, ``keys`` being
    what the other flags set."""
    name = flags.get("optimizer", "adam")
    if name in ELEMENT_WISE:
        return {}
    if name not in ("muon", "dist_muon"):
        warnings.warn(f"{where}: --optimizer {name}: priced as Adam", FlowsimWarning,
                      stacklevel=4)
        return {}
    mode = flags.get("muon-tp-mode", "duplicated")
    if keys.get("tp", 1) > 1 and mode != "blockwise":
        raise config_error(where, "--muon-tp-mode", "blockwise with TP > 1 (each rank "
                           "orthogonalizing its shard: what flowsim prices)", mode)
    if name == "muon" and not keys.get("distributed_optimizer"):
        return {"optimizer": "muon"}
    if "no-use-layer-wise-param-layout" in flags:   # the layer-wise optimizer's first path
        return {"optimizer": "dist_muon", "distributed_optimizer": False}
    return {"optimizer": "muon", "distributed_optimizer": True}
