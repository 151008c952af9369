"""A Megatron-LM command line as a transformer spec: ``generator: megatron``.

Megatron-LM users describe a run by the arguments of ``pretrain_gpt.py``. This generator
reads them (a string as written in a launch script, backslash-newlines and all, or a list) and
builds the :mod:`transformer <.transformer>` workload they describe (shell comments and the
lines of a launch script's bash arrays are skipped), with Megatron-LM's own
defaults where a flag is absent (``megatron/training/arguments.py``: ``ffn_hidden_size`` 4h,
or ``int(8h / 3 / 64) * 64`` with ``--swiglu``; ``kv_channels`` h / heads; tied embeddings;
Transformer Engine's fused attention; its userbuffers defaults under ``--tp-comm-overlap``
without ``--tp-comm-overlap-cfg``). The data-parallel size is what the network's NPUs leave,
as ``torchrun``'s world size decides it. From YAML::

    generator: megatron
    args: >-
      --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096
      --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2
      --sequence-parallel --use-distributed-optimizer --swiglu --bf16 --vocab-size 32000
    device: h100          # any transformer key overrides what the flags say

Flags that do not change an iteration's time (paths, learning rate, logging) are skipped;
:data:`FLAGS` lists the ones read. Others that do are named in a :class:`FlowsimWarning`.
A hybrid model's (``pretrain_mamba.py``): ``--hybrid-override-pattern`` (or
``--hybrid-layer-pattern``) and ``--mamba-num-heads``, ``--mamba-head-dim``,
``--mamba-state-dim``, ``--mamba-num-groups``.
Megatron-DeepSpeed's flags and Megatron-LM's pre-3.0 ones are read by
:mod:`.megatron_deepspeed`, the pipeline split's (a layout string, uneven first and last
ranks, the embedding and the loss counted as layers) by :mod:`.megatron_layout`, the
optimizer's (Muon's) by :mod:`.megatron_optimizer`, a precision per layer or module's by
:mod:`.megatron_precision`, recomputation's by :mod:`.megatron_recompute`.
"""

from __future__ import annotations

import re
import shlex
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ConfigError, FlowsimWarning, config_error
from . import (
    megatron_deepspeed,
    megatron_fsdp,
    megatron_layout,
    megatron_offload,
    megatron_optimizer,
    megatron_precision,
    megatron_recompute,
)
from .imported import (
    GPT2_VOCAB,
    ImportedSpec,
    causal_window,
    cp_comm_type,
    cross_entropy_impl,
    deepep_keys,
    fp8_recipe,
    parse_imported,
    position_embedding,
    read_beside,
    shell_words,
)
from .shell_vars import shell_variables, substitute
from .transformer_choices import OFFLOAD_MODULES
from .transformer_hybrid import hybrid_keys

#: flags with a value: flag -> transformer key
VALUED = {"num-layers": "layers", "hidden-size": "hidden", "ffn-hidden-size": "ffn",
          "num-attention-heads": "heads", "num-query-groups": "kv_heads",
          "kv-channels": "head_dim", "seq-length": "sequence",
          "micro-batch-size": "micro_batch", "global-batch-size": "global_batch",
          "tensor-model-parallel-size": "tp", "pipeline-model-parallel-size": "pp",
          "context-parallel-size": "cp", "expert-model-parallel-size": "ep",
          "expert-tensor-parallel-size": "expert_tp", "num-experts": "experts",
          "moe-router-topk": "top_k", "moe-ffn-hidden-size": "moe_ffn",
          "moe-shared-expert-intermediate-size": "shared_ffn",
          "moe-expert-capacity-factor": "capacity_factor", "vocab-size": "vocab",
          "num-virtual-stages-per-pipeline-rank": "vpp", "ddp-bucket-size": "bucket_size",
          "mtp-num-layers": "mtp_layers", "moe-latent-size": "moe_latent",
          "cpu-offloading-num-layers": "cpu_offload_layers"}
#: switches: flag -> (transformer key, value)
SWITCHES = {"sequence-parallel": ("sp", True), "swiglu": ("gated_mlp", True),
            "use-distributed-optimizer": ("distributed_optimizer", True),
            "overlap-grad-reduce": ("overlap_grad_reduce", True),
            "overlap-param-gather": ("overlap_param_gather", True),
            "no-align-param-gather": ("align_param_gather", False),
            "delay-param-gather": ("align_param_gather", True),   # r0.8's opt-in name
            "no-align-grad-reduce": ("align_grad_reduce", False),
            "no-delay-grad-reduce": ("align_grad_reduce", False),   # its name in r0.8
            "tp-comm-overlap": ("tp_comm_overlap", True),
            "tp-comm-overlap-rs-dgrad": ("tp_comm_overlap_rs_dgrad", True),
            "overlap-moe-expert-parallel-comm": ("moe_a2a_overlap", True),
            "grad-reduce-in-bf16": ("grad_reduce_in_bf16", True),
            "fp8-param-gather": ("fp8_param_gather", True),
            "fp4-param-gather": ("fp8_param_gather", True),
            "fp8-dot-product-attention": ("fp8_attention", True),
            "activation-func-fp8-input-store": ("activation_func_fp8_input_store", True),
            "cross-entropy-loss-fusion": ("cross_entropy_fusion", True),
            "use-torch-fsdp2": ("fsdp", True), "mtp-use-repeated-layer": ("mtp_repeated", True),
            "untie-embeddings-and-output-weights": ("tied_embeddings", False),
            "recompute-activations": ("recompute", "selective"),
            "bf16": ("dtype", "bf16"), "fp16": ("dtype", "fp16"),
            "use-flash-attn": ("attention", "flash2"), "group-query-attention": None}
#: multi-latent attention's flags -> (the ``mla`` key, Megatron-LM's default)
MLA_FLAGS = {"q-lora-rank": ("q_lora_rank", 0), "kv-lora-rank": ("kv_lora_rank", 32),
             "qk-head-dim": ("qk_head_dim", 128),
             "qk-pos-emb-head-dim": ("qk_pos_emb_head_dim", 64), "v-head-dim": ("v_head_dim", 128)}
#: a hybrid model's flags: its pattern (both of Megatron-LM's names) and the Mamba-2 widths
MAMBA_FLAGS = {"mamba-num-heads": "heads", "mamba-head-dim": "head_dim",
               "mamba-state-dim": "state", "mamba-num-groups": "groups"}
PATTERN_FLAGS = ("hybrid-layer-pattern", "hybrid-override-pattern")
#: flags read by hand below (their meaning needs more than one key)
SPECIAL = ("fp8-format", "fp8-recipe", "fp4-format", "fp4-recipe",
           "attention-backend", "tp-comm-overlap-cfg", "tokenizer-type", "use-legacy-models",
           "no-scatter-gather-tensors-in-pipeline", "transformer-impl",
           "moe-token-dispatcher-type",
           *megatron_fsdp.FLAGS, *megatron_offload.FLAGS, "position-embedding-type",
           "use-rotary-position-embeddings", "moe-layer-freq", "multi-latent-attention",
           "window-size", "window-attn-skip-freq", "cp-comm-type", "moe-enable-deepep",
           "moe-flex-dispatcher-backend", "moe-router-group-topk", "moe-router-num-groups",
           "microbatch-group-size-per-virtual-pipeline-stage", "cross-entropy-fusion-impl",
           *MLA_FLAGS, *MAMBA_FLAGS, *PATTERN_FLAGS,
           *megatron_layout.FLAGS, *megatron_optimizer.FLAGS, *megatron_precision.FLAGS,
           *megatron_recompute.FLAGS)
#: every flag this module reads (with Megatron-DeepSpeed's and Megatron-LM's older ones)
FLAGS = tuple(VALUED) + tuple(SWITCHES) + SPECIAL + megatron_deepspeed.FLAGS
#: flags taking several values (argparse's ``nargs='+'``) -> their values (what follows them
#: in a script and is not one, a redirection say, is not theirs)
MULTI_VALUED = {"cp-comm-type": ("p2p", "a2a", "allgather", "a2a+p2p"),
                "recompute-modules": megatron_recompute.MODULES,
                "offload-modules": OFFLOAD_MODULES}
#: flags taking several numbers (Megatron-DeepSpeed's experts per MoE layer)
NUMBER_LISTS = ("num-experts",)
#: flags that shape an iteration's time but have no transformer key (named in a warning)
UNMODELLED = ("moe-grouped-gemm",
              "moe-shared-expert-overlap",
              "disable-tp-comm-overlap-ag",
              "disable-tp-comm-overlap-rs", "make-vocab-size-divisible-by", "no-rope-fusion")
#: ``--position-embedding-type``'s choices in Megatron-LM (and ``alibi``, BigScience's fork's:
#: its other spellings are renamed by :mod:`.megatron_deepspeed`)
POSITION_TYPES = ("learned_absolute", "rope", "yarn", "mrope", "relative", "none", "alibi")
#: a flag at the start of a word, or after a blank inside one
_FLAG_INSIDE = re.compile(r"(?:^|\s)--[A-Za-z]")
#: vocabulary sizes of tokenizers named by type alone
TOKENIZER_VOCAB = {"GPT2BPETokenizer": GPT2_VOCAB}


def megatron_keys(args: str | Sequence[str], source: str,
                  env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The transformer keys Megatron-LM arguments ``args`` set (``dp`` left to the network).

    A launch script's literal shell variables are substituted (:mod:`.shell_vars`; ``env``
    is the environment it would run in).

    Raises
    ------
    ConfigError
        A flag's value that is not a number (a shell variable nothing sets, say) or a choice
        Megatron-LM does not have, naming ``source`` and the flag.
    """
    flags = megatron_deepspeed.renamed(_flags(args, source, env), f"{source}: args")
    keys: dict[str, Any] = {}
    for flag, value in flags.items():
        where = f"{source}: args"
        if flag in VALUED:
            keys[VALUED[flag]] = _number(value, flag, where)
        elif flag in SWITCHES and SWITCHES[flag] is not None:
            key, setting = SWITCHES[flag]   # type: ignore[misc]
            keys[key] = setting
    if "group-query-attention" not in flags:   # Megatron-LM reads the groups only with it
        keys.pop("kv_heads", None)
    else:
        keys.setdefault("kv_heads", 1)            # --num-query-groups' default
    if "global_batch" not in keys:                # one micro-batch per data-parallel rank
        keys["micro_batches"] = 1
    if keys.get("experts"):
        keys.setdefault("top_k", 2)               # --moe-router-topk's default
        keys["expert_layout"] = "folded"          # Megatron-Core 0.10 on: MoE parallel folding
    if not {"bf16", "fp16", "fp8-format", "fp4-format"} & set(flags):
        warnings.warn(f"{source}: neither --bf16 nor --fp16: Megatron-LM trains in FP32, "
                      "which flowsim does not model; priced as BF16", FlowsimWarning,
                      stacklevel=3)
    _special(flags, keys, f"{source}: args")
    # Megatron-Core's pipeline sends whole tensors (the legacy models, and Megatron-LM before
    # 3.0, scatter-gather them)
    legacy = "use-legacy-models" in flags or "checkpoint-activations" in flags
    keys["scatter_gather"] = legacy and "no-scatter-gather-tensors-in-pipeline" not in flags
    keys.setdefault("gated_mlp", False)   # without --swiglu: two matrices, whatever the width
    if "ffn" not in keys and "hidden" in keys:   # Megatron-LM's default MLP width
        h = keys["hidden"]
        keys["ffn"] = int(4 * h * 2 / 3 / 64) * 64 if keys.get("gated_mlp") else 4 * h
    megatron_deepspeed.deepspeed_keys(flags, keys, f"{source}: args")
    skipped = sorted(f"--{f}" for f in flags if f in UNMODELLED)
    if skipped:
        warnings.warn(f"{source}: not modelled, left out: {', '.join(skipped)}",
                      FlowsimWarning, stacklevel=3)
    return keys


def _flags(args: str | Sequence[str], source: str, env: Mapping[str, str] | None = None
           ) -> dict[str, str | None]:
    """``--flag value`` pairs (a switch's value is None), flags spelt with dashes."""
    if isinstance(args, str):
        words = shell_words(args, source, "args", "a command line")
        variables = shell_variables(args, env)
        # a word may hold several flags: a bash array's quoted item ("--fp8-format hybrid"),
        # a variable holding a list of them, or a quoted command line (CMD=" ... --bf16")
        tokens = [part for word in words for part in _words(substitute(word, variables))]
    elif isinstance(args, Sequence) and all(isinstance(a, (str, int, float)) for a in args):
        tokens = [str(a) for a in args]
    else:
        raise config_error(source, "args", "Megatron-LM's arguments as one string or a list", args)
    out: dict[str, str | None] = {}
    flag = None
    for token in tokens:
        if token.startswith("--"):
            flag, _, inline = token[2:].partition("=")
            flag = flag.replace("_", "-")
            out[flag] = inline or None
        elif flag is not None and out[flag] is None:
            out[flag] = token
        elif flag is not None and (token.lower() in MULTI_VALUED.get(flag, ()) or
                                   (flag in NUMBER_LISTS and token.isdigit())):
            out[flag] = f"{out[flag]} {token}"   # nargs='+': every value
    return out


def _words(word: str) -> list[str]:
    """``word`` split as a shell would if it holds a flag (``--x``) among other words."""
    if not _FLAG_INSIDE.search(word):
        return [word]
    try:
        return shlex.split(word)
    except ValueError:   # an unbalanced quote inside: split at blanks
        return word.split()


def _number(value: str | None, flag: str, where: str) -> int | float:
    try:
        number = float(value or "")
    except ValueError:
        expected = "a number"
        if value and value.startswith("$"):
            expected += " (a shell variable the text does not set: give it in 'env')"
        raise config_error(where, f"--{flag}", expected, value) from None
    return int(number) if number.is_integer() else number


def _special(flags: Mapping[str, str | None], keys: dict[str, Any], where: str) -> None:
    """The flags of :data:`SPECIAL`."""
    if flags.get("moe-layer-freq") is not None and keys.get("experts"):
        keys["moe_layer_freq"] = flags["moe-layer-freq"]   # N, or a list expression
    size = flags.get("window-size")
    if size is not None:   # Megatron's tuple_type: "(128,0)" or "128,0"
        keys["window"] = causal_window(size.strip("()").split(","), where, "--window-size")
    kinds = flags.get("cp-comm-type")
    if kinds is not None:   # one kind, or one per layer
        keys["cp_comm_type"] = cp_comm_type(kinds.split(), where, "--cp-comm-type",
                                            "allgather")
    if flags.get("window-attn-skip-freq") is not None:
        keys["window_skip_freq"] = flags["window-attn-skip-freq"]   # N, or a list expression
    if "multi-latent-attention" in flags:
        keys["mla"] = {key: default if flags.get(flag) is None else
                       _number(flags[flag], flag, where)
                       for flag, (key, default) in MLA_FLAGS.items()}
    pattern = next((flags[f] for f in PATTERN_FLAGS if flags.get(f) is not None), None)
    keys.update(hybrid_keys(pattern, {key: None if flags.get(flag) is None else
                                      _number(flags[flag], flag, where)
                                      for flag, key in MAMBA_FLAGS.items()}))
    keys.update(megatron_layout.layout_keys(flags, keys, where))
    keys.update(megatron_optimizer.optimizer_keys(flags, keys, where),
                **megatron_precision.precision_keys(flags, where))
    keys.update(megatron_recompute.recompute_keys(flags, keys, where))
    group = flags.get("microbatch-group-size-per-virtual-pipeline-stage")
    if group is not None and keys.get("vpp", 1) > 1:   # Megatron ignores it otherwise
        keys["microbatch_group"] = _number(
            group, "microbatch-group-size-per-virtual-pipeline-stage", where)
    if flags.get("transformer-impl") == "local":   # Megatron's own layers: no fused attention
        keys["attention"] = "unfused"
    dispatcher = flags.get("moe-token-dispatcher-type", "allgather")
    if keys.get("moe_a2a_overlap") and dispatcher not in ("alltoall", "flex"):
        raise config_error(where, "--moe-token-dispatcher-type", "alltoall or flex with "
                           "--overlap-moe-expert-parallel-comm", dispatcher)
    # the flex dispatcher's DeepEP and HybridEP backends (the default backend, or the
    # switch of the releases before the backend flag)
    deep = deepep_keys(dispatcher, flags.get("moe-flex-dispatcher-backend", "deepep"),
                       flags.get("moe-router-num-groups"), flags.get("moe-router-group-topk"),
                       keys, where, ("--moe-router-num-groups", "--moe-router-group-topk"))
    if deep is not None:
        keys.update(deep)
    elif keys.get("experts") and dispatcher != "alltoall" and "deepspeed" not in flags:
        warnings.warn(f"{where}: --moe-token-dispatcher-type {dispatcher}: priced as the "
                      "all-to-all dispatcher", FlowsimWarning, stacklevel=4)
    if "fp8-format" in flags:
        keys["dtype"] = "fp8"
        keys["fp8_recipe"] = fp8_recipe(flags.get("fp8-recipe") or "delayed", where,
                                        "--fp8-recipe")
        if keys["fp8_recipe"] == "nvfp4":   # an FP4 recipe: Megatron-LM's --fp4-recipe
            raise config_error(where, "--fp8-recipe", "delayed, tensorwise, mxfp8 or "
                               "blockwise (NVFP4 is --fp4-format e2m1)", "nvfp4")
    if "fp4-param-gather" in flags and "fp4-format" not in flags:
        raise config_error(where, "--fp4-param-gather", "set only with --fp4-format "
                           "(as Megatron-LM requires)", True)
    if "fp4-format" in flags:   # NVFP4: Transformer Engine's NVFP4BlockScaling
        if "fp8-format" in flags:
            raise config_error(where, "--fp4-format", "not with --fp8-format (Megatron-LM "
                               "takes one of them)", flags["fp4-format"])
        recipe = str(flags.get("fp4-recipe") or "nvfp4").strip().lower()
        if recipe != "nvfp4":
            raise config_error(where, "--fp4-recipe", "nvfp4 (a custom quantizer factory "
                               "is not priced)", recipe)
        keys["dtype"], keys["fp8_recipe"] = "fp8", "nvfp4"
    if flags.get("position-embedding-type") is not None:   # else learned_absolute, its default
        keys["position_embedding"] = position_embedding(
            flags["position-embedding-type"], where, "--position-embedding-type",
            POSITION_TYPES)
    elif "use-rotary-position-embeddings" in flags:   # the deprecated switch Megatron reads
        keys["position_embedding"] = "rope"
    backend = flags.get("attention-backend")
    if backend is not None:
        # Megatron-Core sets Transformer Engine's backend: flash-attn's kernels (FlashAttention
        # -2 in NVIDIA's containers), cuDNN's fused attention, or TE's own choice (cuDNN on
        # Hopper and Blackwell): flowsim's flash2 and flash
        choices = {"flash": "flash2", "fused": "flash", "auto": "flash", "unfused": "unfused",
                   "local": "unfused"}
        if backend not in choices:
            raise config_error(where, "--attention-backend", "one of " + ", ".join(choices),
                               backend)
        keys["attention"] = choices[backend]
    keys.update(cross_entropy_impl(flags.get("cross-entropy-fusion-impl"),
                                   bool(keys.get("cross_entropy_fusion")), where,
                                   "--cross-entropy-fusion-impl"))
    if keys.get("tp_comm_overlap"):
        if not keys.get("sp"):
            raise ConfigError(f"{where}: --tp-comm-overlap needs --sequence-parallel "
                              "(Megatron-LM refuses it without)")
        # without a config file Transformer Engine's defaults; a file's settings are not
        # read: NeMo's tuned ones are the nearest
        keys["tp_comm_overlap_cfg"] = "nemo" if flags.get("tp-comm-overlap-cfg") else \
            "te_default"
    if "use-torch-fsdp2" in flags:   # what Megatron-LM refuses with it
        refused = [f"--{f}" for f in ("use-distributed-optimizer",) if f in flags]
        refused += [f"--{key} {keys[key]}" for key in ("pp", "ep") if keys.get(key, 1) > 1]
        if refused:
            raise ConfigError(f"{where}: --use-torch-fsdp2 with {', '.join(refused)}: "
                              "Megatron-LM refuses these together")
        # fully_shard without a mixed-precision policy reduces in the 16-bit parameters' type
        keys["grad_reduce_in_bf16"] = True   # (core/distributed/torch_fully_sharded_...py)
    keys.update(megatron_fsdp.flag_fsdp_keys(flags, where))
    keys.update(megatron_offload.flag_offload_keys(flags, where))
    tokenizer = flags.get("tokenizer-type")
    if "vocab" in keys and tokenizer == "NullTokenizer":
        keys["vocab"] += 1   # its end-of-document token
    if "vocab" not in keys and tokenizer in TOKENIZER_VOCAB:
        keys["vocab"] = TOKENIZER_VOCAB[tokenizer]
    elif "vocab" not in keys and tokenizer is None and "merge-file" in flags:
        keys["vocab"] = GPT2_VOCAB   # a BPE merge file: GPT-2's


def parse_megatron(values: Mapping[str, Any], source: str) -> ImportedSpec:
    """``generator: megatron``: key ``args`` (Megatron-LM's arguments, or a launch script
    that passes them) or ``script`` (a launch script's path, relative to the spec file),
    optional ``env`` (the environment the script runs in: variable name to value),
    transformer keys."""
    values = dict(values)
    env = _environment(values.pop("env", None), source)
    if "script" in values:
        if "args" in values:
            raise config_error(source, "script", "absent beside 'args' (give one of them)",
                               values["script"])
        path, values["args"] = read_beside(values.pop("script"), source, "script",
                                           "a launch script's path")
        source = str(path)
    return parse_imported(values, source, read="args",
                          translate=lambda args, where: megatron_keys(args, where, env),
                          names={**{key: f"--{flag}" for flag, key in VALUED.items()},
                                 "moe_layer_freq": "--moe-layer-freq",
                                 "window_skip_freq": "--window-attn-skip-freq",
                                 "mla": "--multi-latent-attention and its widths",
                                 "microbatch_group":
                                     "--microbatch-group-size-per-virtual-pipeline-stage",
                                 "node_limit": "--moe-router-group-topk",
                                 "routing_groups": "--moe-router-num-groups",
                                 "dispatcher": "--moe-token-dispatcher-type",
                                 "pipeline_layout": "the pipeline split flags",
                                 "vpp": "--num-virtual-stages-per-pipeline-rank or the "
                                        "pipeline split flags"})


def _environment(env: Any, source: str) -> dict[str, str]:
    """``env``: shell variable names to scalar values."""
    if env is None:
        return {}
    if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, (str, int, float))
            and not isinstance(v, bool) for k, v in env.items()):
        raise config_error(source, "env", "a mapping of shell variable names to numbers or "
                           "strings (e.g. {TP: 2})", env)
    return {k: str(v) for k, v in env.items()}
