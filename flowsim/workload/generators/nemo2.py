"""A NeMo 2 pre-training recipe as a transformer spec: ``generator: nemo2``.

NeMo 2 describes a run by a recipe, Python that NeMo-Run turns into a config: ``nemo llm
pretrain --factory llama3_70b trainer.strategy.tensor_model_parallel_size=8
data.global_batch_size=1024``. This generator takes the same two parts: ``recipe``, the
factory as ``--factory`` takes it (``llama3_70b``, or a call such as
``"llama3_70b(performance_mode=True)"``), and ``overrides``, NeMo-Run's command-line items
(``a.b.c=value``; one string split as a shell would, or a list). The recipes' settings are
those of NeMo's source, transcribed per recipe (:data:`~.nemo2_recipes.RECIPES`, with the
commit), and read as the NeMo 1 importer reads a config (:func:`.nemo.nemo_keys`), with NeMo
2's own defaults where they differ; the data-parallel size is what the network's NPUs leave
(``trainer.num_nodes`` and ``trainer.devices`` are the network's to say). From YAML::

    generator: nemo2
    recipe: llama3_70b(performance_mode=True)
    overrides: trainer.strategy.context_parallel_size=1 data.global_batch_size=256
    device: h100           # any transformer key overrides what the recipe says

What the overrides may set (NeMo 2's names; values as NeMo-Run reads them, ``True``,
``None`` and numbers): under ``trainer.strategy`` the parallel sizes
(``tensor_model_parallel_size``, ``pipeline_model_parallel_size``,
``virtual_pipeline_model_parallel_size``, ``context_parallel_size``,
``expert_model_parallel_size``) and ``sequence_parallel``, under ``trainer.strategy.ddp``
``overlap_grad_reduce``, ``overlap_param_gather``, ``bucket_size`` and
``align_param_gather``; under ``trainer.plugins`` ``grad_reduce_in_fp32`` (the mixed-precision
plugin's, which NeMo hands the DDP config), ``fp8`` (``hybrid`` or ``e4m3``: FP8 training)
and ``fp8_param_gather``; ``data.seq_length``, ``data.global_batch_size`` and
``data.micro_batch_size``; under ``model.config`` the shape (``num_layers``, ``hidden_size``,
``ffn_hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``kv_channels``,
``num_moe_experts``, ``moe_router_topk``), ``recompute_granularity`` and
``cross_entropy_loss_fusion``. Items that do not change an iteration's time (``log.*``,
``resume.*``, ``optim.config.lr``, ``trainer.max_steps``, ...) are skipped; any other is named
in a warning, and a path outside ``trainer``, ``data``, ``model``, ``optim``, ``log`` and
``resume`` is an error.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import FlowsimWarning, config_error
from .config_files import apply_overrides
from .imported import ImportedSpec, parse_imported
from .nemo import nemo_keys
from .nemo2_recipes import BUCKET_SIZE, COMMIT, RECIPES, Recipe

#: the factory's keyword arguments a recipe call may give (the others name files and runs)
FACTORY_ARGUMENTS = ("performance_mode", "num_nodes", "num_gpus_per_node", "name", "dir")
#: NeMo 2 config paths flowsim reads (see the module docstring), by block
READ = {
    "trainer.strategy": ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                         "virtual_pipeline_model_parallel_size", "context_parallel_size",
                         "expert_model_parallel_size", "sequence_parallel"),
    "trainer.strategy.ddp": ("overlap_grad_reduce", "overlap_param_gather", "bucket_size",
                             "align_param_gather"),
    "trainer.plugins": ("grad_reduce_in_fp32", "fp8", "fp8_param_gather"),
    "data": ("seq_length", "global_batch_size", "micro_batch_size"),
    "model.config": ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                     "num_query_groups", "kv_channels", "num_moe_experts", "moe_router_topk",
                     "recompute_granularity", "cross_entropy_loss_fusion"),
}
#: paths (or their first parts) that do not change an iteration's time
SKIPPED = ("log", "resume", "optim.config.lr", "optim.config.min_lr",
           "optim.config.weight_decay", "optim.config.adam_beta1", "optim.config.adam_beta2",
           "optim.config.clip_grad", "optim.lr_scheduler", "trainer.max_steps",
           "trainer.val_check_interval", "trainer.limit_val_batches",
           "trainer.limit_test_batches", "trainer.log_every_n_steps", "trainer.num_nodes",
           "trainer.devices", "trainer.callbacks", "trainer.enable_checkpointing",
           "data.num_workers", "data.seed")
ROOTS = ("trainer", "data", "model", "optim", "log", "resume")


def read_recipe(text: Any, source: str) -> tuple[str, Recipe, bool]:
    """The recipe a ``--factory`` value names (``name`` or ``name(key=value, ...)``) and
    whether it asks for performance mode."""
    if not isinstance(text, str) or not text.strip():
        raise config_error(source, "recipe", "a NeMo 2 recipe: " + ", ".join(RECIPES), text)
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        call = None
    if isinstance(call, ast.Name):
        name, arguments = call.id, []
    elif isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.args:
        name, arguments = call.func.id, call.keywords
    else:
        raise config_error(source, "recipe", "a recipe name or a call such as "
                           "llama3_70b(performance_mode=True)", text)
    recipe = RECIPES.get(name)
    if recipe is None:
        raise config_error(source, "recipe", "one of " + ", ".join(RECIPES), name)
    performance = False
    for argument in arguments:
        if argument.arg not in FACTORY_ARGUMENTS:
            raise config_error(source, f"recipe ({argument.arg})",
                               "a keyword of pretrain_recipe: " + ", ".join(FACTORY_ARGUMENTS),
                               ast.unparse(argument.value))
        if argument.arg == "performance_mode":
            value = argument.value
            if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
                raise config_error(source, "recipe (performance_mode)", "True or False",
                                   ast.unparse(value))
            performance = value.value
    return name, recipe, performance


def recipe_config(recipe: Recipe, performance: bool) -> dict[str, Any]:
    """The recipe's settings under NeMo 2's paths (what overrides address), after
    performance mode when asked for."""
    strategy = dict(recipe.strategy)
    ddp: dict[str, Any] = {"overlap_grad_reduce": True, "overlap_param_gather": True,
                           "bucket_size": None, "align_param_gather": False}
    plugins: dict[str, Any] = {"grad_reduce_in_fp32": True, "fp8": None,
                               "fp8_param_gather": False}
    if performance and recipe.performance is not None:
        strategy.update(recipe.performance["strategy"])
        plugins["grad_reduce_in_fp32"] = not recipe.performance["grad_bf16"]
        ddp["bucket_size"] = BUCKET_SIZE   # the overlap callback's, with DP > 1 (it also
        # aligns the gathers with pipelining and interleaving: read after the overrides)
    return {"trainer": {"strategy": {**strategy, "ddp": ddp}, "plugins": plugins},
            "data": dict(recipe.data), "model": {"config": dict(recipe.model)}}


def nemo2_keys(text: Any, source: str, overrides: Any = None) -> dict[str, Any]:
    """The transformer keys of a NeMo 2 recipe (``text``: the ``--factory`` value) after
    NeMo-Run's command-line ``overrides``."""
    name, recipe, performance = read_recipe(text, source)
    where = f"{source}: recipe {name}"
    if performance and recipe.performance is None:
        raise config_error(source, "recipe (performance_mode)", f"False ({name}'s "
                           "pretrain_recipe has no performance mode)", True)
    config = apply_overrides(recipe_config(recipe, performance), overrides, source,
                             example="trainer.strategy.tensor_model_parallel_size=8")
    _check_paths(config, recipe_config(recipe, performance), where)
    strategy, data = config["trainer"]["strategy"], config["data"]
    ddp, plugins = strategy["ddp"], config["trainer"]["plugins"]
    model = {k: _none(v) for k, v in config["model"]["config"].items()}
    tuned = recipe.performance if performance else None
    vpp = _none(strategy.get("virtual_pipeline_model_parallel_size"))
    pp = _none(strategy.get("pipeline_model_parallel_size"))
    # NeMo 1's names for the same settings, read by the NeMo 1 importer
    nemo1 = {**{k: _none(v) for k, v in strategy.items() if k != "ddp"},
             "encoder_seq_length": _none(data.get("seq_length")),
             "global_batch_size": _none(data.get("global_batch_size")),
             "micro_batch_size": _none(data.get("micro_batch_size")),
             **{k: v for k, v in model.items() if k != "recompute_granularity"},
             "activation": recipe.activation,
             "share_embeddings_and_output_weights": recipe.tied_embeddings,
             "position_embedding_type": recipe.position_embedding,
             "activations_checkpoint_granularity": model.get("recompute_granularity"),
             "mcore_gpt": True, "fp8": _none(plugins.get("fp8")) is not None,
             "fp8_params": bool(_none(plugins.get("fp8_param_gather"))),
             # performance mode's communication-overlap callback
             "ub_tp_comm_overlap": bool(tuned and tuned["tp_comm_overlap"]),
             "ub_tp_comm_overlap_cfg": "named" if tuned and tuned["named_ub"] else None,
             "optim": {"name": "mcore_distributed_optim",
                       "overlap_grad_sync": ddp.get("overlap_grad_reduce"),
                       "overlap_param_sync": ddp.get("overlap_param_gather"),
                       "align_param_gather": bool(ddp.get("align_param_gather")) or bool(
                           tuned and isinstance(pp, int) and pp > 1 and isinstance(vpp, int)
                           and vpp > 1),
                       # NeMo 2 hands the schedule no gradient-sync function
                       "align_grad_reduce": False,
                       "grad_sync_dtype": "fp32" if plugins.get("grad_reduce_in_fp32")
                       else "bf16",
                       "ddp_bucket_size": _none(ddp.get("bucket_size"))}}
    nemo1 = {k: v for k, v in nemo1.items() if v is not None}
    nemo1["optim"] = {k: v for k, v in nemo1["optim"].items() if v is not None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)   # NeMo 1's notes do not apply here
        keys = nemo_keys({"trainer": {"precision": "bf16-mixed"}, "model": nemo1}, where)
    keys["vocab"] = recipe.vocab
    if "cross_entropy_loss_fusion" not in model:
        keys["cross_entropy_fusion"] = True   # NeMo 2's GPTConfig default
    if recipe.embedding_and_loss_in_split:   # a stage of the split: one layer fewer
        keys["pipeline_layout"] = "first_last_fewer"
    return keys


def _none(value: Any) -> Any:
    """NeMo-Run's ``None`` (read as YAML it is text) as ``None``."""
    return None if isinstance(value, str) and value in ("None", "none", "null") else value


def _check_paths(config: Mapping[str, Any], recipe: Mapping[str, Any], where: str) -> None:
    """Every overridden path is read, skipped (warning for the unknown) or an error."""
    unknown: list[str] = []

    def walk(block: Mapping[str, Any], known: Any, path: str) -> None:
        for key, value in block.items():
            here = f"{path}.{key}" if path else key
            if not path and key not in ROOTS:
                raise config_error(where, f"overrides ({here})", "a path under "
                                   + ", ".join(ROOTS), value)
            if isinstance(value, Mapping) and isinstance(known, Mapping) and \
                    isinstance(known.get(key), Mapping):
                walk(value, known[key], here)
            elif not isinstance(known, Mapping) or key not in known:
                if not any(here == s or here.startswith(s + ".") for s in SKIPPED) and \
                        key not in READ.get(path, ()):
                    unknown.append(here)

    walk(config, recipe, "")
    if unknown:
        warnings.warn(f"{where}: not modelled, left out: {', '.join(sorted(unknown))}",
                      FlowsimWarning, stacklevel=4)


def parse_nemo2(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: nemo2``: key ``recipe`` (a NeMo 2 ``--factory`` value), optionally
    ``overrides`` (NeMo-Run's command-line items), transformer keys."""
    values = dict(values)
    overrides = values.pop("overrides", None)
    names = {"tp": "trainer.strategy.tensor_model_parallel_size",
             "pp": "trainer.strategy.pipeline_model_parallel_size",
             "vpp": "trainer.strategy.virtual_pipeline_model_parallel_size",
             "cp": "trainer.strategy.context_parallel_size",
             "ep": "trainer.strategy.expert_model_parallel_size",
             "sequence": "data.seq_length", "global_batch": "data.global_batch_size",
             "micro_batch": "data.micro_batch_size", "layers": "model.config.num_layers",
             "hidden": "model.config.hidden_size", "ffn": "model.config.ffn_hidden_size",
             "heads": "model.config.num_attention_heads",
             "kv_heads": "model.config.num_query_groups", "window": "model.config.window_size",
             "experts": "model.config.num_moe_experts", "top_k": "model.config.moe_router_topk"}
    return parse_imported(values, source, read="recipe",
                          translate=lambda text, src: nemo2_keys(text, src, overrides),
                          names=names)


__all__ = ["COMMIT", "nemo2_keys", "parse_nemo2", "read_recipe"]
