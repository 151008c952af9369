"""A NeMo 2 pre-training recipe as a transformer spec: ``generator: nemo2``.

NeMo 2 describes a run by a recipe, Python that NeMo-Run turns into a config: ``nemo llm
pretrain --factory llama3_70b trainer.strategy.tensor_model_parallel_size=8
data.global_batch_size=1024``. This generator takes the same two parts: ``recipe``, the
factory as ``--factory`` takes it (``llama3_70b``, or a call such as
``"llama3_70b(performance_mode=True)"``), and ``overrides``, NeMo-Run's command-line items
(``a.b.c=value``, and ``+=``, ``-=``, ``*=``, ``/=``; one string split as a shell would, or a
list). The recipes' settings are those of NeMo's source, transcribed per recipe
(:data:`~.nemo2_recipes.RECIPES`, with the commit), and read as the NeMo 1 importer reads a
config (:func:`.nemo.nemo_keys`), with NeMo 2's own rules where they differ; the
data-parallel size is what the network's NPUs leave (``trainer.num_nodes`` and
``trainer.devices`` are the network's to say). From YAML::

    generator: nemo2
    recipe: llama3_70b(performance_mode=True)
    overrides: trainer.strategy.context_parallel_size=1 data.global_batch_size=256
    device: h100           # any transformer key overrides what the recipe says

or the launch command as typed, ``command: nemo llm pretrain --factory llama3_70b
data.global_batch_size=256 -y`` (NeMo-Run's own ``executor=`` and ``run.`` items skipped).

What the overrides may set (NeMo 2's names; values as NeMo-Run reads them: Python literals,
``true``, ``none``): :data:`READ`. ``trainer.plugins`` may also be replaced by a precision
factory (:data:`~.nemo2_recipes.PLUGINS`: ``trainer.plugins=bf16_with_fp8_mixed``). Items
that do not change an iteration's time (:data:`SKIPPED`: ``log.*``, ``resume.*``, learning rates,
``trainer.max_steps``, ...) are skipped; any other is named in a warning, and so are items
that index a list (``trainer.callbacks[1].x``); a path outside :data:`ROOTS`, or a factory
in place of another block, is an error. As NeMo does, virtual pipeline stages are dropped
without pipeline parallelism and sequence parallelism without tensor parallelism (each with
a warning), and performance mode's communication-overlap callback sets the gradient and
parameter overlaps once the data-parallel size is known (off at 1; else overlapped, 128 Mi
buckets, gathers aligned with interleaving), over what the overrides say.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError, FlowsimWarning, config_error
from .config_files import apply_nemo_run_items, nested_block, override_items
from .imported import (
    ImportedSpec,
    cross_entropy_impl,
    fp8_recipe,
    parse_imported,
    recompute_modules_keys,
    renamed,
)
from .nemo import NUMBERS, nemo_keys
from .nemo2_launch import read_command, read_recipe
from .nemo2_recipes import BUCKET_SIZE, COMMIT, PLUGINS, PRECISIONS, Recipe

#: parallel sizes (``trainer.strategy``) and model settings (``model.config``) NeMo 1 names
#: alike
_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
             "virtual_pipeline_model_parallel_size", "context_parallel_size",
             "expert_model_parallel_size", "sequence_parallel")
_MODEL = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
          "num_query_groups", "kv_channels", "num_moe_experts", "moe_router_topk",
          "window_size", "cp_comm_type", "mtp_num_layers")
#: NeMo 2 config paths flowsim reads, by block
READ = {
    "trainer.strategy": (*_PARALLEL, "expert_tensor_parallel_size",
                         "account_for_embedding_in_pipeline_split",
                         "account_for_loss_in_pipeline_split"),
    "trainer.strategy.ddp": ("overlap_grad_reduce", "overlap_param_gather", "bucket_size",
                             "align_param_gather"),
    "trainer.plugins": ("precision", "grad_reduce_in_fp32", "fp8", "fp8_param_gather",
                        "fp8_params", "fp8_recipe", "fp8_dot_product_attention"),
    "data": ("seq_length", "global_batch_size", "micro_batch_size"),
    "model.config": (*_MODEL, "recompute_granularity", "recompute_method",
                     "recompute_num_layers", "recompute_modules", "cross_entropy_loss_fusion",
                     "cross_entropy_fusion_impl"),
}
#: paths (or their first parts) that do not change an iteration's time
SKIPPED = ("log", "resume", "optim.config.lr", "optim.config.min_lr",
           "optim.config.weight_decay", "optim.config.adam_beta1", "optim.config.adam_beta2",
           "optim.config.clip_grad", "optim.lr_scheduler", "trainer.max_steps",
           "trainer.val_check_interval", "trainer.limit_val_batches",
           "trainer.limit_test_batches", "trainer.log_every_n_steps", "trainer.num_nodes",
           "trainer.devices", "trainer.enable_checkpointing", "data.num_workers", "data.seed")
ROOTS = ("trainer", "data", "model", "optim", "log", "resume")
#: NeMo 1 names in the NeMo 1 importer's messages -> NeMo 2's paths
_PATHS = {"model.optim.overlap_grad_sync": "trainer.strategy.ddp.overlap_grad_reduce",
          "model.optim.overlap_param_sync": "trainer.strategy.ddp.overlap_param_gather",
          "model.optim.align_param_gather": "trainer.strategy.ddp.align_param_gather",
          "model.encoder_seq_length": "data.seq_length",
          "model.global_batch_size": "data.global_batch_size",
          "model.micro_batch_size": "data.micro_batch_size",
          "model.activations_checkpoint_granularity": "model.config.recompute_granularity",
          **{f"model.{k}": f"trainer.strategy.{k}" for k in READ["trainer.strategy"]},
          **{f"model.{k}": f"model.config.{k}" for k in READ["model.config"]}}


def recipe_config(recipe: Recipe, performance: bool, settings: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """The recipe's settings under NeMo 2's paths (what overrides address), after
    performance mode when asked for and the factory call's arguments."""
    strategy = {**recipe.strategy, "account_for_embedding_in_pipeline_split":
                recipe.embedding_and_loss_in_split, "account_for_loss_in_pipeline_split":
                recipe.embedding_and_loss_in_split}
    plugins: dict[str, Any] = {"precision": "bf16-mixed", "grad_reduce_in_fp32": True,
                               "fp8": None, "fp8_param_gather": False}
    if performance and recipe.performance is not None:
        strategy.update(recipe.performance["strategy"])
        plugins["grad_reduce_in_fp32"] = not recipe.performance["grad_bf16"]
    overlap = recipe.ddp_overlap
    config: dict[str, Any] = {"trainer": {"strategy": {**strategy, "ddp": {
        "overlap_grad_reduce": overlap, "overlap_param_gather": overlap, "bucket_size": None,
        "align_param_gather": False}}, "plugins": plugins},
        "data": dict(recipe.data), "model": {"config": dict(recipe.model)}}
    for path, value in settings.items():
        *parents, last = path.split(".")
        block = nested_block(config, parents)
        block[last] = dict(PLUGINS[value]) if path == "trainer.plugins" and value in PLUGINS \
            else value
    return config


def nemo2_keys(text: Any, source: str, overrides: Any = None) -> dict[str, Any]:
    """The transformer keys of a NeMo 2 recipe (``text``: the ``--factory`` value) after
    NeMo-Run's command-line ``overrides`` (performance mode's data-parallel settings are
    added by :func:`finish_keys` once the data-parallel size is known)."""
    name, recipe, performance, settings = read_recipe(text, source)
    where = f"{source}: recipe {name}"
    default = recipe_config(recipe, performance, settings)
    config, indexed = apply_nemo_run_items(default, overrides, source,
                                           example="trainer.strategy."
                                           "tensor_model_parallel_size=8")
    _check(config, default, indexed, where)
    trainer, model = config["trainer"], config["model"]["config"]
    strategy, data = trainer["strategy"], config["data"]
    ddp, plugins = strategy["ddp"], trainer["plugins"]
    tuned = recipe.performance if performance else None
    parallel = {k: v for k, v in strategy.items() if k in _PARALLEL}
    _as_nemo_does(parallel, where)
    nemo1 = {**parallel,
             "encoder_seq_length": data.get("seq_length"),
             "global_batch_size": data.get("global_batch_size"),
             "micro_batch_size": data.get("micro_batch_size"),
             **{k: v for k, v in model.items() if k in _MODEL},
             "activation": recipe.activation,
             "share_embeddings_and_output_weights": recipe.tied_embeddings,
             "position_embedding_type": recipe.position_embedding,
             "activations_checkpoint_granularity": model.get("recompute_granularity"),
             "activations_checkpoint_method": model.get("recompute_method"),
             "activations_checkpoint_num_layers": model.get("recompute_num_layers"),
             "mcore_gpt": True, "fp8": bool(plugins.get("fp8")),
             "fp8_recipe": plugins.get("fp8_recipe"),
             "fp8_params": bool(plugins.get("fp8_param_gather") or plugins.get("fp8_params")),
             "fp8_dot_product_attention": bool(plugins.get("fp8_dot_product_attention")),
             # performance mode's communication-overlap callback (NeMo's userbuffers
             # settings when the recipe names them, else Transformer Engine's)
             "ub_tp_comm_overlap": bool(tuned and tuned["tp_comm_overlap"]),
             "ub_tp_comm_overlap_cfg": "named" if tuned and tuned["named_ub"] else None,
             "optim": {"name": "mcore_distributed_optim",
                       "overlap_grad_sync": ddp.get("overlap_grad_reduce"),
                       "overlap_param_sync": ddp.get("overlap_param_gather"),
                       "align_param_gather": ddp.get("align_param_gather"),
                       # NeMo 2 hands the schedule no gradient-sync function
                       "align_grad_reduce": False,
                       "grad_sync_dtype": "bf16" if plugins.get("grad_reduce_in_fp32") is False
                       else "fp32",
                       "ddp_bucket_size": ddp.get("bucket_size")}}
    nemo1 = {k: v for k, v in nemo1.items() if v is not None}
    nemo1["optim"] = {k: v for k, v in nemo1["optim"].items() if v is not None}
    precision = plugins.get("precision", "bf16-mixed")
    if precision not in PRECISIONS:
        raise config_error(where, "trainer.plugins.precision", ", ".join(PRECISIONS), precision)
    if precision.startswith("32"):
        warnings.warn(f"{where}: trainer.plugins.precision {precision}: FP32 training is not "
                      "modelled; priced as BF16", FlowsimWarning, stacklevel=4)
    if nemo1.get("fp8") and "fp8_recipe" in nemo1:   # said here: NeMo 1's notes are muted
        nemo1["fp8_recipe"] = fp8_recipe(nemo1["fp8_recipe"], where, "trainer.plugins.fp8_recipe")
    granularity = nemo1.get("activations_checkpoint_granularity")
    if granularity not in (None, "selective", "full"):
        raise config_error(where, "model.config.recompute_granularity",
                           "selective, full or None", granularity)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FlowsimWarning)   # NeMo 1's notes do not apply
            keys = nemo_keys({"trainer": {"precision": precision}, "model": nemo1}, where)
    except ConfigError as exc:   # name the setting by its NeMo 2 path
        raise ConfigError(renamed(str(exc), _PATHS)) from None
    keys["vocab"] = recipe.vocab
    if keys.get("recompute") == "selective" and model.get("recompute_modules") is not None:
        keys.update(recompute_modules_keys(model["recompute_modules"], where,
                                           "model.config.recompute_modules"))
    keys["cross_entropy_fusion"] = bool(model.get("cross_entropy_loss_fusion", True))
    keys.update(cross_entropy_impl(model.get("cross_entropy_fusion_impl"),
                                   keys["cross_entropy_fusion"], where,
                                   "model.config.cross_entropy_fusion_impl"))
    if keys.get("experts"):   # Megatron-Core's expert ranks: folded over CP x DP
        keys["expert_layout"] = "folded"
        if strategy.get("expert_tensor_parallel_size") is not None:
            keys["expert_tp"] = strategy["expert_tensor_parallel_size"]
    if strategy.get("account_for_embedding_in_pipeline_split") and \
            strategy.get("account_for_loss_in_pipeline_split"):
        keys["pipeline_layout"] = "first_last_fewer"   # the embedding and loss count as layers
    return keys


def finish_keys(keys: dict[str, Any]) -> dict[str, Any]:
    """Performance mode's communication-overlap callback, as NeMo applies it at setup (over
    the overrides) once the data-parallel size is known: with one data-parallel rank no
    overlap, else both overlaps, 128 Mi buckets and, with pipelining and interleaving,
    aligned gathers."""
    def count(key: str) -> int:   # a bad value is the transformer's to name, later
        value = keys.get(key, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    keys = dict(keys)
    several = count("dp") > 1
    keys["overlap_grad_reduce"] = keys["overlap_param_gather"] = several
    keys["align_param_gather"] = several and count("pp") > 1 and count("vpp") > 1
    if several:
        keys["bucket_size"] = BUCKET_SIZE
    else:
        keys.pop("bucket_size", None)
    return keys


def _as_nemo_does(parallel: dict[str, Any], where: str) -> None:
    """NeMo's own corrections (``llm.api._validate_config``): no virtual stages without
    pipeline parallelism, no sequence parallelism without tensor parallelism."""
    if parallel.get("pipeline_model_parallel_size") == 1 and \
            parallel.get("virtual_pipeline_model_parallel_size") not in (None, 1):
        warnings.warn(f"{where}: virtual pipeline stages without pipeline parallelism: "
                      "dropped, as NeMo drops them", FlowsimWarning, stacklevel=4)
        parallel["virtual_pipeline_model_parallel_size"] = None
    if parallel.get("tensor_model_parallel_size") == 1 and parallel.get("sequence_parallel"):
        warnings.warn(f"{where}: sequence parallelism without tensor parallelism: turned "
                      "off, as NeMo turns it off", FlowsimWarning, stacklevel=4)
        parallel["sequence_parallel"] = False


def _check(config: dict[str, Any], default: Mapping[str, Any], indexed: list[str],
           where: str) -> None:
    """Blocks are still blocks, and every overridden path is read, skipped or named in a
    warning (an unknown root is an error)."""
    for path in ("trainer", "trainer.strategy", "trainer.strategy.ddp", "trainer.plugins",
                 "data", "model", "model.config"):
        block: Any = config
        for part in path.split("."):
            block = block.get(part) if isinstance(block, Mapping) else None
        if isinstance(block, str) and path == "trainer.plugins" and block in PLUGINS:
            config["trainer"]["plugins"] = dict(PLUGINS[block])
        elif not isinstance(block, Mapping):
            expected = ("a mapping of settings or a precision factory: " + ", ".join(PLUGINS)
                        if path == "trainer.plugins" else
                        "a mapping of settings (a factory in place of the block is not read: "
                        "set its fields)")
            raise config_error(where, f"overrides ({path})", expected, block)
    unknown = list(indexed)

    def walk(block: Mapping[str, Any], known: Any, path: str) -> None:
        for key, value in block.items():
            here = f"{path}.{key}" if path else key
            if not path and key not in ROOTS:
                raise config_error(where, f"overrides ({here})", "a path under "
                                   + ", ".join(ROOTS), value)
            inner = known.get(key) if isinstance(known, Mapping) else None
            if isinstance(value, Mapping):
                walk(value, inner if isinstance(inner, Mapping) else {}, here)
            elif not (isinstance(known, Mapping) and key in known) and \
                    key not in READ.get(path, ()) and \
                    not any(here == s or here.startswith(s + ".") for s in SKIPPED):
                unknown.append(here)

    walk(config, default, "")
    if unknown:
        warnings.warn(f"{where}: not modelled, left out: {', '.join(sorted(unknown))}",
                      FlowsimWarning, stacklevel=4)


def parse_nemo2(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: nemo2``: key ``recipe`` (a NeMo 2 ``--factory`` value) or ``command``
    (the launch command as typed), optionally ``overrides`` (NeMo-Run's command-line items),
    transformer keys."""
    values = dict(values)
    overrides = values.pop("overrides", None)
    if "command" in values:   # the launch command as typed: its factory and items
        if "recipe" in values:
            raise config_error(source, "command", "the launch command or 'recipe', not both",
                               values["command"])
        values["recipe"], items = read_command(values.pop("command"), source)
        overrides = items + override_items(overrides, source, "NeMo-Run's items") \
            if overrides is not None else items
    # the transformer key -> NeMo 2 path, through the NeMo 1 name both share
    names = {key: _PATHS[f"model.{nemo1}"] for nemo1, key in NUMBERS.items()
             if f"model.{nemo1}" in _PATHS}
    names["window"] = _PATHS["model.window_size"]
    performance = "recipe" in values and read_recipe(values["recipe"], source)[2]
    return parse_imported(values, source, read="recipe",
                          translate=lambda text, src: nemo2_keys(text, src, overrides),
                          names=names, finish=finish_keys if performance else None)


__all__ = ["COMMIT", "finish_keys", "nemo2_keys", "parse_nemo2", "read_command", "read_recipe"]
