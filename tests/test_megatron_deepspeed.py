"""Megatron-DeepSpeed launch scripts and Megatron-LM's pre-3.0 flags, read by
``generator: megatron``: a script laid out as BigScience's BLOOM-176B one is (flags in
multi-line quoted variables, the command in a quoted string with a backquote, a commented-out
flag line ending in a backslash) is the run its transcribed row describes
(``validation/published/bloom2022.csv``), and each DeepSpeed setting on its own."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

import flowsim
from flowsim import ConfigError, FlowsimWarning
from flowsim.workload.generators.megatron import megatron_keys
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.generators.transformer_schedule import layer_counts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import validate_published  # noqa: E402

#: a launch script with BLOOM-176B's settings, in the layout of BigScience's tr11 script
BLOOM_STYLE = r'''#!/bin/bash
set -x -e
REPO=$WORK/code/Megatron-DeepSpeed
cd $REPO
GPUS_PER_NODE=8
NNODES=$SLURM_NNODES
TP_SIZE=4
PP_SIZE=12
MICRO_BATCH_SIZE=2
GLOBAL_BATCH_SIZE=2048
NHIDDEN=14336
NLAYERS=70
NHEADS=112
SEQ_LEN=2048

OPTIMIZER_ARGS=" \
    --optimizer adam \
    --lr 6e-5 \
    --clip-grad 1.0 \
    "
GPT_ARGS=" \
    --pp-partition-method 'type:transformer|embedding' \
    --num-layers $NLAYERS \
    --hidden-size $NHIDDEN \
    --num-attention-heads $NHEADS \
    --seq-length $SEQ_LEN \
    --max-position-embeddings $SEQ_LEN \
    --micro-batch-size $MICRO_BATCH_SIZE \
    --rampup-batch-size 192 16 9_765_625 \
    --global-batch-size $GLOBAL_BATCH_SIZE \
    --tokenizer-type PretrainedFromHF \
    --bf16 \
    --position-embedding-type alibi \
    --checkpoint-activations \
    --kill-switch-path $REPO/kill-switch \
    --pad-vocab-size-to 250880 \
    $OPTIMIZER_ARGS \
    "
ZERO_STAGE=0
config_json="./ds_config.$SLURM_JOB_ID.json"
cat <<EOT > $config_json
{
  "train_micro_batch_size_per_gpu": $MICRO_BATCH_SIZE,
  "zero_optimization": {"stage": $ZERO_STAGE},
  "bf16": {"enabled": true}
}
EOT
DEEPSPEED_ARGS=" \
    --deepspeed \
    --deepspeed_config ${config_json} \
    --zero-stage ${ZERO_STAGE} \
    --deepspeed-activation-checkpointing \
    "
#    --universal-checkpoint \
export CMD=" \
    `pwd`/pretrain_gpt.py \
    --tensor-model-parallel-size $TP_SIZE \
    --pipeline-model-parallel-size $PP_SIZE \
    $GPT_ARGS \
    --save $REPO/checkpoints \
    --distributed-backend nccl \
     $DEEPSPEED_ARGS \
    "
srun --jobid $SLURM_JOB_ID bash -c "$LAUNCHER --node_rank \$SLURM_PROCID $CMD"
'''
(BLOOM,) = validate_published.rows("bloom176b_384gpu")


def _keys(args: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        return megatron_keys(args, "train.slurm")


def test_a_bloom_style_script_is_its_transcribed_row(tmp_path):
    keys = _keys(BLOOM_STYLE)
    assert {k: keys[k] for k in ("layers", "hidden", "heads", "tp", "pp", "micro_batch",
                                 "global_batch", "vocab")} == \
        {"layers": 70, "hidden": 14336, "heads": 112, "tp": 4, "pp": 12, "micro_batch": 2,
         "global_batch": 2048, "vocab": 250880}
    # full recomputation, BF16_Optimizer's sharding, Megatron's unfused attention, ALiBi,
    # DeepSpeed's partitioned pipeline sends, the embeddings counted as a layer each
    assert (keys["recompute"], keys["distributed_optimizer"], keys["attention"],
            keys["position_embedding"], keys["scatter_gather"], keys["pipeline_layout"]) == \
        ("full", True, "unfused", "alibi", True, "embedding_weighted")
    assert _layers(keys) == [5] + [6] * 10 + [5]
    (tmp_path / "train.slurm").write_text(BLOOM_STYLE)
    spec = {"generator": "megatron", "script": str(tmp_path / "train.slurm"),
            "vocab": int(BLOOM["vocab"])}   # padded to the same 250880 either way
    network = validate_published.network(BLOOM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        read = flowsim.simulate(network, spec, "nccl", model="analytical")
        row = flowsim.simulate(network, validate_published.spec(BLOOM), "nccl",
                               model="analytical")
    assert float(read.time_ns) == float(row.time_ns)


BASE = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
        "--micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 2 ")


@pytest.mark.parametrize("flags, expected", [
    ("--bf16 --deepspeed --zero-stage 0", {"distributed_optimizer": True}),
    ("--fp16 --deepspeed --zero-stage 0", {"distributed_optimizer": False}),
    ("--fp16 --deepspeed", {"distributed_optimizer": True}),   # Megatron-DeepSpeed's default 1
    ("--bf16 --deepspeed --zero-stage 3", {"fsdp": True}),
    ("--bf16 --deepspeed --use-flash-attn-v2", {"attention": "flash2"}),
    ("--bf16 --deepspeed", {"attention": "unfused", "scatter_gather": True}),
    ("--bf16 --deepspeed --no-pipeline-parallel", {"scatter_gather": False}),
    ("--bf16", {"attention": "flash", "scatter_gather": False}),   # today's Megatron-LM
    ("--bf16 --checkpoint-activations", {"recompute": "full", "attention": "unfused",
                                         "scatter_gather": True}),   # Megatron-LM 2.x
    ("--bf16 --checkpoint-activations --activations-checkpoint-method uniform "
     "--activations-checkpoint-num-layers 1", {"recompute": "full"}),
    ("--bf16 --deepspeed --position-embedding-type rotary", {"position_embedding": "rope"}),
])
def test_each_setting(flags, expected):
    keys = {"attention": "flash", **_keys(BASE + flags)}   # the transformer's default
    assert {k: keys.get(k, False) for k in expected} == expected


def test_deepspeed_moe_as_megatron_deepspeed_builds_it():
    """Experts in every 2nd layer counted from 1, top-1 routing, expert parallelism inside
    the data-parallel ranks; PR-MoE's per-layer counts priced as the largest (warned), its
    residual MLP as a shared expert; ``--num-experts 1`` is dense."""
    flags = ("--bf16 --deepspeed --num-experts 8 --moe-expert-parallel-size 4 "
             "--moe-train-capacity-factor 1.5")
    keys = _keys(BASE + flags)
    assert (keys["experts"], keys["ep"], keys["top_k"], keys["expert_layout"],
            keys["capacity_factor"], keys["moe_layer_freq"]) == \
        (8, 4, 1, "within_dp", 1.5, [0, 1] * 4)
    with pytest.warns(FlowsimWarning, match="priced as 8 in each"):
        pyramid = megatron_keys(BASE + "--bf16 --deepspeed --num-experts 4 4 4 8 "
                                "--expert-interval 2 --mlp-type residual --topk 2", "t.sh")
    assert (pyramid["experts"], pyramid["top_k"], pyramid["shared_ffn"]) == (8, 2, 4096)
    assert "experts" not in _keys(BASE + "--bf16 --deepspeed --num-experts 1")
    node = flowsim.load_network({"cluster": {"device": "a100", "nodes": 1, "gpus_per_node": 8,
                                             "nic_gbps": 200, "nics_per_node": 8}})
    spec = {"generator": "megatron", "vocab": 50257,
            "args": BASE.replace("2 --pipeline-model-parallel-size 2", "1") + flags}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        assert float(flowsim.simulate(node, spec, "nccl", model="flow").time_ns) > 0


def test_ulysses_is_context_parallelism_by_all_to_all():
    keys = _keys(BASE + "--bf16 --deepspeed --ds-sequence-parallel-size 4")
    assert (keys["cp"], keys["cp_comm_type"]) == (4, "a2a")


def test_a_script_ending_in_a_backslash_reads():
    assert _keys(BASE + "--bf16 \\\n")["layers"] == 8


def _layers(keys: dict) -> list[int]:
    """The layers of each pipeline stage the keys give (data parallelism to fill 8 GPUs)."""
    values = {k: v for k, v in keys.items() if k != "micro_batches"}
    values.update(dp=1, global_batch=values["micro_batch"] * 8, tp=1, cp=1)
    return layer_counts(parse_transformer(values, "t.sh"))


def test_the_default_partition_gives_the_first_stages_one_layer_more():
    keys = _keys(BASE.replace("--num-layers 8", "--num-layers 7") + "--bf16 --deepspeed")
    assert (keys["pipeline_layout"], _layers(keys)) == ("uniform", [4, 3])
    # a number of layers given beside the script is split by the same rule
    assert _layers({**keys, "layers": 9}) == [5, 4]


@pytest.mark.parametrize("flags, flag", [
    ("--deepspeed --zero-stage 4", "--zero-stage"),
    ("--deepspeed --pp-partition-method parameters", "--pp-partition-method"),
    ("--pad-vocab-size-to many", "--pad-vocab-size-to"),
    ("--deepspeed --num-experts $E 16", "--num-experts"),
])
def test_bad_values_are_named(flags, flag):
    with pytest.raises(ConfigError, match=flag):
        _keys(BASE + "--bf16 " + flags)


def test_partial_recomputation_is_read_under_its_old_name():
    keys = megatron_keys(BASE + "--bf16 --checkpoint-activations --activations-checkpoint-"
                         "method block --activations-checkpoint-num-layers 2", "train.sh")
    assert keys["recompute"] == "full" and keys["recompute_layers"] == 2
    with pytest.warns(FlowsimWarning, match="priced as every layer recomputed"):
        megatron_keys(BASE + "--bf16 --checkpoint-activations --activations-checkpoint-method "
                      "block --activations-checkpoint-num-layers $N", "train.sh")
