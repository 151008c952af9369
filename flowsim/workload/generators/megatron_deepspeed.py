"""Megatron-LM's older flags and Megatron-DeepSpeed's own, for :mod:`.megatron`.

Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed, and BigScience's fork that trained BLOOM)
is Megatron-LM's command line run by DeepSpeed (``--deepspeed``). Read here:

* ``--checkpoint-activations``: every layer recomputed (Megatron-LM's name before its 3.0,
  kept by Megatron-DeepSpeed for DeepSpeed's pipeline, whose ``activation_checkpoint_interval``
  it sets to 1); Megatron-LM 3.0's ``--activations-checkpoint-method`` and
  ``--activations-checkpoint-num-layers`` are today's ``--recompute-method`` and
  ``--recompute-num-layers``. Megatron-LM of that age (no Transformer Engine) runs its own
  unfused attention, as Megatron-DeepSpeed does unless ``--use-flash-attn`` (``-v1``, ``-v2``,
  ``-triton``: priced as FlashAttention-2);
* ZeRO (``--zero-stage``, Megatron-DeepSpeed's default 1): stages 1 and 2 shard the optimizer
  states (flowsim's distributed optimizer), 3 the parameters too (``fsdp``, with FSDP2's
  copies around its collectives, ``fsdp_impl``'s default: an approximation of ZeRO-3's own
  buckets, which no published row checks); stage 0 with
  ``--bf16`` is DeepSpeed's ``BF16_Optimizer``, which shards the optimizer states as stage 1
  does (``deepspeed/runtime/bf16_optimizer.py``);
* DeepSpeed's pipeline engine (``--deepspeed`` with pipeline parallelism, unless
  ``--no-pipeline-parallel``): 1F1B; activations and gradients sent between stages split
  over the tensor-parallel ranks and gathered on arrival (its ``pipe_partitioned`` and
  ``grad_partitioned``, on by default: flowsim's ``scatter_gather``); the layers split evenly
  with the first stages taking one more (``partition_method="type:transformer"``, which
  ``GPTModelPipe`` passes), or with ``--pp-partition-method 'type:transformer|embedding'``
  counting the embedding and the output layer as a layer each;
* DeepSpeed-MoE (:func:`_experts`): ``--num-experts`` (one count, or one per MoE layer, priced
  as the largest), ``--expert-interval``, ``--topk``, ``--moe-expert-parallel-size``,
  ``--moe-train-capacity-factor`` and ``--mlp-type residual``;
* DeepSpeed-Ulysses (``--ds-sequence-parallel-size N``): context parallelism of N with
  ``cp_comm_type: a2a``;
* BigScience's ``--position-embedding-type`` spellings (``absolute``, ``rotary``, ``alibi``)
  and ``--pad-vocab-size-to`` (the vocabulary it is padded to).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import FlowsimWarning, config_error

#: Megatron-LM 3.0's names -> today's
RENAMED = {"activations-checkpoint-method": "recompute-method",
           "activations-checkpoint-num-layers": "recompute-num-layers"}
#: Megatron-DeepSpeed's flash-attention switches (each priced as FlashAttention-2)
FLASH = ("use-flash-attn", "use-flash-attn-v1", "use-flash-attn-v2", "use-flash-attn-triton")
#: BigScience's ``--position-embedding-type`` spellings -> Megatron-LM's
POSITION_SPELLINGS = {"absolute": "learned_absolute", "rotary": "rope"}
#: the flags this module reads
FLAGS = ("checkpoint-activations", "deepspeed", "zero-stage", "no-pipeline-parallel",
         "pp-partition-method", "pad-vocab-size-to", "expert-interval", "topk",
         "moe-expert-parallel-size", "moe-train-capacity-factor", "mlp-type",
         "ds-sequence-parallel-size", "ds-sequence-parallel-fpdt", *FLASH, *RENAMED)


def renamed(flags: Mapping[str, str | None], where: str) -> dict[str, str | None]:
    """``flags`` under today's names: ``--checkpoint-activations`` as
    ``--recompute-granularity full`` (unless a granularity is given), Megatron-LM 3.0's
    recomputation flags as ``--recompute-*``, BigScience's position types as Megatron-LM's;
    a list of expert counts per MoE layer (PR-MoE) as its largest, with a warning."""
    out = {RENAMED.get(flag, flag): value for flag, value in flags.items()}
    counts = (out.get("num-experts") or "").split()
    if "deepspeed" in out and counts == ["1"]:   # Megatron-DeepSpeed's default: dense
        del out["num-experts"]
        counts = []
    if not all(count.isdigit() for count in counts):
        raise config_error(where, "--num-experts", "one number of experts, or one per MoE "
                           "layer", " ".join(counts))
    if len(set(counts)) > 1:
        out["num-experts"] = max(counts, key=int)
        warnings.warn(f"{where}: --num-experts {' '.join(counts)}: a different expert count "
                      f"per MoE layer is not modelled; priced as {out['num-experts']} in each",
                      FlowsimWarning, stacklevel=4)
    elif counts:
        out["num-experts"] = counts[0]
    if "checkpoint-activations" in out:
        out.setdefault("recompute-granularity", "full")
    position = out.get("position-embedding-type")
    if position is not None and position.lower() in POSITION_SPELLINGS:
        out["position-embedding-type"] = POSITION_SPELLINGS[position.lower()]
    return out


def deepspeed_keys(flags: Mapping[str, str | None], keys: dict[str, Any], where: str) -> None:
    """Set the keys a Megatron-DeepSpeed (or pre-3.0 Megatron-LM) command line implies."""
    legacy = "deepspeed" in flags or "checkpoint-activations" in flags
    if any(f in flags for f in FLASH):
        keys["attention"] = "flash2"
    elif legacy and "attention-backend" not in flags:
        keys["attention"] = "unfused"
    if flags.get("pad-vocab-size-to") is not None:
        keys["vocab"] = _count(flags["pad-vocab-size-to"], "--pad-vocab-size-to", where)
    if "deepspeed" not in flags:
        return
    stage = flags.get("zero-stage") or "1"
    if stage not in ("0", "1", "2", "3", "1.0"):
        raise config_error(where, "--zero-stage", "0, 1, 2 or 3", stage)
    if stage.startswith("1") or stage == "2" or (stage == "0" and keys.get("dtype") == "bf16"):
        keys["distributed_optimizer"] = True
    elif stage == "3":
        keys["fsdp"] = True
    sequence = _count(flags.get("ds-sequence-parallel-size") or "1",
                      "--ds-sequence-parallel-size", where)
    if sequence > 1:   # DeepSpeed-Ulysses: all-to-alls trading sequence for heads
        keys.update(cp=sequence, cp_comm_type="a2a")
        if "ds-sequence-parallel-fpdt" in flags:
            warnings.warn(f"{where}: --ds-sequence-parallel-fpdt (chunked attention with "
                          "offloading) is not modelled; priced as Ulysses' all-to-alls",
                          FlowsimWarning, stacklevel=4)
    if keys.get("experts", 1) > 1:
        keys.update(_experts(flags, keys, where))
    if keys.get("pp", 1) > 1 and "no-pipeline-parallel" not in flags:
        keys["scatter_gather"] = keys.get("tp", 1) > 1
        keys.update(_partition(flags, where))


def _experts(flags: Mapping[str, str | None], keys: dict[str, Any], where: str
             ) -> dict[str, Any]:
    """DeepSpeed-MoE as Megatron-DeepSpeed builds it: experts in every
    ``--expert-interval``-th layer (default 2, counted from 1: layers 2, 4, ...), top
    ``--topk`` (default 1) routing, expert parallelism over ``--moe-expert-parallel-size``
    ranks inside the data-parallel ones, ``--mlp-type residual`` (PR-MoE) a dense MLP beside
    the experts."""
    interval = _count(flags.get("expert-interval") or "2", "--expert-interval", where)
    out: dict[str, Any] = {
        "top_k": _count(flags.get("topk") or "1", "--topk", where),
        "ep": _count(flags.get("moe-expert-parallel-size") or "1",
                     "--moe-expert-parallel-size", where),
        "expert_layout": "within_dp"}
    layers = keys.get("layers")
    if isinstance(layers, int) and interval > 1:
        out["moe_layer_freq"] = [int((i + 1) % interval == 0) for i in range(layers)]
    if flags.get("moe-train-capacity-factor") is not None:
        try:
            out["capacity_factor"] = float(flags["moe-train-capacity-factor"] or "")
        except ValueError:
            raise config_error(where, "--moe-train-capacity-factor", "a number",
                               flags["moe-train-capacity-factor"]) from None
    if flags.get("mlp-type") == "residual":
        out["shared_ffn"] = keys.get("ffn")
    return out


def _partition(flags: Mapping[str, str | None], where: str) -> dict[str, Any]:
    """DeepSpeed's split of the layers over the pipeline stages, as a layout rule."""
    method = (flags.get("pp-partition-method") or "type:transformer").strip("'\"")
    layouts = {"type:transformer": "uniform", "type:transformer|embedding": "embedding_weighted"}
    if method not in layouts:
        raise config_error(where, "--pp-partition-method", "type:transformer or "
                           "type:transformer|embedding (flowsim splits by layer count)",
                           method)
    return {"pipeline_layout": layouts[method]}


def _count(value: str | None, flag: str, where: str) -> int:
    try:
        number = int(str(value).replace("_", ""))
    except ValueError:
        number = 0
    if number < 1:
        raise config_error(where, flag, "a positive integer", value)
    return number
