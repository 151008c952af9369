"""``generator: huggingface`` for the model types read beside the Llama family's first ones:
Llama 4, GLM-4.5, OLMoE, DBRX, Nemotron, ERNIE 4.5, Hunyuan, DeepSeek-V3.2 and the windowed
dense models (Cohere 2, EXAONE 4, OLMo 3, SmolLM3), each checked against the rule
``transformers`` 5.24 builds it by; and the hybrid models refused with what they hold. The
configs carry the values of the models' published config.json files."""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowsim
from flowsim.errors import ConfigError, FlowsimWarning
from flowsim.workload.generators.huggingface import chunk_window, huggingface_keys
from flowsim.workload.kernels import Attention

MAVERICK_TEXT = {
    "model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128,
    "hidden_size": 5120, "interleave_moe_layer_step": 2, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_experts_per_tok": 1,
    "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128,
    "use_qk_norm": False, "vocab_size": 202048}
GLM_45 = {
    "model_type": "glm4_moe", "hidden_size": 5120, "num_hidden_layers": 92,
    "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_routed_experts": 160,
    "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5, "vocab_size": 151552,
    "tie_word_embeddings": False}
DBRX = {"model_type": "dbrx", "d_model": 6144, "n_layers": 40, "n_heads": 48,
        "vocab_size": 100352, "max_seq_len": 32768,
        "attn_config": {"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000},
        "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "first_k_dense_replace": 3, "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
    "v_head_dim": 128, "vocab_size": 129280}
NET = {"cluster": {"device": "h100", "nodes": 1}}


def _keys(config: dict) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        return huggingface_keys(config, "spec.yml")


def _finished(config: dict, **run) -> dict:
    """The keys the transformer builds from, once the run's keys beside are known."""
    from flowsim.workload.generators.huggingface import parse_huggingface

    spec = parse_huggingface({"config": config, **run}, "spec.yml")
    return spec.finish({**dict(spec.keys), "dp": 1})


def test_llama4_maverick_alternates_dense_and_expert_layers_as_torchtitan_s_flavor():
    """Maverick (a llama4 config, its model in text_config): experts on the odd layers
    (transformers' range(step - 1, layers, step)), one shared expert as wide as a routed one,
    dense layers of intermediate_size_mlp; the same shape as torchtitan's 17bx128e."""
    from flowsim.workload.generators.torchtitan_models import MODELS

    ours = _keys({"model_type": "llama4", "text_config": MAVERICK_TEXT})
    flavors, shape = MODELS["llama4"]
    theirs = shape("17bx128e")
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "moe_ffn", "shared_ffn",
                "experts", "top_k", "moe_layer_freq", "vocab"):
        assert ours[key] == theirs[key], key
    assert _keys("llama4_maverick") == ours   # the bundled config
    scout = _keys({**MAVERICK_TEXT, "num_local_experts": 16, "interleave_moe_layer_step": 1})
    assert "moe_layer_freq" not in scout and scout["experts"] == 16   # every layer
    named = _keys({"model_type": "llama4", "text_config": {**MAVERICK_TEXT,
                                                            "model_type": "llama4"}})
    assert named == ours   # a text_config that calls itself llama4


def test_llama4_s_chunked_attention_is_a_window_of_the_same_work_beyond_a_chunk():
    """Three layers in four (those with rotary embeddings) attend within 8,192-token chunks:
    up to a chunk that is full causal attention, beyond it a window as costly on average."""
    assert "window" not in _finished(MAVERICK_TEXT, sequence=8192, global_batch=8)
    long = _finished(MAVERICK_TEXT, sequence=32768, global_batch=8)
    assert long["window"] == chunk_window(32768, 8192)
    assert long["window_skip_freq"] == [1, 1, 1, 0] * 12
    given_window = _finished(MAVERICK_TEXT, sequence=32768, global_batch=8, window=1024)
    assert given_window["window"] == 1024 and "window_skip_freq" not in given_window


@settings(max_examples=60, deadline=None)
@given(chunk=st.integers(1, 16384), chunks=st.integers(1, 40), rest=st.integers(0, 16383))
def test_a_chunk_window_attends_as_many_keys_as_the_chunks(chunk, chunks, rest):
    sequence = chunks * chunk + rest % chunk
    exact = (chunks * chunk * (chunk + 1) / 2 + (rest % chunk) * (rest % chunk + 1) / 2) / \
        sequence
    window = chunk_window(sequence, chunk)
    kernel = Attention(1, 1, sequence, sequence, 128, window=window)
    keys = kernel.window_keys if kernel.windowed else sequence / 2
    assert 1 <= window <= sequence
    assert keys == pytest.approx(exact, rel=0.02, abs=1.0)


def test_glm_4_5_is_deepseek_s_layout_with_grouped_query_attention():
    keys = huggingface_keys(GLM_45, "s")
    assert keys["mtp_layers"] == 1   # num_nextn_predict_layers
    assert keys["moe_layer_freq"] == [0] * 3 + [1] * 89
    assert (keys["experts"], keys["top_k"], keys["moe_ffn"], keys["shared_ffn"]) == \
        (160, 8, 1536, 1536)
    assert (keys["heads"], keys["kv_heads"], keys["head_dim"]) == (96, 8, 128)
    assert "mla" not in keys
    air = _keys({**GLM_45, "first_k_dense_replace": None, "num_hidden_layers": 46})
    assert air["moe_layer_freq"] == [0] + [1] * 45   # the library's default: 1


def test_dbrx_reads_its_own_names_and_blocks():
    keys = _keys(DBRX)
    assert (keys["layers"], keys["hidden"], keys["heads"], keys["kv_heads"]) == (40, 6144, 48, 8)
    assert (keys["experts"], keys["top_k"], keys["moe_ffn"]) == (16, 4, 10752)
    assert keys["gated_mlp"] and not keys["tied_embeddings"]
    with pytest.raises(ConfigError, match=r"spec.yml: config: ffn_config: key 'moe_top_k'"):
        _keys({**DBRX, "ffn_config": {**DBRX["ffn_config"], "moe_top_k": 0}})
    with pytest.raises(ConfigError, match=r"key 'attn_config': expected a mapping"):
        _keys({**DBRX, "attn_config": 8})
    spec = {"generator": "huggingface", "config": {**DBRX, "ffn_config": {
        **DBRX["ffn_config"], "moe_num_experts": 6}}, "sequence": 1024, "global_batch": 8,
        "ep": 4, "layers": 2}
    with pytest.raises(ConfigError, match=r"read from ffn_config\.moe_num_experts"):
        flowsim.simulate(NET, spec, "nccl")


@pytest.mark.parametrize("config, expected", [
    ({"model_type": "olmoe", "hidden_size": 2048, "num_hidden_layers": 16,
      "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 1024,
      "num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 50304},       # OLMoE-1B-7B
     {"experts": 64, "top_k": 8, "moe_ffn": 1024}),
    ({"model_type": "ernie4_5_moe", "hidden_size": 8192, "num_hidden_layers": 54,
      "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
      "moe_intermediate_size": 3584, "moe_num_experts": 64, "moe_k": 8,
      "moe_num_shared_experts": 0, "moe_layer_start_index": 3, "moe_layer_interval": 1,
      "vocab_size": 103424, "tie_word_embeddings": False},                  # ERNIE-4.5-300B
     {"experts": 64, "top_k": 8, "moe_ffn": 3584, "shared_ffn": 0,
      "moe_layer_freq": [0] * 3 + [1] * 51}),
    ({"model_type": "ernie4_5_moe", "hidden_size": 2560, "num_hidden_layers": 28,
      "num_attention_heads": 20, "num_key_value_heads": 4, "intermediate_size": 12288,
      "moe_intermediate_size": 1536, "moe_num_experts": 64, "moe_k": 6,
      "vocab_size": 103424},                       # ERNIE-4.5-21B: the library's defaults
     {"shared_ffn": 2 * 1536, "moe_layer_freq": [0] + [1] * 27, "tied_embeddings": True}),
    ({"model_type": "hunyuan_v1_moe", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
      "intermediate_size": 3072, "num_experts": 64, "moe_topk": [8] * 32,
      "vocab_size": 128167},                                                # Hunyuan-A13B
     {"experts": 64, "top_k": 8, "moe_ffn": 3072, "shared_ffn": 3072}),
    ({"model_type": "granitemoeshared", "hidden_size": 1024, "num_hidden_layers": 24,
      "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 512,
      "num_local_experts": 32, "num_experts_per_tok": 8, "shared_intermediate_size": 1024,
      "vocab_size": 49155},
     {"experts": 32, "moe_ffn": 512, "shared_ffn": 1024}),
    ({"model_type": "nemotron", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
      "intermediate_size": 16384, "vocab_size": 256000, "hidden_act": "relu2"},  # Minitron-8B
     {"gated_mlp": False, "head_dim": 128, "ffn": 16384}),
])
def test_each_family_s_experts_and_mlp_as_the_library_builds_them(config, expected):
    keys = _keys(config)
    for key, value in expected.items():
        assert keys[key] == value, key


def test_a_per_layer_list_of_different_experts_is_refused_naming_its_key():
    hunyuan = {"model_type": "hunyuan_v1_moe", "hidden_size": 1024, "num_hidden_layers": 2,
               "num_attention_heads": 8, "intermediate_size": 512, "num_experts": 8,
               "moe_topk": [2, 4], "vocab_size": 1000}
    with pytest.raises(ConfigError, match=r"key 'moe_topk': expected one value for every "
                                          r"layer"):
        _keys(hunyuan)


def test_deepseek_v3_2_s_sparse_attention_is_a_window_of_its_top_keys():
    config = {**DEEPSEEK_V3, "model_type": "deepseek_v32", "index_topk": 2048,
              "index_n_heads": 64, "index_head_dim": 128, "num_nextn_predict_layers": 0}
    with pytest.warns(FlowsimWarning, match=r"index_topk \(2048\).*indexer .*not priced"):
        keys = huggingface_keys(config, "s")
    assert keys["window"] == 2048 and keys["mla"]["kv_lora_rank"] == 512
    spec = {"generator": "huggingface", "config": config, "sequence": 8192,
            "global_batch": 8, "layers": 4, "tp": 8, "ep": 1}
    dense = {**spec, "config": DEEPSEEK_V3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        sparse_ns = float(flowsim.simulate(NET, spec, "nccl").time_ns)
        dense_ns = float(flowsim.simulate(NET, dense, "nccl").time_ns)
    assert sparse_ns < dense_ns   # 2,048 keys a query instead of 4,096 on average


@pytest.mark.parametrize("config, pattern", [
    ({"model_type": "cohere2", "sliding_window": 4096, "sliding_window_pattern": 4},
     [1, 1, 1, 0] * 2),
    ({"model_type": "exaone4", "sliding_window": 4096, "sliding_window_pattern": "LLLG"},
     [1, 1, 1, 0] * 2),
    ({"model_type": "exaone4", "sliding_window": 4096,
      "layer_types": ["sliding_attention", "full_attention"] * 4}, [1, 0] * 4),
    ({"model_type": "olmo3"}, [1, 1, 1, 0] * 2),   # the library's 4,096 and its 3:1
    ({"model_type": "smollm3", "use_sliding_window": True, "sliding_window": 2048},
     [0, 0, 0, 1] * 2),                            # the layers without rotary embeddings
])
def test_windowed_dense_models_put_the_window_where_the_library_does(config, pattern):
    base = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8,
            "intermediate_size": 4096, "vocab_size": 32000}
    keys = _keys({**base, **config})
    assert keys["window"] == config.get("sliding_window", 4096)
    assert keys["window_skip_freq"] == pattern
    off = {**base, **config, "use_sliding_window": False}
    if config["model_type"] == "smollm3":
        assert "window" not in _keys(off)


def test_a_bad_window_pattern_names_its_key():
    with pytest.raises(ConfigError, match=r"key 'sliding_window_pattern': expected a layer "
                                          r"count or a string of L and G"):
        _keys({"model_type": "exaone4", "hidden_size": 1024, "num_hidden_layers": 8,
               "num_attention_heads": 8, "intermediate_size": 4096, "vocab_size": 32000,
               "sliding_window": 4096, "sliding_window_pattern": "LLX"})


@pytest.mark.parametrize("model_type, holds", [
    ("qwen3_next", "Gated DeltaNet"), ("jamba", "Mamba"), ("bamba", "Mamba-2"),
    ("minimax", "lightning")])
def test_a_hybrid_model_is_refused_with_what_its_other_layers_are(model_type, holds):
    with pytest.raises(ConfigError, match=rf"key 'model_type': expected a model of attention "
                                          rf"layers \(those of {model_type} include {holds}"):
        _keys({"model_type": model_type, "hidden_size": 1024})


def test_a_window_as_long_as_the_sequence_leaves_context_parallelism_open():
    """Phi-3.5-MoE's window is its whole context (131,072 tokens): no window at any
    sequence a run has, so context parallelism runs; Llama 4's chunks with CP 2 are priced
    as full attention, and a warning says so."""
    phimoe = {"model_type": "phimoe", "hidden_size": 1024, "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1024,
              "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 131072,
              "vocab_size": 32064}
    spec = {"generator": "huggingface", "config": phimoe, "sequence": 8192,
            "global_batch": 8, "cp": 2}
    assert float(flowsim.simulate(NET, spec, "nccl").time_ns) > 0
    for beside in ({"cp": 2}, {"attention": "unfused"}):
        with pytest.warns(FlowsimWarning, match=r"attention_chunk_size: chunked attention "
                                                r"with context parallelism or unfused "
                                                r"attention is priced as full"):
            keys = _finished(MAVERICK_TEXT, sequence=32768, global_batch=8, **beside)
        assert "window" not in keys


def test_the_window_s_layers_follow_a_layer_count_given_beside():
    """Dense Qwen windows the layers from max_window_layers on: none of the config's own
    28, the last four of 32 given beside."""
    qwen = {"model_type": "qwen2", "hidden_size": 1024, "num_hidden_layers": 28,
            "num_attention_heads": 8, "intermediate_size": 2048, "vocab_size": 32000,
            "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28}
    assert "window" not in _keys(qwen)
    keys = _finished(qwen, sequence=8192, global_batch=8, layers=32)
    assert keys["window"] == 4096 and keys["window_skip_freq"] == [0] * 28 + [1] * 4


def test_names_the_library_also_takes_and_a_text_config_without_its_type():
    olmoe = {"model_type": "olmoe", "hidden_size": 1024, "num_hidden_layers": 2,
             "num_attention_heads": 8, "intermediate_size": 512, "num_local_experts": 8,
             "num_experts_per_tok": 2, "vocab_size": 50304}
    assert _keys(olmoe)["experts"] == 8
    ernie = {"model_type": "ernie4_5_moe", "hidden_size": 1024, "num_hidden_layers": 2,
             "num_attention_heads": 8, "intermediate_size": 2048, "moe_intermediate_size": 512,
             "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000}
    assert (_keys(ernie)["experts"], _keys(ernie)["top_k"]) == (8, 2)
    text = {k: v for k, v in MAVERICK_TEXT.items() if k != "model_type"}
    assert _keys({"model_type": "llama4", "text_config": text})["experts"] == 128


def test_a_model_folder_or_a_hub_id_in_the_local_cache_names_the_config(tmp_path,
                                                                       monkeypatch):
    """config: a folder with config.json in it, or a Hub id resolved in the Hugging Face
    cache as huggingface_hub lays it out (refs/main -> snapshot); nothing is downloaded,
    and an id the cache lacks says where it looked and how to fetch it."""
    import json

    olmoe = {"model_type": "olmoe", "hidden_size": 1024, "num_hidden_layers": 2,
             "num_attention_heads": 8, "intermediate_size": 512, "num_experts": 8,
             "num_experts_per_tok": 2, "vocab_size": 50304}
    folder = tmp_path / "OLMoE-1B-7B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(olmoe))
    (tmp_path / "spec.yml").write_text("generator: huggingface\n")
    spec = str(tmp_path / "spec.yml")
    assert huggingface_keys("OLMoE-1B-7B", spec)["experts"] == 8
    assert huggingface_keys("OLMoE-1B-7B/config.json", spec)["experts"] == 8
    cache = tmp_path / "hub"
    repo = cache / "models--allenai--OLMoE-1B-7B-0924"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123\n")
    for commit, experts, stamp in (("abc123", 64, 1_000_000), ("new999", 4, 2_000_000)):
        (repo / "snapshots" / commit).mkdir(parents=True)
        written = repo / "snapshots" / commit / "config.json"
        written.write_text(json.dumps({**olmoe, "num_experts": experts}))
        os.utime(written, (stamp, stamp))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    # refs/main's snapshot, not the newest; without refs/main, the newest
    assert huggingface_keys("allenai/OLMoE-1B-7B-0924", spec)["experts"] == 64
    (repo / "refs" / "main").unlink()
    assert huggingface_keys("allenai/OLMoE-1B-7B-0924", spec)["experts"] == 4
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))   # huggingface_hub's default
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    (tmp_path / "xdg" / "huggingface").mkdir(parents=True)
    cache.rename(tmp_path / "xdg" / "huggingface" / "hub")
    assert huggingface_keys("allenai/OLMoE-1B-7B-0924", spec)["experts"] == 4
    with pytest.raises(ConfigError, match=r"'meta-llama/Llama-3\.1-8B' is neither a file "
                                          r"beside the spec nor a model in the Hugging Face "
                                          r"cache .*huggingface-cli download"):
        huggingface_keys("meta-llama/Llama-3.1-8B", spec)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"is a folder without a config\.json"):
        huggingface_keys("empty", spec)


def test_a_window_of_0_beside_the_config_turns_its_windows_off():
    """Gemma 2 alternates windowed and full layers; window: 0 beside the config (a key
    beside wins) leaves every layer full, with no pattern left over to refuse."""
    gemma2 = {"model_type": "gemma2", "head_dim": 256, "hidden_size": 1024,
              "intermediate_size": 4096, "num_attention_heads": 8, "num_hidden_layers": 4,
              "num_key_value_heads": 4, "sliding_window": 256, "vocab_size": 32000}
    assert _finished(gemma2, sequence=1024, global_batch=8)["window_skip_freq"] == [1, 0] * 2
    keys = _finished(gemma2, sequence=1024, global_batch=8, window=0)
    assert keys["window"] == 0 and "window_skip_freq" not in keys
    spec = {"generator": "huggingface", "config": gemma2, "sequence": 1024,
            "global_batch": 8, "window": 0}
    assert float(flowsim.simulate(NET, spec, "nccl").time_ns) > 0


def test_layer_flags_and_per_layer_lists_are_checked():
    with pytest.raises(ConfigError, match=r"key 'no_rope_layers': expected a list of 0 and 1"):
        _keys({**MAVERICK_TEXT, "no_rope_layers": [2] * 48})
    hunyuan = {"model_type": "hunyuan_v1_moe", "hidden_size": 1024, "num_hidden_layers": 2,
               "num_attention_heads": 8, "intermediate_size": 512, "num_experts": [],
               "moe_topk": 2, "vocab_size": 1000}
    with pytest.raises(ConfigError, match=r"key 'num_experts': expected a positive integer, "
                                          r"or one per layer"):
        _keys(hunyuan)


@pytest.mark.parametrize("config, says", [
    ({"model_type": "ernie4_5_moe", "moe_num_experts": 6}, r"read from moe_num_experts"),
    ({"model_type": "ernie4_5_moe", "num_experts": 6}, r"read from num_experts"),
    ({"model_type": "llama4_text", "num_local_experts": 6}, r"read from num_local_experts"),
    ({"model_type": "hunyuan_v1_moe", "num_experts": [6, 6]}, r"read from num_experts"),
])
def test_the_transformer_s_errors_name_the_key_the_config_used(config, says):
    """The name in "read from ..." is the key the reader took the value from, the library's
    other name of it included."""
    base = {"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
            "num_key_value_heads": 8, "intermediate_size": 512, "moe_intermediate_size": 512,
            "moe_k": 2, "num_experts_per_tok": 2, "moe_topk": 2, "vocab_size": 1000}
    spec = {"generator": "huggingface", "config": {**base, **config}, "sequence": 1024,
            "global_batch": 8, "ep": 4}
    with pytest.raises(ConfigError, match=r"key 'experts'.*" + says):
        flowsim.simulate({"cluster": {"device": "h100", "nodes": 1}}, spec, "nccl")


def test_a_text_config_that_is_not_a_mapping_is_named():
    """A multimodal config whose ``text_config`` is not the language model's mapping is one
    line naming that key (not a refusal of the multimodal type, which is read)."""
    with pytest.raises(ConfigError, match=r"key 'text_config'.*a mapping.*found 'oops'"):
        _keys({"model_type": "llama4", "text_config": "oops"})
