"""``generator: huggingface``: a model's shape from its Hugging Face ``config.json``, the run's
settings beside it. The configs below carry the values the models' published config.json
files hold (the keys flowsim reads, and some it does not)."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import pytest

import flowsim
from flowsim.errors import ConfigError, FlowsimWarning
from flowsim.workload.generators.huggingface import huggingface_keys

PUBLISHED = Path(__file__).resolve().parent.parent / "validation" / "published"

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256}
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "sliding_window": None, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936}
QWEN3_235B_A22B = {**QWEN3_30B_A3B, "hidden_size": 4096, "intermediate_size": 12288,
                   "moe_intermediate_size": 1536, "num_attention_heads": 64,
                   "num_hidden_layers": 94, "max_window_layers": 94}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 3,
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
    "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "tie_word_embeddings": False, "topk_group": 4,
    "v_head_dim": 128, "vocab_size": 129280}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000}
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "sliding_window": 4096, "tie_word_embeddings": False,
    "vocab_size": 32000}
GPT2 = {"activation_function": "gelu_new", "model_type": "gpt2", "n_embd": 768, "n_head": 12,
        "n_inner": None, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}

GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "head_dim": 64, "hidden_size": 2880,
    "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 18,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
    "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 201088}
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "head_dim": 256, "hidden_size": 3584,
    "intermediate_size": 14336, "model_type": "gemma2", "num_attention_heads": 16,
    "num_hidden_layers": 42, "num_key_value_heads": 8, "sliding_window": 4096,
    "vocab_size": 256000}
GEMMA3_4B = {   # a multimodal config: its language model in text_config
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"head_dim": 256, "hidden_size": 2560, "intermediate_size": 10240,
                    "model_type": "gemma3_text", "num_attention_heads": 8,
                    "num_hidden_layers": 34, "num_key_value_heads": 4,
                    "sliding_window": 1024, "vocab_size": 262208},
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}}

RUN = {"sequence": 4096, "global_batch": 16, "tp": 2}


def test_llama3_8b_from_its_config_is_the_same_run_as_its_keys():
    net = {"cluster": {"device": "h100", "nodes": 1}}
    from_config = flowsim.simulate(
        net, {"generator": "huggingface", "config": LLAMA3_8B, **RUN}, "nccl")
    by_hand = flowsim.simulate(net, {
        "generator": "transformer", "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32,
        "kv_heads": 8, "vocab": 128256, "gated_mlp": True, "tied_embeddings": False,
        "position_embedding": "rope", "dp": 4, **RUN}, "nccl")
    assert float(from_config.time_ns) == float(by_hand.time_ns)
    assert from_config.attrs["model_flops"] == by_hand.attrs["model_flops"]


@pytest.mark.parametrize("run, config", [
    ("mbridge2509_qwen3_30b_a3b_fp8_16gpu", QWEN3_30B_A3B),
    ("mbridge2511_qwen3_235b_a22b_fp8_256gpu", QWEN3_235B_A22B)])
def test_qwen3_moe_configs_give_the_shapes_transcribed_from_megatron_bridge(run, config):
    """Two sources of one model agree: the Hub's config and the shape the validation row
    read from Megatron-Bridge's model provider."""
    row = next(r for r in csv.DictReader((PUBLISHED / "megatron_bridge_h100.csv").open())
               if r["run"] == run)
    keys = huggingface_keys(config, "spec.yml")
    for key in ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab",
                "experts", "top_k", "moe_ffn"):
        assert keys[key] == int(row[key]), key
    assert keys["gated_mlp"] and not keys["tied_embeddings"]
    assert keys["position_embedding"] == row["position_embedding"]
    assert "moe_layer_freq" not in keys and "window" not in keys


def test_deepseek_v3_reads_latent_attention_dense_first_layers_and_shared_experts():
    keys = huggingface_keys(DEEPSEEK_V3, "spec.yml")
    assert keys["mtp_layers"] == 1   # num_nextn_predict_layers
    assert keys["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128,
                           "qk_pos_emb_head_dim": 64, "v_head_dim": 128}
    assert keys["moe_layer_freq"] == [0, 0, 0] + [1] * 58
    assert (keys["experts"], keys["top_k"], keys["moe_ffn"], keys["shared_ffn"]) == \
        (256, 8, 2048, 2048)
    assert keys["ffn"] == 18432 and keys["vocab"] == 129280


def test_deepseek_v3_s_group_limited_routing_is_priced_under_deepep():
    """n_group 8, topk_group 4: Megatron-Core's routing_groups and node_limit, which change
    DeepEP's copies per token; the all-to-all dispatcher's do not depend on them."""
    net = {"cluster": {"device": "h100", "nodes": 2}}
    run = {"generator": "huggingface", "config": DEEPSEEK_V3, "layers": 4, "mtp_layers": 0,
           "sequence": 1024, "global_batch": 16, "ep": 16, "dispatcher": "deepep"}
    free = {k: v for k, v in DEEPSEEK_V3.items() if k not in ("n_group", "topk_group")}

    def step(**keys):
        return float(flowsim.simulate(net, {**run, **keys}, "nccl").time_ns)

    limited = step()
    assert limited == step(config=free, routing_groups=8, node_limit=4)
    assert limited != step(config=free)
    assert step(node_limit=1) == step(config=free, node_limit=1)   # the run's own limit wins
    assert step(dispatcher="alltoall") == step(config=free, dispatcher="alltoall")
    assert "routing_groups" not in huggingface_keys(DEEPSEEK_V3, "spec.yml")
    with pytest.raises(ConfigError, match=r"config: key 'topk_group': expected at most "
                                          r"n_group \(8\), found 9"):
        huggingface_keys({**DEEPSEEK_V3, "topk_group": 9}, "spec.yml")
    # the transformer's refusals of the limit it adds name the config's settings
    for change, says in (({"n_group": 7}, r"key 'routing_groups'.* found 7 \(read from "
                                          r"n_group in 'config'\)"),
                         ({"n_group": 64, "topk_group": 1}, r"key 'node_limit'.* found 1 "
                                                            r"\(read from topk_group")):
        with pytest.raises(ConfigError, match=says):
            step(config={**DEEPSEEK_V3, **change})


def test_mixtral_s_experts_are_as_wide_as_its_mlp():
    keys = huggingface_keys(MIXTRAL_8X7B, "spec.yml")
    assert (keys["experts"], keys["top_k"], keys["moe_ffn"]) == (8, 2, 14336)
    assert "window" not in keys   # sliding_window: null


def test_sliding_windows_where_the_library_puts_them():
    """As transformers builds each model: Mistral every layer; dense Qwen from
    max_window_layers on and only with use_sliding_window; Qwen3-MoE every layer; a Llama
    config's stray sliding_window is ignored, as LlamaAttention ignores it."""
    assert huggingface_keys(MISTRAL_7B_V01, "s")["window"] == 4096
    qwen3 = {**QWEN3_30B_A3B, "model_type": "qwen3", "use_sliding_window": True,
             "sliding_window": 4096, "max_window_layers": 40}
    keys = huggingface_keys(qwen3, "s")
    assert keys["window"] == 4096
    assert keys["window_skip_freq"] == [0] * 40 + [1] * 8   # 1: the window's layers
    moe = huggingface_keys({**qwen3, "model_type": "qwen3_moe"}, "s")
    assert moe["window"] == 4096 and "window_skip_freq" not in moe
    off = {**qwen3, "use_sliding_window": False, "layer_types": ["sliding_attention"] * 48}
    assert "window" not in huggingface_keys(off, "s")
    assert "window" not in huggingface_keys({**LLAMA3_8B, "sliding_window": 4096}, "s")


def test_keys_a_config_leaves_out_take_the_library_s_defaults():
    """Gemma 3's published text_config gives only its widths and layers; transformers fills
    in the rest (heads 8 of which 4 key-value, 256 wide, a 262,208-token vocabulary)."""
    published = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                 "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                                 "model_type": "gemma3_text", "num_hidden_layers": 34,
                                 "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                 "sliding_window": 1024}}
    keys = huggingface_keys(published, "s")
    assert (keys["heads"], keys["kv_heads"], keys["head_dim"], keys["vocab"]) == \
        (8, 4, 256, 262208)
    assert keys["window"] == 1024 and keys["tied_embeddings"]
    qwen3 = {k: v for k, v in QWEN3_30B_A3B.items() if k != "head_dim"}
    assert huggingface_keys({**qwen3, "model_type": "qwen3"}, "s")["head_dim"] == 128
    lite = {**DEEPSEEK_V3, "q_lora_rank": None, "num_nextn_predict_layers": 0}
    assert huggingface_keys(lite, "s")["mla"]["q_lora_rank"] == 0   # null stays null


def test_bloom_s_config_names_its_keys_either_way():
    bloom_560m = {"architectures": ["BloomForCausalLM"], "model_type": "bloom",
                  "n_embed": 1024, "n_layer": 24, "num_attention_heads": 16,
                  "vocab_size": 250880}
    keys = huggingface_keys(bloom_560m, "s")
    assert (keys["layers"], keys["hidden"], keys["heads"], keys["ffn"]) == (24, 1024, 16, 4096)
    assert keys["position_embedding"] == "alibi" and not keys["gated_mlp"]


def test_gpt2_has_learned_positions_a_plain_mlp_and_tied_embeddings():
    keys = huggingface_keys(GPT2, "s")
    assert keys == {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "vocab": 50257,
                    "gated_mlp": False, "position_embedding": "learned_absolute",
                    "tied_embeddings": True}


def test_keys_beside_the_config_win_and_a_path_is_relative_to_the_spec(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text(json.dumps(LLAMA3_8B))
    spec = tmp_path / "spec.yml"
    spec.write_text("generator: huggingface\nconfig: models/config.json\nsequence: 1024\n"
                    "global_batch: 8\nlayers: 4\n")
    ds = flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, str(spec), "nccl")
    assert ds.sizes["layer"] == 4 + 3   # 4 layers, the embedding, the logits, the optimizer


@pytest.mark.parametrize("config, match", [
    ({**LLAMA3_8B, "model_type": "t5"}, r"key 'model_type': expected one of llama.*found 't5'"),
    ({**LLAMA3_8B, "num_hidden_layers": 0}, r"key 'num_hidden_layers': expected a positive"),
    ({k: v for k, v in LLAMA3_8B.items() if k != "hidden_size"}, r"key 'hidden_size'"),
    ({**LLAMA3_8B, "tie_word_embeddings": "no"}, r"key 'tie_word_embeddings': expected true"),
    ({**QWEN3_30B_A3B, "mlp_only_layers": "all"}, r"key 'mlp_only_layers'"),
])
def test_a_bad_config_is_one_error_naming_its_key(config, match):
    with pytest.raises(ConfigError, match=match):
        huggingface_keys(config, "spec.yml")


def test_an_unreadable_config_file_says_why(tmp_path):
    (tmp_path / "bad.json").write_text("{\"hidden_size\": 4096,")
    (tmp_path / "list.json").write_text("[1, 2]")
    spec = str(tmp_path / "spec.yml")
    (tmp_path / "spec.yml").write_text("")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        huggingface_keys("bad.json", spec)
    with pytest.raises(ConfigError, match=r"list\.json: expected a JSON object"):
        huggingface_keys("list.json", spec)
    with pytest.raises(ConfigError, match=r"key 'config': cannot read"):
        huggingface_keys("missing.json", spec)


def test_a_setting_the_transformer_refuses_names_the_config_s_key():
    """The shape is checked where the transformer checks it; the error says where it was
    read from."""
    config = {**LLAMA3_8B, "num_attention_heads": 36, "num_key_value_heads": 36}
    spec = {"generator": "huggingface", "config": config, **RUN, "tp": 8, "global_batch": 8}
    with pytest.raises(ConfigError, match=r"key 'heads': expected a multiple of tp=8.*"
                                          r"read from num_attention_heads in 'config'"):
        flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, spec, "nccl")


def test_a_default_is_not_said_to_be_read_from_the_config():
    """A config without key-value heads takes its query heads: an error on them names no
    config key it did not hold."""
    config = {k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"}
    spec = {"generator": "huggingface", "config": config, **RUN, "heads": 16,
            "global_batch": 8}
    with pytest.raises(ConfigError, match=r"key 'kv_heads': expected a divisor of heads=16"
                                          r".*, found 32$") as refused:
        flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, spec, "nccl")
    assert "read from" not in str(refused.value)


def test_per_layer_patterns_follow_a_layer_count_given_beside():
    """DeepSeek-V3 cut to 6 layers keeps its rule: 3 dense layers, then mixtures of experts."""
    spec = {"generator": "huggingface", "config": DEEPSEEK_V3, "layers": 6, "sequence": 1024,
            "global_batch": 8, "ep": 8}
    ds = flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, spec, "nccl")
    comm = ds.layer_comm_ns.sel({"pass": "fwd"})   # the forward's all-to-alls
    all_to_alls = [float(comm.sel(layer=f"layer{i}")) > 0 for i in range(6)]
    assert all_to_alls == [False] * 3 + [True] * 3


def test_the_workloads_page_example_runs_as_printed(tmp_path):
    """docs/guide/workloads.md's Hugging Face example: its files, its stated step time."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "guide" /
            "workloads.md").read_text()
    section = page[page.index("### From a Hugging Face model config"):]
    blocks = [b.split("```", 1)[0] for b in section.split("```yaml\n")[1:3]]
    (tmp_path / "run.yml").write_text(blocks[0])
    (tmp_path / "net.yml").write_text(blocks[1])
    (tmp_path / "Meta-Llama-3-8B").mkdir()
    (tmp_path / "Meta-Llama-3-8B" / "config.json").write_text(json.dumps(LLAMA3_8B))
    ds = flowsim.simulate(str(tmp_path / "net.yml"), str(tmp_path / "run.yml"))   # as the CLI
    assert f"# {float(ds.time_ns) / 1e9:.2f} s per step" in section
    assert f"{ds.attrs['memory_gib']:.1f} GiB per GPU" in section
    assert ds.attrs["memory_gib"] <= ds.attrs["memory_capacity_gib"]   # the example fits


def test_gpt_oss_alternates_its_window_and_routes_four_of_128_experts():
    keys = huggingface_keys(GPT_OSS_120B, "s")
    assert (keys["experts"], keys["top_k"], keys["moe_ffn"], keys["head_dim"]) == \
        (128, 4, 2880, 64)
    assert keys["window"] == 128 and keys["window_skip_freq"] == [1, 0] * 18
    assert not keys["tied_embeddings"]


def test_gemma_s_windows_follow_each_generation_s_rule():
    gemma2 = huggingface_keys(GEMMA2_9B, "s")
    assert gemma2["window_skip_freq"] == [1, 0] * 21 and gemma2["tied_embeddings"]
    assert gemma2["head_dim"] == 256   # not hidden / heads = 224
    gemma3 = huggingface_keys(GEMMA3_4B, "s")   # read from text_config
    assert gemma3["layers"] == 34 and gemma3["vocab"] == 262208
    assert gemma3["window_skip_freq"] == ([1] * 5 + [0]) * 5 + [1] * 4


def test_layer_types_repeat_their_period_over_a_layer_count_given_beside():
    spec = {"generator": "huggingface", "config": GPT_OSS_120B, "layers": 4, "ep": 8,
            "sequence": 1024, "global_batch": 8}
    ds = flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, spec, "nccl")
    attention = ds.layer_compute_ns.sel({"pass": "fwd"}).values[:4]
    assert attention[0] < attention[1] and attention[2] < attention[3]   # windowed: cheaper
    with pytest.raises(ConfigError, match=r"key 'layer_types': expected a list of "
                                          r"sliding_attention or full_attention"):
        huggingface_keys({**GPT_OSS_120B, "layer_types": ["chunked_attention"] * 36}, "s")


#: bundled model -> (validation file, row) whose shape was transcribed from another source
#: (NeMo's and Megatron-Bridge's recipes)
CROSS_CHECKS = {
    "llama3_8b": ("dgxc_2411.csv", "dgxc_llama31_8b_bf16_8gpu"),
    "llama3_70b": ("dgxc_2411.csv", "dgxc_llama31_70b_bf16_64gpu"),
    "llama31_405b": ("dgxc_gb200_2505.csv", "dgxc_gb200_llama31_405b_bf16_128gpu"),
    "mixtral_8x7b": ("nemo_b200_2502.csv", "nemo2502_b200_mixtral_8x7b_fp8_64gpu"),
    "qwen3_30b_a3b": ("megatron_bridge_h100.csv", "mbridge2509_qwen3_30b_a3b_fp8_16gpu"),
    "qwen3_235b_a22b": ("megatron_bridge_h100.csv", "mbridge2511_qwen3_235b_a22b_fp8_256gpu"),
}


@pytest.mark.parametrize("model", sorted(CROSS_CHECKS))
def test_bundled_models_agree_with_the_shapes_validation_rows_read_elsewhere(model):
    file, run = CROSS_CHECKS[model]
    row = next(r for r in csv.DictReader((PUBLISHED / file).open()) if r["run"] == run)
    keys = huggingface_keys(model, "spec.yml")
    if int(row["experts"] or 0) and not row.get("moe_ffn"):   # the transformer's default
        row["moe_ffn"] = row["ffn"]
    for key in ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "experts", "top_k",
                "moe_ffn", "head_dim"):
        assert keys.get(key, 0) == int(row.get(key) or 0), key
    assert keys["gated_mlp"] and not keys["tied_embeddings"]


def test_bundled_deepseek_v3_agrees_with_torchtitan_s_671b_flavor():
    from flowsim.workload.generators.torchtitan_models import MODELS

    flavors, shape = MODELS["deepseek_v3"]
    theirs = shape("671B")
    ours = huggingface_keys("deepseek_v3", "spec.yml")
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "moe_ffn", "experts", "top_k",
                "shared_ffn", "vocab", "moe_layer_freq", "mla"):
        assert ours[key] == theirs[key], key


def test_a_bundled_model_is_named_without_a_path_and_a_file_beside_the_spec_wins(tmp_path):
    net = {"cluster": {"device": "h100", "nodes": 1}}
    run = {"generator": "huggingface", "sequence": 1024, "global_batch": 8, "layers": 2}
    bundled = flowsim.simulate(net, {**run, "config": "llama3_8b"}, "nccl")
    assert float(bundled.time_ns) == float(flowsim.simulate(
        net, {**run, "config": LLAMA3_8B}, "nccl").time_ns)
    (tmp_path / "llama3_8b").write_text(json.dumps({**LLAMA3_8B, "hidden_size": 2048,
                                                    "intermediate_size": 7168}))
    (tmp_path / "spec.yml").write_text(json.dumps({**run, "config": "llama3_8b"}))
    beside = flowsim.simulate(net, str(tmp_path / "spec.yml"), "nccl")
    assert float(beside.time_ns) < float(bundled.time_ns)
    with pytest.raises(ConfigError, match=r"key 'config': expected a Hugging Face config"
                                          r"\.json .* or a bundled model: deepseek_v3, .*"
                                          r"found 'llama5'"):
        huggingface_keys("llama5", str(tmp_path / "spec.yml"))


@pytest.mark.parametrize("config, change, says", [
    (MIXTRAL_8X7B, {"num_local_experts": 6}, r"key 'experts'.*read from num_local_experts"),
    (DEEPSEEK_V3, {"n_routed_experts": 250}, r"key 'experts'.*read from n_routed_experts"),
    (GPT2, {"n_head": 10}, r"key 'heads'.*read from n_head"),
])
def test_an_error_names_the_setting_as_the_model_s_family_calls_it(config, change, says):
    spec = {"generator": "huggingface", "config": {**config, **change}, "sequence": 1024,
            "global_batch": 8, "tp": 4, "ep": 4, "layers": 4}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        with pytest.raises(ConfigError, match=says):
            flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, spec, "nccl")


@pytest.mark.parametrize("config, expected", [
    ({"model_type": "falcon", "hidden_size": 14848, "num_attention_heads": 232,
      "num_hidden_layers": 80, "num_kv_heads": 8, "new_decoder_architecture": True,
      "parallel_attn": True, "alibi": False, "vocab_size": 65024},        # Falcon-180B
     {"layers": 80, "hidden": 14848, "heads": 232, "kv_heads": 8, "ffn": 4 * 14848,
      "position_embedding": "rope", "tied_embeddings": True}),
    ({"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
      "num_hidden_layers": 32, "multi_query": True, "new_decoder_architecture": False,
      "vocab_size": 65024},                                                # Falcon-7B
     {"kv_heads": 1, "ffn": 4 * 4544}),
    ({"model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": None,
      "partial_rotary_factor": 0.4, "tie_word_embeddings": False,
      "vocab_size": 51200},                                                # Phi-2
     {"kv_heads": 32, "ffn": 10240, "tied_embeddings": False}),
    ({"model_type": "starcoder2", "hidden_size": 6144, "intermediate_size": 24576,
      "num_attention_heads": 48, "num_key_value_heads": 4, "num_hidden_layers": 40,
      "sliding_window": 4096, "vocab_size": 49152},                        # StarCoder2-15B
     {"kv_heads": 4, "window": 4096, "gated_mlp": False}),
])
def test_falcon_phi_and_starcoder2_are_gpt_family_models(config, expected):
    keys = huggingface_keys(config, "s")
    assert not keys["gated_mlp"]
    for key, value in expected.items():
        assert keys[key] == value, key


def test_falcon_phi_and_starcoder2_take_the_library_s_defaults():
    """transformers' defaults where a config is silent: StarCoder2's 2 key-value heads and
    12,288-wide MLP, Phi's 8,192, Falcon's 32 layers of 71 heads (multi-query by default,
    a null flag read as false)."""
    star = huggingface_keys({"model_type": "starcoder2", "hidden_size": 4096,
                             "num_attention_heads": 32, "num_hidden_layers": 4,
                             "vocab_size": 49152}, "s")
    assert (star["kv_heads"], star["ffn"]) == (2, 12288)
    phi = huggingface_keys({"model_type": "phi", "hidden_size": 2560,
                            "num_attention_heads": 32, "num_hidden_layers": 4,
                            "vocab_size": 51200}, "s")
    assert phi["ffn"] == 8192
    falcon = huggingface_keys({"model_type": "falcon", "hidden_size": 4544,
                               "vocab_size": 65024, "alibi": None}, "s")
    assert (falcon["layers"], falcon["heads"], falcon["kv_heads"]) == (32, 71, 1)
    assert falcon["position_embedding"] == "rope"
