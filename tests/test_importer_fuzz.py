"""The importers (Megatron-LM arguments, NeMo 1 configs, NeMo 2 recipes, Megatron-Bridge run
configs, LLM Foundry YAMLs, torchtitan job configs) under random command-line items: a
workload, or one line naming what is wrong — never a crash that surfaces as "an argument
flowsim cannot use"."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowsim
from flowsim import ConfigError
from flowsim.workload.generators.huggingface_experts import EXPERTS

NET = {"cluster": {"device": "h100", "nodes": 2, "gpus_per_node": 8, "nic_gbps": 400,
                   "nics_per_node": 8}}
VALUES = st.sampled_from(["1", "2", "8", "0", "-1", "null", "None", "true", "False", "x",
                          "1.5", "[1,2]", "{}", "1e30", "'4'", "${x}", "auto", "(4096,0)",
                          "full", "bf16_with_fp8_mixed", "deepseek_v3", "16B", "qwen3"])
MPT = {"max_seq_len": 2048, "global_train_batch_size": 16, "device_train_microbatch_size": 1,
       "model": {"name": "mpt_causal_lm", "d_model": 1024, "n_heads": 16, "n_layers": 4,
                 "max_seq_len": "${max_seq_len}", "attn_config": {"attn_impl": "flash"}},
       "fsdp_config": {"sharding_strategy": "FULL_SHARD", "mixed_precision": "PURE"}}
NEMO = {"trainer": {"precision": "bf16", "devices": 8},
        "model": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
                  "encoder_seq_length": 2048, "micro_batch_size": 1, "global_batch_size": 16,
                  "tensor_model_parallel_size": 2, "mcore_gpt": True,
                  "optim": {"name": "mcore_distributed_optim"}, "tokenizer": {"type": "gpt2"}}}
BRIDGE = {"model": {"_target_": "megatron.bridge.models.gpt_provider.GPTModelProvider",
                    "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
                    "seq_length": 2048, "vocab_size": 32000, "tensor_model_parallel_size": 2,
                    "sequence_parallel": True, "gated_linear_unit": True, "bf16": True,
                    "activation_func": {"_target_": "torch.nn.functional.silu",
                                        "_call_": False}},
          "train": {"global_batch_size": 16, "micro_batch_size": 1},
          "ddp": {"use_distributed_optimizer": True, "overlap_grad_reduce": True},
          "peft": {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 16,
                   "target_modules": ["linear_qkv"]}}
TITAN = {"model": {"name": "llama3", "flavor": "8B"},
         "training": {"local_batch_size": 2, "seq_len": 2048, "compile": True},
         "parallelism": {"data_parallel_shard_degree": -1, "tensor_parallel_degree": 2},
         "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"}}
PATHS = {
    "torchtitan": ["training.local_batch_size", "training.global_batch_size",
                   "training.seq_len", "training.batch_size", "training.mixed_precision_reduce",
                   "parallelism.data_parallel_shard_degree",
                   "parallelism.data_parallel_replicate_degree",
                   "parallelism.tensor_parallel_degree", "parallelism.pipeline_parallel_degree",
                   "parallelism.pipeline_parallel_schedule",
                   "parallelism.pipeline_parallel_layers_per_stage",
                   "parallelism.pipeline_parallel_split_points",
                   "parallelism.pipeline_parallel_microbatch_size",
                   "experimental.pipeline_parallel_microbatches",
                   "parallelism.context_parallel_degree",
                   "parallelism.context_parallel_rotate_method", "activation_checkpoint.mode",
                   "activation_checkpoint.selective_ac_option", "model.converters",
                   "model.flavor", "model.name", "float8.enable_fsdp_float8_all_gather",
                   "parallelism.expert_parallel_degree",
                   "parallelism.expert_tensor_parallel_degree", "model"],
    "llmfoundry": ["model.d_model", "model.n_heads", "model.expansion_ratio",
                   "model.attn_config.attn_type", "model.attn_config.kv_n_heads",
                   "model.attn_config.attn_impl", "model.ffn_config.ffn_type", "precision",
                   "fsdp_config.sharding_strategy", "fsdp_config.mixed_precision",
                   "fsdp_config.activation_checkpointing", "global_train_batch_size",
                   "device_train_microbatch_size", "max_seq_len", "model", "fsdp_config"],
    "nemo": ["model.num_layers", "model.tensor_model_parallel_size", "model.sequence_parallel",
             "model.optim.name", "model.optim.overlap_grad_sync", "model.fp8",
             "model.activation", "model.activations_checkpoint_granularity", "model.fsdp",
             "model.fsdp_sharding_strategy", "trainer.precision", "model.optim", "model",
             "model.window_size", "model.num_moe_experts", "model.cp_comm_type",
             "model.peft.peft_scheme", "model.peft.lora_tuning.adapter_dim",
             "model.peft.lora_tuning.target_modules", "model.peft",
             "model.data.train_ds.packed_sequence", "model.encoder_seq_length"],
    "megatron_bridge": ["model.num_layers", "model.tensor_model_parallel_size",
                        "model.sequence_parallel", "model.fp8", "model.fp8_recipe",
                        "model.fp4", "model.num_moe_experts", "model.moe_ffn_hidden_size",
                        "model.expert_tensor_parallel_size", "model.recompute_granularity",
                        "model.vocab_size", "model.tp_comm_overlap", "ddp.bucket_size",
                        "ddp.use_distributed_optimizer", "ddp", "train.micro_batch_size",
                        "peft", "peft.dim", "peft.target_modules", "dataset",
                        "comm_overlap.tp_comm_overlap_cfg", "model",
                        "model.pipeline_model_parallel_size",
                        "model.num_layers_in_first_pipeline_stage",
                        "model.account_for_loss_in_pipeline_split",
                        "model.pipeline_model_parallel_layout"],
    "nemo2": ["trainer.strategy.tensor_model_parallel_size",
              "trainer.strategy.pipeline_model_parallel_size",
              "trainer.strategy.virtual_pipeline_model_parallel_size",
              "trainer.strategy.sequence_parallel", "trainer.strategy.ddp.bucket_size",
              "trainer.plugins", "trainer.plugins.fp8", "trainer.plugins.precision",
              "data.seq_length", "data.micro_batch_size", "model.config.num_layers",
              "model.config.window_size", "model.config.recompute_granularity",
              "trainer.strategy", "model", "optim.config.lr", "trainer.callbacks[1].x"],
}


def _spec(kind: str, items: list[str]) -> dict:
    if kind == "torchtitan":
        return {"generator": kind, "config": TITAN, "overrides": [f"--{i}" for i in items]}
    if kind == "llmfoundry":
        return {"generator": kind, "config": MPT, "overrides": items}
    if kind == "nemo":
        return {"generator": kind, "config": NEMO, "overrides": items}
    if kind == "megatron_bridge":
        return {"generator": kind, "config": BRIDGE, "overrides": items}
    return {"generator": kind, "recipe": "nemotron4_15b(performance_mode=True)",
            "overrides": [*items, "data.global_batch_size=16"]}


def _workload_or_one_line(spec: dict) -> None:
    """``spec`` builds a workload, or is refused in one line that names what is wrong (not
    as "an argument flowsim cannot use", an exception flowsim did not expect)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            work = flowsim.load_workload(spec, flowsim.load_network(NET))
        except ConfigError as exc:
            assert "cannot use" not in str(exc) and "\n" not in str(exc), str(exc)
        else:
            assert work.programs


@pytest.mark.parametrize("kind", sorted(PATHS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_overrides_give_a_workload_or_one_line(kind, data):
    paths = st.sampled_from(PATHS[kind])
    items = data.draw(st.lists(st.tuples(paths, VALUES), min_size=1, max_size=3))
    spec = _spec(kind, [f"{path}={value}" for path, value in items])
    _workload_or_one_line(spec)


@settings(max_examples=150, deadline=None)
@given(flags=st.lists(st.tuples(st.sampled_from(
    ["--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
     "--micro-batch-size", "--global-batch-size", "--tensor-model-parallel-size",
     "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
     "--recompute-granularity", "--num-experts", "--moe-router-topk", "--ffn-hidden-size",
     "--window-size", "--fp8-format"]), VALUES), min_size=1, max_size=3))
def test_random_megatron_arguments_give_a_workload_or_one_line(flags):
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
            "--micro-batch-size 1 --global-batch-size 16 --vocab-size 32000 --bf16 "
            + " ".join(f"{flag} {value}" for flag, value in flags))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            flowsim.load_workload({"generator": "megatron", "args": args},
                                  flowsim.load_network(NET))
        except ConfigError as exc:
            assert "cannot use" not in str(exc) and "\n" not in str(exc), str(exc)


#: small configs of each Hugging Face family the reader knows, and the keys it reads
HF_CONFIGS = {
    "llama4_text": {"model_type": "llama4_text", "hidden_size": 256, "num_hidden_layers": 4,
                    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                    "intermediate_size": 256, "intermediate_size_mlp": 512,
                    "num_local_experts": 8, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 2, "attention_chunk_size": 256,
                    "vocab_size": 1000},
    "glm4_moe": {"model_type": "glm4_moe", "hidden_size": 256, "num_hidden_layers": 4,
                 "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                 "intermediate_size": 512, "moe_intermediate_size": 128,
                 "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
                 "first_k_dense_replace": 1, "vocab_size": 1000},
    "dbrx": {"model_type": "dbrx", "d_model": 256, "n_layers": 4, "n_heads": 8,
             "vocab_size": 1000, "attn_config": {"kv_n_heads": 2},
             "ffn_config": {"ffn_hidden_size": 256, "moe_num_experts": 8, "moe_top_k": 2}},
    "ernie4_5_moe": {"model_type": "ernie4_5_moe", "hidden_size": 256, "num_hidden_layers": 4,
                     "num_attention_heads": 8, "num_key_value_heads": 2,
                     "intermediate_size": 512, "moe_intermediate_size": 128,
                     "moe_num_experts": 8, "moe_k": 2, "vocab_size": 1000},
    "hunyuan_v1_moe": {"model_type": "hunyuan_v1_moe", "hidden_size": 256,
                       "num_hidden_layers": 4, "num_attention_heads": 8,
                       "intermediate_size": 256, "num_experts": 8, "moe_topk": [2] * 4,
                       "vocab_size": 1000},
    "exaone4": {"model_type": "exaone4", "hidden_size": 256, "num_hidden_layers": 4,
                "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
                "sliding_window": 128, "sliding_window_pattern": "LLLG", "vocab_size": 1000},
    "smollm3": {"model_type": "smollm3", "hidden_size": 256, "num_hidden_layers": 4,
                "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
                "use_sliding_window": True, "sliding_window": 128, "vocab_size": 1000},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 4,
                    "num_attention_heads": 8, "num_key_value_heads": 8,
                    "intermediate_size": 512, "moe_intermediate_size": 128,
                    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
                    "first_k_dense_replace": 1, "q_lora_rank": 64, "kv_lora_rank": 32,
                    "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
                    "vocab_size": 1000},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": 4,
                  "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                  "intermediate_size": 512, "moe_intermediate_size": 128, "num_experts": 8,
                  "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [0],
                  "vocab_size": 1000},
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_layer": 4, "n_head": 8,
             "vocab_size": 1000},
}
#: transformer keys given beside the config (which win over it): three values each
HF_BESIDE = {"window": (0, 64, 4096), "layers": (1, 2, 5), "sequence": (256, 1024, 8192),
             "attention": ("flash", "flash2", "unfused"), "cp": (1, 2, 2)}
HF_VALUES = st.sampled_from([None, -1, 0, 1, 2, 3, 7, 8, 64, "x", 1.5, [1, 2], [], {}, True,
                             1e30, 10**12, "LLLG", "llama", [0, 1, 0, 1]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_hugging_face_settings_give_a_workload_or_one_line(data):
    """A published-like config of each family with one to three of its settings (the model
    type, a nested block's key too) replaced by anything JSON can hold, and transformer keys
    beside it."""
    family = data.draw(st.sampled_from(sorted(HF_CONFIGS)))
    config = {k: (dict(v) if isinstance(v, dict) else v)
              for k, v in HF_CONFIGS[family].items()}
    keys = [*(k for k in config if k != "attn_config"), "model_type", "ffn_config.moe_top_k",
            "sliding_window", "layer_types", "moe_layers", "no_rope_layers", "text_config"]
    for key, value in data.draw(st.lists(st.tuples(st.sampled_from(keys), HF_VALUES),
                                         min_size=1, max_size=3)):
        block, _, inner = key.rpartition(".")
        if block and isinstance(config.get(block), dict):
            config[block][inner] = value
        else:
            config[key] = value
    beside = data.draw(st.dictionaries(st.sampled_from(sorted(HF_BESIDE)), st.integers(0, 2),
                                       max_size=2))
    spec = {"generator": "huggingface", "config": config, "sequence": 512,
            "global_batch": 16, "tp": 2, "ep": 2 if family in (*EXPERTS, "dbrx") else 1,
            **{key: HF_BESIDE[key][pick] for key, pick in beside.items()}}
    _workload_or_one_line(spec)
