"""A torchtitan job config as a transformer spec: ``generator: torchtitan``.

PyTorch's torchtitan (``torchtitan/train.py``, FSDP2 with tensor, pipeline and context
parallelism) describes a run by a TOML job config (``--job.config_file``) and command-line
items over it. This generator reads one (key ``config``: a path, relative to the spec file, or
the mapping itself) after its items (``overrides``: ``--section.key=value``,
``--section.key value``, a bare ``--section.key`` for true, tyro's ``--section.no-key`` for
false) and builds the :mod:`transformer <.transformer>` workload it describes; the
data-parallel size is what the network's NPUs leave, as torchtitan's ``-1`` does. From YAML::

    generator: torchtitan
    config: llama3_8b.toml
    overrides: --training.local_batch_size=2 --training.compile --model.converters=float8
    device: h200          # any transformer key overrides what the config says

Both layouts of the TOML era are read (settings and defaults from torchtitan's
``config_manager.py``): 2025's ``[parallelism]`` section with ``training.local_batch_size``
(commit e7c0cae) and 2024's degrees under ``[training]`` and ``[experimental]`` with
``training.batch_size`` (9dec370); Float8 as ``model.converters = ["float8"]`` (2025),
``quantize.linear.float8`` (late 2025) or ``float8.enable_float8_linear`` (2024). What is read:
the model (:mod:`.torchtitan_models`: ``model.name`` llama3 with ``model.flavor`` 8B, 70B
or 405B, 2024's llama2 (early 2024: llama) with 7B, 13B, 26B or 70B, qwen3's dense 0.6B
to 32B, deepseek_v3's 16B, 236B and 671B (latent attention, dense first layers, shared and
routed experts over ``expert_parallel_degree`` ranks, folded over the tensor-parallel
ranks first with ``expert_tensor_parallel_degree`` 1, then the context- and FSDP ones, as
torchtitan's expert mesh lays them),
llama4's 17bx16e and
17bx128e: torchtitan's shapes, its tokenizer's vocabulary; another model's shape (Qwen 3's
mixtures of experts, Llama 4's chunked-attention ``_irope`` flavors) is one error asking for
it beside ``config``), ``training.seq_len``, the batch (``local_batch_size`` per data-parallel rank,
``global_batch_size`` for gradient accumulation), the degrees (``data_parallel_shard_degree``
shards with FSDP2, ``data_parallel_replicate_degree`` replicates: HSDP with both, DDP alone),
the pipeline (schedules ``1F1B``, ``GPipe``, ``Interleaved1F1B``, ``DualPipeV``, whose V
takes two stages per rank; stages per rank from the split
points, ``pipeline_parallel_layers_per_stage`` or torchtitan's default of two for a looped
schedule, layers split as its ``generate_split_points`` splits them: the embedding and the
output layer weigh one layer each), context parallelism (``context_parallel_rotate_method``:
``allgather``, or ``alltoall``, a ring exchange priced as ``p2p``), activation checkpointing
(``full``; ``selective`` with option ``op``: ``recompute: every_other_matmul``, with a number N:
every N-th layer fully), Float8 (tensorwise: ``dtype: fp8``, ``fp8_recipe: tensorwise``; the MX
converter: ``fp8_recipe: mxfp8``, Blackwell only; ``enable_fsdp_float8_all_gather``:
weights gathered in FP8), ``mixed_precision_reduce``, and whether the loss is compiled
(``training.compile``, or ``loss`` in ``[compile]``'s ``components``: PyTorch's cross entropy
fused by ``torch.compile``, ``cross_entropy_fusion_impl: compiled``; else its eager steps).

Priced as the nearest flowsim model, each said once as a warning: the model not compiled
(``training.compile = false``, or from August 2025 ``[compile]`` off or without ``model`` in
its ``components``: PyTorch's eager mode runs each elementwise step as its own kernel;
flowsim prices them fused, as ``torch.compile`` runs them: torchtitan's own Llama 3.1 8B
table shows eager 14% slower), late 2025's ``memory_budget`` checkpointing (as the per-op
policy),
asynchronous TP (priced as Transformer Engine's overlap with its default settings), a rowwise
Float8 recipe (as tensorwise FP8). FSDP shards over ``data_parallel_shard_degree``
alone (torchtitan folds context parallelism into it) and gathers again for the backward as
its ``"default"`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import config_error
from .imported import ImportedSpec, parse_imported
from .torchtitan_config import SETTINGS, JobConfig, apply_cli, load_job_config
from .torchtitan_models import COMMON, MODELS

#: torchtitan's schedule names -> the transformer's ``schedule`` (looped ones interleave)
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved",
             "DualPipeV": "dualpipev"}
#: ``context_parallel_rotate_method`` -> ``cp_comm_type``
ROTATE = {"allgather": "all_gather", "alltoall": "p2p"}
#: converters that make the linear layers FP8 (the MX ones priced as FP8, with a warning)
FP8_CONVERTERS = {"float8": False, "quantize.linear.float8": False, "mx": True,
                  "quantize.linear.mx": True}
#: PyTorch DDP's default bucket, 25 MiB of FP32 gradients, in parameters
DDP_BUCKET = 25 * 2**20 // 4


@dataclass(frozen=True)
class DataParallel:
    """The data-parallel settings, decided once the data-parallel size is known."""

    where: str
    shard_path: str
    #: data_parallel_shard_degree (-1: what the replicas leave), its replicate degree
    shard: int
    replicate: int
    local_batch: int
    #: global_batch_size (-1: the local batch times the data-parallel size)
    global_batch: int
    #: fsdp_reshard_after_forward (``default``, ``always``, ``never``)
    reshard: str = "default"

    def finish(self, keys: dict[str, Any]) -> dict[str, Any]:
        """``keys`` (with ``dp`` set) with sharding or replication, HSDP's shard size and
        the global batch as torchtitan decides them."""
        keys, dp = dict(keys), keys["dp"]
        shard = dp // self.replicate if self.shard == -1 and dp % self.replicate == 0 \
            else self.shard
        if shard * self.replicate != dp:
            raise config_error(self.where, self.shard_path, "data_parallel_replicate_degree x "
                               f"data_parallel_shard_degree = {dp} (the network's NPUs over "
                               "tp x pp x cp), or -1", self.shard)
        if shard > 1:   # FSDP2 (HSDP with replicas), its prefetch overlapping both ways
            keys.update(fsdp=True, overlap_param_gather=True, overlap_grad_reduce=True)
            if self.reshard == "never" and keys.get("pp", 1) == 1:   # kept to the backward
                keys["fsdp_reshard"] = "after_backward"
            if self.replicate > 1:
                keys["fsdp_shard"] = shard
        elif self.replicate > 1:   # DDP
            keys.update(overlap_grad_reduce=True, bucket_size=DDP_BUCKET)
        keys["global_batch"] = self.local_batch * dp if self.global_batch == -1 \
            else self.global_batch
        return keys


def torchtitan_keys(config: Any, source: str, overrides: Any = None, *,
                    beside: Mapping[str, Any] | None = None
                    ) -> tuple[dict[str, Any], DataParallel]:
    """The transformer keys a torchtitan job config (a mapping, or a TOML path relative to
    ``source``'s folder) sets after its command-line ``overrides`` (``beside``: the
    transformer keys given beside it, which win over what it says and over what is derived
    from it), and the data-parallel settings that complete them once the network is known."""
    beside = dict(beside or {})
    where, config = load_job_config(config, source)
    read = JobConfig(apply_cli(config, overrides, source), where)
    keys = _model(read, frozenset(beside))
    keys["sequence"] = read.int("seq_len")
    keys.update(_parallelism(read, moe=bool({**keys, **beside}.get("experts"))))
    keys.update(_pipeline(read, {**keys, **beside}.get("layers")))
    keys.update(_precision_and_recompute(read))
    if {**keys, **beside}.get("recompute") != "full":   # a recomputation given beside
        keys.pop("recompute_every", None)
    return keys, DataParallel(where, read.path("dp_shard"), _degree(read, "dp_shard"),
                              read.int("dp_replicate"), read.int("local_batch"),
                              _degree(read, "global_batch"), str(read("reshard")))


def _degree(read: JobConfig, setting: str) -> int:
    """A degree or batch where -1 means "what is left" (returned as -1)."""
    value = read(setting)
    if value == -1:
        return -1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise config_error(read.where, read.path(setting), "a positive integer, or -1 "
                           "(what the other degrees leave)", value)
    return value


def _model(read: JobConfig, beside: frozenset[str]) -> dict[str, Any]:
    written, flavor = read("name"), read("flavor")
    name = "llama2" if written == "llama" else written   # early 2024's name for Llama 2
    flavors, shape = MODELS.get(name, ({}, None)) if isinstance(name, str) else ({}, None)
    if shape is not None and isinstance(flavor, str) and flavor in flavors:
        return {**COMMON, **shape(flavor)}
    if {"layers", "hidden"} <= beside:   # another model, its shape given beside
        return dict(COMMON)
    known = "; ".join(f"{model} {', '.join(table)}" for model, (table, _) in MODELS.items())
    raise config_error(read.where, "model.flavor", f"one of {known} (another model's shape is "
                       "not in the config: give layers, hidden, heads, kv_heads, ffn and "
                       "vocab beside 'config')", f"{written} {flavor}")


def _parallelism(read: JobConfig, *, moe: bool) -> dict[str, Any]:
    """The degrees; expert parallelism only for a mixture of experts (torchtitan: "no effect
    for non-MoE models")."""
    keys: dict[str, Any] = {"tp": read.int("tp"), "pp": read.int("pp"), "cp": read.int("cp")}
    if keys["tp"] > 1:   # torchtitan's TP plan shards the norms' sequence (and the loss)
        keys["sp"] = True
        if read.bool("async_tp"):
            read.warn("async_tp", "(asynchronous TP) is priced as Transformer Engine's "
                      "overlap with its default settings")
            keys.update(tp_comm_overlap=True, tp_comm_overlap_cfg="te_default")
    if keys["cp"] > 1:
        keys["cp_comm_type"] = read.choice("cp_rotate", ROTATE)
    if moe:
        keys["ep"] = read.int("ep")
    if moe and keys["ep"] > 1:   # torchtitan's expert mesh: (efsdp, ep, etp) over the
        # dense one's (dp_shard, cp, tp), innermost last: Megatron-Core's folding
        keys["expert_layout"] = "folded"
    if moe and keys["ep"] > 1 and keys["tp"] > 1:   # the experts' tensor parallelism
        etp = read.int("etp")
        if etp not in (1, keys["tp"]):
            raise config_error(read.where, read.path("etp"), f"1 or tp={keys['tp']}", etp)
        keys["expert_tp"] = etp
        if etp == 1 and keys["ep"] % (keys["cp"] * keys["tp"]):   # torchtitan asserts it
            raise config_error(read.where, read.path("ep"), "a multiple of context x tensor "
                               f"parallel degrees = {keys['cp'] * keys['tp']} with "
                               "expert_tensor_parallel_degree 1", keys["ep"])
    # torchtitan's default reshards after the forward unless pipelined; 'never' without a
    # pipeline keeps them to the backward (DataParallel.finish); 'always' under one differs
    if read("reshard") == "always" and keys["pp"] > 1:
        read.warn("reshard", "= 'always' is priced as 'default' (under a pipeline every "
                  "unit stays gathered to its last backward)")
    return keys


def _pipeline(read: JobConfig, layers: int | None) -> dict[str, Any]:
    """The schedule, the micro-batch and the layers of each (virtual) stage."""
    pp, local = read.int("pp"), read.int("local_batch")
    if pp == 1:
        return {"micro_batch": local}
    schedule = read.choice("schedule", SCHEDULES)
    looped = schedule in ("interleaved", "dualpipev")
    # the stages per rank the schedule takes (fewest, most), and how the errors say it
    (fewest, most), per_rank = {"dualpipev": ((2, 2), "two"),
                                "interleaved": ((2, 1 << 30), "two or more")}.get(
        schedule, ((1, 1), "one"))
    splits = read("split_points")
    if not isinstance(splits, list) or not all(
            isinstance(s, str) and s.startswith("layers.") and s[7:].isdigit()
            for s in splits):
        raise config_error(read.where, read.path("split_points"), "module names layers.N",
                           splits)
    keys: dict[str, Any] = {"schedule": schedule}
    per_stage = read("layers_per_stage")
    if splits:
        cuts = [int(s[7:]) for s in splits]
        stages = len(cuts) + 1
        if stages % pp or not fewest <= stages // pp <= most:
            raise config_error(read.where, read.path("split_points"), f"a multiple of pp={pp}"
                               f" stages ({per_rank} per rank with {read('schedule')})",
                               splits)
        bounds = [0, *cuts, layers if layers is not None else cuts[-1] + 1]
        if any(b <= a for a, b in zip(bounds, bounds[1:])):
            below = f", each below the model's {layers} layers" if layers else ""
            raise config_error(read.where, read.path("split_points"),
                               f"increasing layers.N{below}", splits)
        if layers is not None:
            keys["pipeline_layout"] = [b - a for a, b in zip(bounds, bounds[1:])]
    elif per_stage is not None:   # a rigid fit: (layers + 2) / pp a multiple of it
        per_stage = read.int("layers_per_stage")
        effective = (layers or 0) + 2
        stages = effective // per_stage
        if layers is None or effective % (pp * per_stage) or \
                not fewest <= stages // pp <= most:
            raise config_error(read.where, read.path("layers_per_stage"), f"a divisor of "
                               f"(layers + 2) / pp = {effective / pp:g} giving {per_rank} "
                               f"stage{'s' if looped else ''} per rank", per_stage)
        keys["pipeline_layout"] = "embedding_weighted"
    else:   # generate_split_points: one stage a rank, two with a looped schedule
        stages = pp * (2 if looped else 1)
        keys["pipeline_layout"] = "embedding_weighted"
    if stages > pp:
        keys["vpp"] = stages // pp
    # until April 2025 a count, by default one per stage (the pipeline degree then under
    # [experimental]); from then a micro-batch size, by default 1
    old = read("pp_micro_batches")
    if read.path("pp").startswith("experimental.") or old is not None:
        count = stages if old is None else read.int("pp_micro_batches")
        if local % count:
            raise config_error(read.where, read.path("pp_micro_batches"), f"a divisor of the "
                               f"local batch {local}", count)
        keys["micro_batch"] = local // count
    else:
        keys["micro_batch"] = read.int("pp_micro_batch")
        if local % keys["micro_batch"]:
            raise config_error(read.where, read.path("pp_micro_batch"), f"a divisor of the "
                               f"local batch {local}", keys["micro_batch"])
    return keys


def _precision_and_recompute(read: JobConfig) -> dict[str, Any]:
    keys: dict[str, Any] = {"fsdp": False, "distributed_optimizer": False,
                            "scatter_gather": False}
    converters = read("converters")
    converters = [converters] if isinstance(converters, str) else converters
    if not isinstance(converters, list) or not all(isinstance(c, str) for c in converters):
        raise config_error(read.where, read.path("converters"), "a list of converter names "
                           "(float8, ...)", converters)
    fp8 = [c for c in converters if c in FP8_CONVERTERS]
    if fp8 or read.bool("float8_linear"):
        keys["dtype"] = "fp8"
        # torchao's Float8Linear scales each tensor from its own amax (current scaling)
        keys["fp8_recipe"] = "mxfp8" if any(FP8_CONVERTERS[c] for c in fp8) else "tensorwise"
        keys["fp8_library"] = "torchao"
        if keys["fp8_recipe"] == "tensorwise" and read("recipe") not in (None, "tensorwise"):
            read.warn("recipe", f"= {read('recipe')!r} is priced as tensorwise FP8")
        keys["fp8_param_gather"] = read.bool("fp8_gather")
    if read("param_dtype") != "bfloat16":
        read.warn("param_dtype", f"= {read('param_dtype')!r}: FP32 compute is not modelled; "
                  "priced as BF16")
    keys["grad_reduce_in_bf16"] = read.choice("reduce_dtype", {"float32": False,
                                                                "bfloat16": True})
    components = read("compile_components")   # from August 2025: [compile] components
    compiled = read.bool("compile") and isinstance(components, list)
    if not compiled or "model" not in components:
        read.warn("compile", "is off for the model: eager PyTorch runs each elementwise step "
                  "as its own kernel; priced fused, as torch.compile runs them")
    if compiled and "loss" in components:   # torchtitan compiles its loss too
        keys["cross_entropy_fusion"] = True
        keys["cross_entropy_fusion_impl"] = "compiled"
    mode = read.choice("ac_mode", {"none": "none", "full": "full", "selective": "selective",
                                   "memory_budget": "memory_budget"})
    if mode == "memory_budget":   # late 2025: the compiler picks what to save under a budget
        read.warn("ac_mode", "memory_budget (the compiler's choice under a budget) is priced "
                  "as the per-op policy (selective_ac_option op)")
        mode, option = "selective", "op"
    else:
        option = str(read("ac_option"))
    if mode == "selective" and option == "op":
        mode = "every_other_matmul"
    elif mode == "selective":
        if not option.isdigit():
            raise config_error(read.where, read.path("ac_option"), "op or a layer count N "
                               "(every N-th layer recomputed)", read("ac_option"))
        mode = "full"
        keys["recompute_every"] = max(1, int(option))
    keys["recompute"] = mode
    return keys


def parse_torchtitan(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: torchtitan``: key ``config`` (a torchtitan job config), optionally
    ``overrides`` (its command-line items), transformer keys."""
    values = dict(values)
    overrides = values.pop("overrides", None)
    paths = {key: SETTINGS[setting][0][0] for key, setting in (
        ("layers", "flavor"), ("hidden", "flavor"), ("sequence", "seq_len"),
        ("tp", "tp"), ("pp", "pp"), ("cp", "cp"), ("micro_batch", "local_batch"),
        ("global_batch", "global_batch"), ("vpp", "schedule"),
        ("pipeline_layout", "split_points"))}
    decided: list[DataParallel] = []

    def translate(config: Any, src: str) -> dict[str, Any]:
        keys, data_parallel = torchtitan_keys(config, src, overrides,
                                              beside={k: v for k, v in values.items()
                                                      if k != "config"})
        decided.append(data_parallel)
        return keys

    return parse_imported(values, source, read="config", translate=translate, names=paths,
                          finish=lambda keys: decided[0].finish(keys))
