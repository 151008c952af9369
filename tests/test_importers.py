"""Other tools' run descriptions as transformer workloads: a Megatron-LM command line
(``generator: megatron``) and a NeMo training config (``generator: nemo``) give the same
workload as the transformer spec they describe, with the tools' own defaults; bad values are
one line naming the file and the flag or key."""

from __future__ import annotations

import warnings

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim import ConfigError, FlowsimWarning, simulate
from flowsim.workload.generators.megatron import VALUED, megatron_keys
from flowsim.workload.generators.nemo import NUMBERS, nemo_keys

#: the read-by-hand flags that take a value
SPECIAL_VALUED = ["num-layers-per-virtual-pipeline-stage", "recompute-granularity",
                  "attention-backend", "tokenizer-type", "data-parallel-sharding-strategy",
                  "position-embedding-type", "decoder-first-pipeline-num-layers",
                  "decoder-last-pipeline-num-layers", "pipeline-model-parallel-layout"]

NET = {"cluster": {"device": "h100_sxm_80gb", "nodes": 2, "gpus_per_node": 8,
                   "nic_gbps": 400, "nics_per_node": 8}}
#: the run both tools describe below, as transformer keys (16 NPUs: DP 2)
SPEC = dict(generator="transformer", device="h100", layers=8, hidden=2048, heads=16,
            kv_heads=4, ffn=5440, sequence=2048, micro_batch=1, global_batch=16, tp=2, pp=2,
            vpp=2, dp=4, sp=True, gated_mlp=True, tied_embeddings=False, vocab=32000,
            distributed_optimizer=True, overlap_grad_reduce=True, recompute="selective",
            tp_comm_overlap=True, tp_comm_overlap_cfg="te_default", scatter_gather=False)
ARGS = r"""torchrun --nproc_per_node 8 pretrain_gpt.py \
    --num-layers 8 --hidden-size 2048 --num-attention-heads 16 \
    --group-query-attention --num-query-groups 4 --seq-length 2048 \
    --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 \
    --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --swiglu \
    --untie-embeddings-and-output-weights --vocab-size 32000 --bf16 \
    --recompute-granularity selective --tp-comm-overlap --lr 3e-4 --data-path $DATA
"""
NEMO = {"trainer": {"num_nodes": 2, "devices": 8, "precision": "bf16"},
        "model": {"mcore_gpt": True, "num_layers": 8, "hidden_size": 2048,
                  "ffn_hidden_size": 5440, "num_attention_heads": 16, "num_query_groups": 4,
                  "encoder_seq_length": 2048, "micro_batch_size": 1, "global_batch_size": 16,
                  "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
                  "virtual_pipeline_model_parallel_size": 2, "context_parallel_size": 1,
                  "sequence_parallel": True, "activation": "fast-swiglu",
                  "share_embeddings_and_output_weights": False,
                  "activations_checkpoint_granularity": "selective",
                  "ub_tp_comm_overlap": True, "fp8": False, "kv_channels": None,
                  "ub_tp_comm_overlap_cfg": {"proj_fprop": {"method": "pipeline",
                                                            "num_sm": 24,
                                                            "set_sm_margin": True}},
                  "tokenizer": {"library": "huggingface", "type": "meta-llama/Llama-2-7b-hf"},
                  "optim": {"name": "distributed_fused_adam", "overlap_grad_sync": True,
                            "overlap_param_sync": False, "lr": 3e-4}}}


def _time(workload) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        return float(simulate(NET, workload, "nccl").time_ns)


@pytest.fixture(scope="module")
def reference() -> float:
    return _time(SPEC)


def test_a_megatron_command_line_is_the_run_it_describes(reference):
    """Megatron-LM's own defaults fill the rest: its SwiGLU width (int(8h/3/64)*64 = 5440),
    virtual stages from layers per stage, TE's userbuffers defaults, DP from the NPUs."""
    assert _time({"generator": "megatron", "device": "h100", "args": ARGS}) == reference


def test_a_launch_script_s_argument_arrays_read_as_they_are():
    """Megatron-LM's example scripts keep the flags in bash arrays, with comments; GPT-2's
    BPE files give its vocabulary."""
    script = """
GPT_MODEL_ARGS=(
    --num-layers 8
    --hidden-size 2048
    --num-attention-heads 16
    --seq-length 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 16
    --bf16   # or --fp16
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2
)
DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --merge-file $MERGE_FILE
)
"""
    gpt = dict(generator="transformer", device="h100", layers=8, hidden=2048, heads=16,
               ffn=8192, sequence=2048, micro_batch=1, global_batch=16, tp=2, pp=2, dp=4,
               vocab=50257, scatter_gather=False)
    assert _time({"generator": "megatron", "device": "h100", "args": script}) == _time(gpt)


def test_the_arguments_may_be_a_list_and_use_underscores(reference):
    args = ARGS.replace("\\\n", " ").split()[3:]
    args = ["--" + a[2:].replace("-", "_") if a.startswith("--num") else a for a in args]
    assert _time({"generator": "megatron", "device": "h100", "args": args}) == reference


def test_a_nemo_config_is_the_run_it_describes(reference, tmp_path):
    """NeMo's names, its tuned userbuffers settings, the vocabulary from the tokenizer."""
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(NEMO))
    spec = tmp_path / "spec.yml"
    spec.write_text("generator: nemo\nconfig: run.yaml\ndevice: h100\n")
    nemo = _time(str(spec))
    assert nemo == _time(dict(SPEC, tp_comm_overlap_cfg="nemo"))
    assert nemo != reference   # the userbuffers settings differ, and are priced


def test_query_groups_need_group_query_attention(reference):
    """Megatron-LM reads --num-query-groups only with --group-query-attention."""
    plain = ARGS.replace("--group-query-attention ", "")
    assert _time({"generator": "megatron", "device": "h100", "args": plain}) == \
        _time(dict(SPEC, kv_heads=16))


def test_nemo_s_userbuffers_need_their_config_and_sequence_parallelism(reference):
    """Without ``ub_tp_comm_overlap_cfg`` Transformer Engine's defaults run them; without
    sequence parallelism NeMo turns them off."""
    model = {k: v for k, v in NEMO["model"].items() if k != "ub_tp_comm_overlap_cfg"}
    assert _time({"generator": "nemo", "device": "h100",
                  "config": dict(NEMO, model=model)}) == reference
    no_sp = dict(NEMO, model=dict(NEMO["model"], sequence_parallel=False))
    assert _time({"generator": "nemo", "device": "h100", "config": no_sp}) == \
        _time(dict(SPEC, sp=False, tp_comm_overlap=False))


def test_a_launch_script_s_hydra_overrides_apply_over_the_config(reference):
    """``overrides``: what a launch script passes on NeMo's command line."""
    off = dict(NEMO, model=dict(NEMO["model"], ub_tp_comm_overlap=False, num_layers=4))
    launched = {"generator": "nemo", "device": "h100", "config": off,
                "overrides": "model.ub_tp_comm_overlap=true \\\n ++model.num_layers=8 "
                             "~model.ub_tp_comm_overlap_cfg"}
    assert _time(launched) == reference
    with pytest.raises(flowsim.ConfigError, match=r"key 'overrides': expected items like "
                                                   r"model.x=y or ~model.x, found 'model.fp8'"):
        simulate(NET, dict(launched, overrides=["model.fp8"]), "nccl")


def test_gradients_reduced_in_bf16_halve_the_data_parallel_bytes():
    """``--grad-reduce-in-bf16`` / ``grad_sync_dtype: bf16``: 16-bit gradient buckets."""
    from flowsim.workload.load import load_workload
    net = flowsim.load_network(NET)

    def grads(spec):
        w = load_workload(spec, net)
        return sum(op.size for p in w.programs for op in p.ops if "grads" in op.name)
    fp32 = grads({"generator": "megatron", "device": "h100", "args": ARGS})
    bf16 = grads({"generator": "megatron", "device": "h100",
                  "args": ARGS + " --grad-reduce-in-bf16"})
    optim = dict(NEMO["model"]["optim"], grad_sync_dtype="bf16")
    nemo = grads({"generator": "nemo", "device": "h100",
                  "config": dict(NEMO, model=dict(NEMO["model"], optim=optim))})
    assert bf16 * 2 == fp32 and nemo == bf16


@pytest.mark.parametrize("flags, recipe", [("", "delayed"),
                                           (" --fp8-recipe tensorwise", "tensorwise"),
                                           (" --fp8-recipe MXFP8", "mxfp8")])
def test_megatron_s_fp8_recipe_is_the_casts_it_prices(flags, recipe):
    """``--fp8-format`` with ``--fp8-recipe``: FP8 GEMMs and casts under that recipe (MXFP8
    needs Blackwell: on H100 it is one line naming the key)."""
    from flowsim.workload.kernels import Quantize

    spec = {"generator": "megatron", "args": ARGS + " --fp8-format hybrid" + flags}
    device = "b200" if recipe == "mxfp8" else "h100"
    work = flowsim.load_workload(dict(spec, device=device), flowsim.load_network(NET))
    casts = {k.recipe for p in work.programs for op in p.ops for k in op.kernels
             if isinstance(k, Quantize)}
    assert casts == {recipe}
    if recipe == "mxfp8":
        with pytest.raises(ConfigError, match="fp8_recipe.*Blackwell"):
            simulate(NET, dict(spec, device="h100"), "nccl")


def test_megatron_s_fp4_format_is_nvfp4_training():
    """``--fp4-format e2m1`` (``--fp4-recipe nvfp4``, its default): the layers' GEMMs in FP4
    with NVFP4 casts, and ``--fp4-param-gather`` their weights gathered in NVFP4; a custom
    recipe is one line naming the flag."""
    from flowsim.workload.kernels import Gemm, Quantize

    keys = megatron_keys(ARGS + " --fp4-format e2m1 --fp4-param-gather", "run.sh")
    assert (keys["dtype"], keys["fp8_recipe"], keys["fp8_param_gather"]) == \
        ("fp8", "nvfp4", True)
    nvfp4 = ARGS.replace("--tp-comm-overlap", "") + " --fp4-format e2m1"
    with pytest.raises(ConfigError, match="'tp_comm_overlap'.*NVFP4"):   # no userbuffers
        flowsim.load_workload({"generator": "megatron", "device": "b200",
                               "args": nvfp4 + " --tp-comm-overlap"}, flowsim.load_network(NET))
    work = flowsim.load_workload({"generator": "megatron", "device": "b200", "args": nvfp4},
                                 flowsim.load_network(NET))
    kernels = [k for p in work.programs for op in p.ops for k in op.kernels]
    assert {k.recipe for k in kernels if isinstance(k, Quantize)} == {"nvfp4"}
    assert {k.dtype for k in kernels if isinstance(k, Gemm)} == {"fp4", "bf16"}
    with pytest.raises(ConfigError, match="'--fp4-recipe'.*nvfp4"):
        megatron_keys(ARGS + " --fp4-format e2m1 --fp4-recipe custom", "run.sh")
    # what Megatron-LM refuses: an FP4 recipe as the FP8 one, FP4 gathers without FP4, both
    for flags, key in ((" --fp8-format hybrid --fp8-recipe nvfp4", "--fp8-recipe"),
                       (" --fp4-param-gather", "--fp4-param-gather"),
                       (" --fp8-format hybrid --fp4-format e2m1", "--fp4-format")):
        with pytest.raises(ConfigError, match=f"'{key}'"):
            megatron_keys(ARGS + flags, "run.sh")


def test_megatron_s_blockwise_recipe_is_said_and_an_unknown_one_named():
    spec = ARGS + " --fp8-format hybrid --fp8-recipe "
    with pytest.warns(FlowsimWarning, match="--fp8-recipe blockwise: priced as tensorwise"):
        assert megatron_keys(spec + "blockwise", "run.sh")["fp8_recipe"] == "tensorwise"
    with pytest.raises(ConfigError, match="'--fp8-recipe'.*delayed, tensorwise, mxfp8"):
        megatron_keys(spec + "custom", "run.sh")


def test_the_fused_cross_entropy_is_read_from_both_tools():
    """``--cross-entropy-loss-fusion`` / ``model.cross_entropy_loss_fusion``: the fused
    cross entropy (off by default in both: Megatron-LM's default, and NeMo 1's, which copies
    Megatron-Core's fields from the model config)."""
    from flowsim.workload.load import load_workload
    net = flowsim.load_network(NET)

    def loss_bytes(spec):
        w = load_workload(spec, net)
        return sum(k.bytes for p in w.programs for op in p.ops if op.kind == "compute"
                   for k in op.kernels if getattr(k, "name", "").startswith("cross_entropy"))
    unfused = loss_bytes({"generator": "megatron", "device": "h100", "args": ARGS})
    fused = loss_bytes({"generator": "megatron", "device": "h100",
                        "args": ARGS + " --cross-entropy-loss-fusion"})
    nemo = loss_bytes({"generator": "nemo", "device": "h100", "config": dict(
        NEMO, model=dict(NEMO["model"], cross_entropy_loss_fusion=True))})
    assert fused * 52 == unfused * 28 and nemo == fused
    assert loss_bytes({"generator": "nemo", "device": "h100", "config": NEMO}) == unfused
    # --cross-entropy-fusion-impl te: Transformer Engine's kernels (10 bytes per logit), only
    # with the fusion on (Megatron-Core runs the unfused one without it)
    te = loss_bytes({"generator": "megatron", "device": "h100", "args": ARGS
                     + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te"})
    alone = loss_bytes({"generator": "megatron", "device": "h100",
                        "args": ARGS + " --cross-entropy-fusion-impl te"})
    assert te * 28 == fused * 10 and alone == unfused
    with pytest.raises(ConfigError, match=r"key '--cross-entropy-fusion-impl': expected "
                                          r"native or te, found 'liger'"):
        loss_bytes({"generator": "megatron", "device": "h100", "args": ARGS
                    + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl liger"})


def test_fully_sharded_data_parallelism_is_read_from_both_tools(reference):
    """``--use-torch-fsdp2`` (which Megatron-LM refuses with pipelining, expert parallelism
    or its distributed optimizer; reducing in the 16-bit parameters' type, as ``fully_shard``
    without a mixed-precision policy does), ``--use-megatron-fsdp`` with its default sharding
    strategy (``optim_grads_params``, ``fsdp_impl: megatron``) and NeMo 1's ``fsdp`` with
    its default ``full`` sharding (PyTorch's FSDP1, reducing in ``fsdp_grad_reduce_dtype``,
    FP32 unless set) are ``fsdp``; NeMo's ``hybrid`` shards over a node's data-parallel ranks;
    Megatron-FSDP sharding only the optimizer is the distributed optimizer; NeMo's other
    sharding strategies are named as left out."""
    fsdp = _time(dict(SPEC, fsdp=True))
    assert fsdp != reference
    megatron_fsdp = ARGS.replace("--use-distributed-optimizer", "--use-megatron-fsdp")
    assert _time({"generator": "megatron", "device": "h100", "args": megatron_fsdp}) == \
        _time(dict(SPEC, fsdp=True, fsdp_impl="megatron"))
    zero1 = megatron_fsdp + " --data-parallel-sharding-strategy optim"
    assert _time({"generator": "megatron", "device": "h100", "args": zero1}) == reference
    no_pp = ARGS.replace("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-"
                         "stage 2", "")
    torch_fsdp2 = no_pp.replace("--use-distributed-optimizer", "--use-torch-fsdp2")
    assert _time({"generator": "megatron", "device": "h100", "args": torch_fsdp2}) == \
        _time(dict(SPEC, fsdp=True, pp=1, vpp=1, dp=8, grad_reduce_in_bf16=True))
    with pytest.raises(flowsim.ConfigError, match=r"--use-torch-fsdp2 with "
                                                   r"--use-distributed-optimizer, --pp 2"):
        simulate(NET, {"generator": "megatron", "device": "h100",
                       "args": ARGS + " --use-torch-fsdp2"}, "nccl")
    model = dict(NEMO["model"], ub_tp_comm_overlap_cfg=None, fsdp=True)
    nemo_fsdp = dict(SPEC, fsdp=True, fsdp_impl="fsdp1", grad_reduce_in_bf16=False)
    assert _time({"generator": "nemo", "device": "h100",
                  "config": dict(NEMO, model=model)}) == _time(nemo_fsdp)
    for dtype in ("bf16", "bf16-mixed", 16):
        bf16 = dict(model, fsdp_grad_reduce_dtype=dtype)
        assert _time({"generator": "nemo", "device": "h100",
                      "config": dict(NEMO, model=bf16)}) == \
            _time(dict(nemo_fsdp, grad_reduce_in_bf16=True))
    hybrid = dict(model, fsdp_sharding_strategy="hybrid")   # 8 GPUs a node, TP 2: shard 4
    assert _time({"generator": "nemo", "device": "h100",
                  "config": dict(NEMO, model=hybrid)}) == \
        _time(dict(nemo_fsdp, fsdp_shard=4))
    deep = dict(hybrid, tensor_model_parallel_size=1, pipeline_model_parallel_size=8,
                virtual_pipeline_model_parallel_size=None, sequence_parallel=False,
                ub_tp_comm_overlap=False)   # dp 2, but 8 data-parallel ranks a node asked
    with pytest.raises(flowsim.ConfigError, match=r"fsdp_shard.*read from "
                                                   r"model.fsdp_sharding_strategy hybrid"):
        simulate(NET, {"generator": "nemo", "device": "h100",
                       "config": dict(NEMO, model=deep)}, "nccl")
    odd = dict(model, fsdp_sharding_strategy="no_shard")
    with pytest.warns(FlowsimWarning, match="fsdp_sharding_strategy no_shard"):
        simulate(NET, {"generator": "nemo", "device": "h100",
                       "config": dict(NEMO, model=odd)}, "nccl")


def test_the_attention_backend_is_the_kernel_transformer_engine_runs(reference):
    """``--attention-backend``: ``auto`` (the default) and ``fused`` are cuDNN's fused
    attention (flowsim's ``flash``), ``flash`` the flash-attn package's FlashAttention-2
    (``flash2``), ``unfused`` and ``local`` Megatron's own."""
    base = ARGS.replace("--bf16", "--bf16 --attention-backend {}")
    for backend, attention in (("auto", "flash"), ("fused", "flash"), ("flash", "flash2"),
                               ("unfused", "unfused")):
        spec = {"generator": "megatron", "device": "h100", "args": base.format(backend)}
        assert _time(spec) == _time(dict(SPEC, attention=attention)), backend
    assert _time(dict(SPEC, attention="flash2")) > reference   # FA2 is slower on H100


LAUNCH_SCRIPT = r"""#!/bin/bash
# as Megatron-LM's examples/ write them: sizes in variables, flags in bash arrays
GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
TP=${TP:-2}
PP=2
NUM_LAYERS=8   # two virtual stages of two layers per rank
DTYPE="bf16"
MODEL_ARGS=(
    --num-layers $NUM_LAYERS --hidden-size 2048 --num-attention-heads 16
    --group-query-attention --num-query-groups 4 --seq-length 2048
    --swiglu --untie-embeddings-and-output-weights --vocab-size 32000
)
TRAINING_ARGS=( --micro-batch-size 1 --global-batch-size 16 --recompute-granularity selective )
if [[ "$DTYPE" == "bf16" ]]; then
    TRAINING_ARGS+=( "--bf16" )
fi
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size ${TP}
    --pipeline-model-parallel-size $PP
    # --context-parallel-size 2
    "--num-layers-per-virtual-pipeline-stage 2"
    --sequence-parallel --tp-comm-overlap
    --use-distributed-optimizer --overlap-grad-reduce
)
torchrun --nproc_per_node $GPUS_PER_NODE pretrain_gpt.py "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}" --data-path $DATA
"""


def test_a_launch_script_is_read_with_its_variables(reference):
    """A launch script as written (its literal variables substituted, its comments and bash
    arrays skipped, a quoted "flag value" item split) gives the run its flags describe;
    ``env`` sets what the script leaves to the environment; a variable nothing sets is one
    line naming the flag and saying so."""
    script = {"generator": "megatron", "device": "h100", "args": LAUNCH_SCRIPT}
    assert _time(script) == reference
    assert _time(dict(script, env={"TP": 4})) == _time(dict(SPEC, tp=4, dp=2))
    broken = LAUNCH_SCRIPT.replace("PP=2\n", "")
    with pytest.raises(flowsim.ConfigError, match=r"'--pipeline-model-parallel-size': "
                                                   r"expected a number \(a shell variable "
                                                   r"the text does not set: give it in "
                                                   r"'env'\), found '\$PP'"):
        simulate(NET, dict(script, args=broken), "nccl")
    assert _time(dict(script, args=broken, env={"PP": 2})) == reference
    with pytest.raises(flowsim.ConfigError, match=r"key 'env': expected a mapping of shell "
                                                   r"variable names"):
        simulate(NET, dict(script, env=["TP=2"]), "nccl")


def test_a_launch_script_is_read_from_its_file(reference, tmp_path):
    """``script``: the launch script's path, relative to the spec file; the errors its flags
    raise name the script; with ``args`` too, or unreadable, one line naming the key."""
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "train.sh").write_text(LAUNCH_SCRIPT)
    spec = tmp_path / "spec.yml"
    spec.write_text("generator: megatron\ndevice: h100\nscript: launch/train.sh\n")
    assert _time(str(spec)) == reference
    (tmp_path / "launch" / "broken.sh").write_text(LAUNCH_SCRIPT.replace("PP=2\n", ""))
    spec.write_text("generator: megatron\ndevice: h100\nscript: launch/broken.sh\n")
    with pytest.raises(flowsim.ConfigError, match=r"broken\.sh: args: key "
                                                   r"'--pipeline-model-parallel-size'"):
        simulate(NET, str(spec), "nccl")
    spec.write_text("generator: megatron\nscript: launch/absent.sh\n")
    with pytest.raises(flowsim.ConfigError, match=r"spec\.yml: key 'script': cannot read "
                                                   r".*absent\.sh"):
        simulate(NET, str(spec), "nccl")
    spec.write_text("generator: megatron\nscript: launch/train.sh\nargs: --bf16\n")
    with pytest.raises(flowsim.ConfigError, match=r"key 'script': expected absent beside "
                                                   r"'args'"):
        simulate(NET, str(spec), "nccl")


def test_rotary_embeddings_are_read_from_either_tool(reference, tmp_path):
    """Megatron-LM's ``--position-embedding-type`` and NeMo's ``position_embedding_type``:
    ``rope`` and its variants price the rotary kernels (slower than the default learned
    embeddings); ALiBi and the relative-bias kinds live in the attention kernel (the
    default's time); an unknown type is one line naming the option."""
    rope = _time(dict(SPEC, position_embedding="rope"))
    assert rope > reference
    for flags, expected in (("--position-embedding-type rope", rope),
                            ("--position-embedding-type yarn", rope),
                            ("--use-rotary-position-embeddings", rope),   # deprecated switch
                            ("--position-embedding-type relative", reference),
                            ("--position-embedding-type learned_absolute", reference)):
        spec = {"generator": "megatron", "device": "h100",
                "args": ARGS.replace("--bf16", f"--bf16 {flags}")}
        assert _time(spec) == expected, flags
    unfused = ARGS.replace("--bf16", "--bf16 --position-embedding-type rope --no-rope-fusion")
    with pytest.warns(FlowsimWarning, match="--no-rope-fusion"):
        simulate(NET, {"generator": "megatron", "device": "h100", "args": unfused}, "nccl")
    model = dict(NEMO["model"], position_embedding_type="rope", apply_rope_fusion=True)
    assert _time({"generator": "nemo", "device": "h100", "config": dict(NEMO, model=model)}) \
        == _time(dict(SPEC, position_embedding="rope", tp_comm_overlap_cfg="nemo"))
    with pytest.warns(FlowsimWarning, match="apply_rope_fusion is off"):   # NeMo's default
        simulate(NET, {"generator": "nemo", "device": "h100", "config": dict(
            NEMO, model=dict(model, apply_rope_fusion=False))}, "nccl")
    with pytest.warns(FlowsimWarning, match="position_embedding_type' is an interpolation"):
        simulate(NET, {"generator": "nemo", "device": "h100", "config": dict(
            NEMO, model=dict(model, position_embedding_type="${oc.env:PE}"))}, "nccl")
    # ALiBi: BigScience's Megatron-DeepSpeed (BLOOM) has it, in the attention kernel
    alibi = ARGS.replace("--bf16", "--bf16 --position-embedding-type alibi")
    assert _time({"generator": "megatron", "device": "h100", "args": alibi}) == reference
    bad = ARGS.replace("--bf16", "--bf16 --position-embedding-type sinusoid")
    with pytest.raises(flowsim.ConfigError, match=r"'--position-embedding-type': expected one "
                                                   r"of learned_absolute, rope, yarn, mrope, "
                                                   r"relative, none, alibi, found 'sinusoid'"):
        simulate(NET, {"generator": "megatron", "device": "h100", "args": bad}, "nccl")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(dict(
        NEMO, model=dict(model, position_embedding_type="sinusoid"))))
    spec = tmp_path / "spec.yml"
    spec.write_text("generator: nemo\nconfig: run.yaml\ndevice: h100\n")
    with pytest.raises(flowsim.ConfigError, match=r"run\.yaml: key 'model.position_embedding_"
                                                   r"type': expected one of"):
        simulate(NET, str(spec), "nccl")   # the error names the YAML that holds the key


def test_keys_beside_the_configuration_win():
    wide = _time({"generator": "megatron", "device": "h100", "args": ARGS, "ffn": 8192})
    assert wide == _time(dict(SPEC, ffn=8192))


def test_flags_that_cannot_be_read_are_one_line_naming_them(tmp_path):
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump({"generator": "megatron", "device": "h100",
                                    "args": ARGS.replace("--tensor-model-parallel-size 2",
                                                         "--tensor-model-parallel-size $TP")}))
    with pytest.raises(flowsim.ConfigError, match=r"spec\.yml: args: key "
                                                   r"'--tensor-model-parallel-size': expected a "
                                                   r"number \(a shell variable the text does "
                                                   r"not set: give it in 'env'\), found "
                                                   r"'\$TP'"):
        simulate(NET, str(spec), "nccl")


def test_an_unclosed_quote_is_one_line():
    with pytest.raises(flowsim.ConfigError, match=r"key 'args': expected a command line "
                                                   r"shlex can split \(No closing quotation\)"):
        simulate(NET, {"generator": "megatron", "args": ARGS + ' --data-path "x'}, "nccl")
    with pytest.raises(flowsim.ConfigError, match=r"key 'overrides': expected items shlex can "
                                                   r"split"):
        simulate(NET, {"generator": "nemo", "config": NEMO, "overrides": "model.x='1"},
                 "nccl")


def test_a_bad_value_is_named_as_the_tool_names_it():
    """A value the transformer refuses names the flag or NeMo key it was read from; a key
    given beside the configuration is named as given."""
    config = dict(NEMO, model=dict(NEMO["model"], num_layers=0))
    with pytest.raises(flowsim.ConfigError, match=r"key 'layers': expected an integer >= 1, "
                                                   r"found 0 \(read from model.num_layers in "
                                                   r"'config'\)$"):
        simulate(NET, {"generator": "nemo", "device": "h100", "config": config}, "nccl")
    args = ARGS.replace("--num-attention-heads 16", "--num-attention-heads 7")
    with pytest.raises(flowsim.ConfigError, match=r"\(read from --num-attention-heads in "
                                                   r"'args'\)$"):
        simulate(NET, {"generator": "megatron", "device": "h100", "args": args}, "nccl")
    with pytest.raises(flowsim.ConfigError, match=r"key 'layers': expected an integer >= 1, "
                                                   r"found 0$"):
        simulate(NET, {"generator": "megatron", "args": ARGS, "layers": 0}, "nccl")


def test_model_parallel_sizes_that_do_not_divide_the_npus_are_one_line():
    args = ARGS.replace("--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size 3")
    args = args.replace("--num-layers 8", "--num-layers 12")
    with pytest.raises(flowsim.ConfigError, match=r"args: tensor x pipeline x context parallel"
                                                   r" = 6 does not divide the network's 16"):
        simulate(NET, {"generator": "megatron", "device": "h100", "args": args}, "nccl")


def test_unknown_keys_and_a_missing_configuration_name_the_key(tmp_path):
    with pytest.raises(flowsim.ConfigError, match=r"key 'layerz': expected 'args' or a "
                                                   r"transformer key"):
        simulate(NET, {"generator": "megatron", "args": ARGS, "layerz": 2}, "nccl")
    with pytest.raises(flowsim.ConfigError, match=r"key 'config': expected the configuration"):
        simulate(NET, {"generator": "nemo", "device": "h100"}, "nccl")
    spec = tmp_path / "spec.yml"
    spec.write_text("generator: nemo\nconfig: absent.yaml\n")
    with pytest.raises(flowsim.ConfigError, match=r"spec\.yml: key 'config': cannot read "
                                                   r".*absent\.yaml"):
        simulate(NET, str(spec), "nccl")


def test_what_is_left_out_is_said():
    """No vocabulary: the embedding and output layers are left out, with a warning; flags
    that shape the time but have no key are named."""
    args = ARGS.replace("--vocab-size 32000", "--num-distributed-optimizer-instances 2")
    with pytest.warns(FlowsimWarning) as caught:
        simulate(NET, {"generator": "megatron", "device": "h100", "args": args}, "nccl")
    messages = " ".join(str(w.message) for w in caught)
    assert "no vocabulary size" in messages
    assert "--num-distributed-optimizer-instances" in messages


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(changes=st.lists(st.tuples(st.sampled_from(sorted(VALUED) + SPECIAL_VALUED),
                                  st.sampled_from(["0", "-3", "abc", "$TP", "1.5", "1e9", "7",
                                                   "3", "selective", "none", "=", ""])),
                        min_size=1, max_size=3))
def test_any_flag_value_runs_or_is_one_line(changes):
    """Mutated flags give a workload or one ConfigError line, never a crash."""
    args = ARGS + " " + " ".join(f"--{flag} {value}" for flag, value in changes)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FlowsimWarning)
            simulate(NET, {"generator": "megatron", "device": "h100", "args": args}, "nccl",
                     max_work=2e8)
    except flowsim.ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<dict>")


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(changes=st.lists(st.tuples(
    st.sampled_from(sorted(NUMBERS) + ["activation", "optim", "tokenizer", "fp8", "fp8_params",
                                       "ub_tp_comm_overlap_cfg", "sequence_parallel",
                                       "activations_checkpoint_granularity"]),
    st.sampled_from([0, -1, 3, 2.5, "x", "${a.b}", None, True, [1], {"a": 1}, 10 ** 9])),
    min_size=1, max_size=3))
def test_any_nemo_value_runs_or_is_one_line(changes):
    """Mutated NeMo keys give a workload or one ConfigError line, never a crash."""
    model = dict(NEMO["model"], **dict(changes))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FlowsimWarning)
            simulate(NET, {"generator": "nemo", "device": "h100",
                           "config": dict(NEMO, model=model)}, "nccl", max_work=2e8)
    except flowsim.ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<dict>")


def test_aligned_parameter_gathers_follow_each_framework_s_default(tmp_path):
    """Megatron-LM aligns the interleaved schedule's parameter gathers unless told
    ``--no-align-param-gather``; NeMo 1 only with ``optim.align_param_gather`` (and never
    with Apex's optimizer). Each reads as the spec that says so, and the two differ."""
    args = ARGS + " --overlap-param-gather"
    spec = {**SPEC, "overlap_param_gather": True}
    aligned, chained = _time(spec), _time({**spec, "align_param_gather": False})
    assert aligned != chained
    assert _time({"generator": "megatron", "device": "h100", "args": args}) == aligned
    assert _time({"generator": "megatron", "device": "h100",
                  "args": args + " --no-align-param-gather"}) == chained
    assert _time({"generator": "megatron", "device": "h100",   # r0.8's opt-in name
                  "args": args + " --delay-param-gather"}) == aligned
    nemo = {**spec, "tp_comm_overlap_cfg": "nemo"}   # NeMo's tuned userbuffers
    aligned, chained = _time(nemo), _time({**nemo, "align_param_gather": False})
    for optim, expected in (({"overlap_param_sync": True}, chained),
                            ({"overlap_param_sync": True, "align_param_gather": True},
                             aligned)):
        config = {**NEMO, "model": {**NEMO["model"], "optim": {
            **NEMO["model"]["optim"], "name": "mcore_distributed_optim", **optim}}}
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / "spec.yml").write_text("generator: nemo\nconfig: run.yaml\ndevice: h100\n")
        assert _time(str(tmp_path / "spec.yml")) == expected


def test_aligned_gradient_reductions_follow_each_framework_s_default(tmp_path):
    """Megatron-LM delays and aligns a pipeline's gradient reductions unless told
    ``--no-align-grad-reduce`` (r0.8: ``--no-delay-grad-reduce``); NeMo 1 does with Apex's
    optimizer and, by default, with Megatron-Core's."""
    aligned, plain = _time(SPEC), _time({**SPEC, "align_grad_reduce": False})
    assert aligned != plain
    for flag in ("--no-align-grad-reduce", "--no-delay-grad-reduce"):
        assert _time({"generator": "megatron", "device": "h100",
                      "args": ARGS + " " + flag}) == plain
    nemo = {**SPEC, "tp_comm_overlap_cfg": "nemo"}
    for optim, expected in (({}, nemo), ({"name": "mcore_distributed_optim"}, nemo),
                            ({"name": "mcore_distributed_optim", "align_grad_reduce": False},
                             {**nemo, "align_grad_reduce": False})):
        config = {**NEMO, "model": {**NEMO["model"], "optim": {
            **NEMO["model"]["optim"], **optim}}}
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / "spec.yml").write_text("generator: nemo\nconfig: run.yaml\ndevice: h100\n")
        assert _time(str(tmp_path / "spec.yml")) == _time(expected)


def test_nemo_s_optimizer_switches_are_true_or_false(tmp_path):
    """A quoted ``"false"`` would have read as true: a switch of ``model.optim`` that is
    not a boolean is one error naming it; an interpolation is NeMo's default, with a
    warning."""
    for key, value in (("overlap_param_sync", "false"), ("align_grad_reduce", 2)):
        config = {**NEMO, "model": {**NEMO["model"], "optim": {
            **NEMO["model"]["optim"], "name": "mcore_distributed_optim", key: value}}}
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / "spec.yml").write_text("generator: nemo\nconfig: run.yaml\ndevice: h100\n")
        with pytest.raises(ConfigError, match=rf"run\.yaml: key 'model\.optim\.{key}': "
                                              rf"expected true or false, found '?{value}"):
            _time(str(tmp_path / "spec.yml"))
    config = {**NEMO, "model": {**NEMO["model"], "optim": {
        **NEMO["model"]["optim"], "overlap_param_sync": "${oc.env:OVERLAP}"}}}
    with pytest.warns(FlowsimWarning, match=r"model\.optim\.overlap_param_sync.*interpolation"):
        keys = nemo_keys(config, "run.yaml")
    assert keys["overlap_param_gather"] is False   # NeMo's default


def test_nemo_s_model_switches_are_true_or_false(tmp_path):
    """The model's own switches read as the optimizer's do: ``fp8: "false"`` is one error
    naming ``model.fp8`` (it would have priced the run in FP8), an interpolation is NeMo's
    default with a warning, and a boolean sets the key."""
    for key, value in (("fp8", "false"), ("sequence_parallel", "True"), ("mcore_gpt", 1),
                       ("fp8_params", "no"), ("fp8_dot_product_attention", "yes")):
        config = {**NEMO, "model": {**NEMO["model"], key: value}}
        with pytest.raises(ConfigError, match=rf"run\.yaml.*: key 'model\.{key}': "
                                              rf"expected true or false, found '?{value}"):
            nemo_keys(config, "run.yaml")
    config = {**NEMO, "model": {**NEMO["model"], "fp8": "${oc.env:FP8}", "mcore_gpt": True}}
    with pytest.warns(FlowsimWarning, match=r"model\.fp8.*interpolation"):
        keys = nemo_keys(config, "run.yaml")
    assert keys["dtype"] != "fp8" and keys["scatter_gather"] is False
    keys = nemo_keys({**NEMO, "model": {**NEMO["model"], "fp8": True}}, "run.yaml")
    assert keys["dtype"] == "fp8"
    keys = nemo_keys({**NEMO, "model": {**NEMO["model"], "fp8": True,
                                        "fp8_dot_product_attention": True}}, "run.yaml")
    assert keys["fp8_attention"] is True


@pytest.mark.parametrize("method, count, expected", [
    ("block", "3", {"recompute": "full", "recompute_layers": 3}),
    ("block", "0", {"recompute": "none"}),
    ("uniform", "4", {"recompute": "full"}),   # groups of 4: every layer runs again
])
def test_recompute_method_picks_the_layers_both_tools_recompute(method, count, expected):
    """Megatron-Core's block method re-runs the first N layers of each model chunk; the
    uniform method re-runs them all (checkpointing groups of N); read alike from
    Megatron-LM's flags and NeMo's ``activations_checkpoint_*``."""
    args = ARGS.replace("--recompute-granularity selective", "--recompute-granularity full "
                        f"--recompute-method {method} --recompute-num-layers {count}")
    nemo = {**NEMO, "model": {**NEMO["model"], "activations_checkpoint_granularity": "full",
                              "activations_checkpoint_method": method,
                              "activations_checkpoint_num_layers": int(count)}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlowsimWarning)   # nothing left unpriced
        for keys in (megatron_keys(args, "train.sh"), nemo_keys(nemo, "run.yaml")):
            assert {k: keys.get(k) for k in expected} == expected


def test_the_fp8_activation_input_store_is_read_from_every_megatron_tool():
    """``--activation-func-fp8-input-store`` (Megatron-LM), ``model.activation_func_fp8_input
    _store`` (NeMo 1's config, which copies Megatron-Core's fields, and Megatron-Bridge's
    run_config.yaml): off unless set, as in Megatron-Core."""
    from test_megatron_bridge import _run

    from flowsim.workload.generators.megatron_bridge import bridge_keys
    key = "activation_func_fp8_input_store"
    assert megatron_keys(ARGS + " --activation-func-fp8-input-store", "run.sh")[key] is True
    assert not megatron_keys(ARGS, "run.sh").get(key)
    assert nemo_keys(dict(NEMO, model=dict(NEMO["model"], **{key: True})), "run.yaml")[key]
    assert not nemo_keys(NEMO, "run.yaml")[key]
    assert bridge_keys(_run(**{key: True}), "<test>")[key] is True
    assert not bridge_keys(_run(), "<test>")[key]
