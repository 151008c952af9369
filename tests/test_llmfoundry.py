"""``generator: llmfoundry``: an LLM Foundry training YAML read into the transformer's keys,
checked against the MPT rows transcribed from LLM Foundry's benchmark tables
(``validation/published/mosaicml_llmfoundry.csv``) and on its settings one by one."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import yaml

import flowsim
from flowsim import ConfigError, FlowsimWarning
from flowsim.workload.generators.llmfoundry import llmfoundry_keys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import validate_published  # noqa: E402

ROWS = validate_published.rows("mosaic_mpt_")
COMPARED = ("layers", "hidden", "heads", "ffn", "vocab", "sequence", "global_batch",
            "micro_batch", "dtype", "fsdp", "distributed_optimizer", "grad_reduce_in_bf16",
            "recompute", "attention",
            "position_embedding", "tied_embeddings", "gated_mlp", "cross_entropy_fusion",
            "cross_entropy_fusion_impl", "metric_cross_entropies")
NODE = {"cluster": {"device": "a100", "nodes": 1, "gpus_per_node": 8, "nic_gbps": 200,
                    "nics_per_node": 8}}


def _yaml_of(row: dict) -> dict:
    """The LLM Foundry YAML of a benchmark row, as the benchmark's submit script writes it:
    the model's own YAML (max_seq_len a top-level variable), the table's batch, precision
    and FSDP settings."""
    precision = {"bf16": "amp_bf16", "fp8": "amp_fp8"}[row["dtype"]]
    return {
        "max_seq_len": int(row["sequence"]),
        "global_train_batch_size": int(row["global_batch"]),
        "device_train_microbatch_size": int(row["micro_batch"]),
        "precision": precision,
        "model": {"name": "mpt_causal_lm", "init_device": "meta",
                  "d_model": int(row["hidden"]), "n_heads": int(row["heads"]),
                  "n_layers": int(row["layers"]), "expansion_ratio": 4,
                  "max_seq_len": "${max_seq_len}", "vocab_size": 50368,
                  "attn_config": {"attn_impl": "triton"}},
        "fsdp_config": {"sharding_strategy": "SHARD_GRAD_OP"
                        if row["distributed_optimizer"] == "true" else "FULL_SHARD",
                        "mixed_precision": "PURE" if row["grad_reduce_in_bf16"] == "true"
                        else "DEFAULT",
                        "activation_checkpointing": row["recompute"] == "full",
                        "limit_all_gathers": True},
    }


@pytest.mark.parametrize("row", ROWS, ids=[r["run"] for r in ROWS])
def test_every_benchmark_row_reads_as_it_was_transcribed(row):
    keys = llmfoundry_keys(_yaml_of(row), "run.yaml")
    spec = validate_published.spec(row)
    assert {k: keys[k] for k in COMPARED} == {k: spec[k] for k in COMPARED}


def test_a_run_read_from_its_yaml_is_the_transcribed_row(tmp_path):
    """The same iteration time from the YAML file (and a command-line override) as from the
    row's spec, on the row's network."""
    row = next(r for r in ROWS if r["run"] == "mosaic_mpt_7b_a100_8gpu")
    config = _yaml_of(row)
    config["global_train_batch_size"] = 8   # the launch line restores the table's 96
    (tmp_path / "mpt-7b.yaml").write_text(yaml.safe_dump(config))
    spec = {"generator": "llmfoundry", "config": "mpt-7b.yaml",
            "overrides": "global_train_batch_size=96"}
    (tmp_path / "run.yml").write_text(yaml.safe_dump(spec))
    network = validate_published.network(row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        read = flowsim.simulate(network, str(tmp_path / "run.yml"), "nccl")
        transcribed = flowsim.simulate(network, validate_published.spec(row), "nccl")
    assert float(read.time_ns) == float(transcribed.time_ns)


def test_mpt_options_become_transformer_keys():
    config = {"model": {"name": "mpt_causal_lm", "d_model": 1024, "n_heads": 16,
                        "n_layers": 4, "max_seq_len": "${variables.seq}", "vocab_size": 32000,
                        "learned_pos_emb": False, "tie_word_embeddings": False,
                        "attn_config": {"attn_type": "grouped_query_attention",
                                        "kv_n_heads": 4, "rope": True, "attn_impl": "torch"},
                        "ffn_config": {"ffn_type": "mptglu", "ffn_hidden_size": 2816}},
              "variables": {"seq": 4096}, "device_train_microbatch_size": 2,
              "fsdp_config": {"sharding_strategy": "SHARD_GRAD_OP"}}
    keys = llmfoundry_keys(config, "run.yaml")
    assert (keys["kv_heads"], keys["position_embedding"], keys["attention"]) == (4, "rope",
                                                                                "unfused")
    assert (keys["gated_mlp"], keys["ffn"], keys["sequence"], keys["tied_embeddings"]) == (
        True, 2816, 4096, False)
    assert (keys["fsdp"], keys["distributed_optimizer"]) == (False, True)   # ZeRO-2
    assert (keys["dtype"], keys["grad_reduce_in_bf16"], keys["recompute"]) == ("bf16", False,
                                                                               "none")
    # the loss: flash-attn's fused cross entropy by default (LLM Foundry's), else PyTorch's
    assert (keys["cross_entropy_fusion"], keys["cross_entropy_fusion_impl"]) == (True,
                                                                                 "flash_attn")
    assert keys["metric_cross_entropies"] == 2   # LanguageCrossEntropy, LanguagePerplexity
    config["model"].update(loss_fn="torch_crossentropy", use_train_metrics=False)
    keys = llmfoundry_keys(config, "run.yaml")
    assert not keys["cross_entropy_fusion"] and "cross_entropy_fusion_impl" not in keys
    assert "metric_cross_entropies" not in keys


def test_the_fusion_turned_off_beside_the_config_prices_the_unfused_cross_entropy(tmp_path):
    """``cross_entropy_fusion: false`` beside an MPT config (whose loss is flash-attn's
    fused one) is taken, with a warning that the implementation it named is not used."""
    (tmp_path / "mpt.yaml").write_text(yaml.safe_dump(_yaml_of(ROWS[0])))
    spec = {"generator": "llmfoundry", "config": str(tmp_path / "mpt.yaml"),
            "cross_entropy_fusion": False}
    with pytest.warns(FlowsimWarning, match=r"cross_entropy_fusion_impl flash_attn without "
                                            r"cross_entropy_fusion"):
        ds = flowsim.simulate(flowsim.load_network(NODE), spec, "nccl")
    assert float(ds.time_ns) > 0


@pytest.mark.parametrize("change, key, expected", [
    ({"device_train_microbatch_size": "auto"}, "device_train_microbatch_size",
     "give the one it found as 'micro_batch'"),
    ({"model": {"name": "hf_causal_lm"}}, "model.name", "give layers, hidden"),
    ({"fsdp_config": {"sharding_strategy": "FULL"}}, "fsdp_config.sharding_strategy",
     "FULL_SHARD, HYBRID_SHARD, SHARD_GRAD_OP, NO_SHARD"),
    ({"fsdp_config": {"activation_checkpointing": "false"}},
     "fsdp_config.activation_checkpointing", "true or false"),
    ({"precision": "amp_fp4"}, "precision", "amp_bf16"),
    # a list or a mapping where a name belongs (they crashed the membership test)
    ({"precision": ["amp_bf16"]}, "precision", "amp_bf16"),
    ({"fsdp_config": {"sharding_strategy": {"a": 1}}}, "fsdp_config.sharding_strategy",
     "FULL_SHARD"),
    ({"model": {"name": "mpt_causal_lm", "attn_config": {"attn_impl": [1, 2]}}},
     "model.attn_config.attn_impl", "flash, triton or torch"),
    ({"model": {"name": "mpt_causal_lm", "max_seq_len": "${variables.nowhere}"}},
     "model.max_seq_len", "a reference to one of the config's own keys"),
    ({"model": {"name": "mpt_causal_lm", "expansion_ratio": "4"}}, "model.expansion_ratio",
     "a number > 0, found .4."),
    ({"model": {"name": "mpt_causal_lm", "d_model": "big"}}, "model.d_model", "an integer"),
    ({"model": {"name": "mpt_causal_lm", "loss_fn": "liger"}}, "model.loss_fn",
     "fused_crossentropy or torch_crossentropy"),
    ({"model": {"name": "mpt_causal_lm",
                "attn_config": {"attn_type": "grouped_query_attention"}}},
     "model.attn_config.kv_n_heads", "the key-value heads of grouped_query_attention"),
])
def test_bad_settings_are_one_error_naming_them(change, key, expected):
    with pytest.raises(ConfigError, match=rf"run\.yaml.*key '{key}'.*{expected}"):
        llmfoundry_keys({"model": {"name": "mpt_causal_lm"}, **change}, "run.yaml")


def test_hybrid_sharding_asks_for_its_shard_size():
    config = {"model": {"name": "mpt_causal_lm"},
              "fsdp_config": {"sharding_strategy": "HYBRID_SHARD"}}
    with pytest.warns(FlowsimWarning, match="give 'fsdp_shard'"):
        assert llmfoundry_keys(config, "run.yaml")["fsdp"] is True
    w = flowsim.load_workload({"generator": "llmfoundry", "config": config, "fsdp_shard": 8,
                               "global_batch": 16}, flowsim.load_network(
                                   {"cluster": dict(NODE["cluster"], nodes=2)}))
    assert w.programs


def test_tensor_parallel_settings_are_named_as_not_read():
    config = {"model": {"name": "mpt_causal_lm"}, "tp_config": {"tensor_parallel_degree": 2}}
    with pytest.warns(FlowsimWarning, match="tp_config .* is not read: give 'tp'"):
        assert "tp" not in llmfoundry_keys(config, "run.yaml")




def test_without_fsdp_config_the_run_is_ddp():
    """LLM Foundry without ``fsdp_config`` trains with PyTorch's DDP: nothing sharded, FP32
    gradients all-reduced, nothing recomputed."""
    keys = llmfoundry_keys({"model": {"name": "mpt_causal_lm"}}, "run.yaml")
    assert (keys["fsdp"], keys["distributed_optimizer"], keys["grad_reduce_in_bf16"],
            keys["recompute"]) == (False, False, False, "none")


def test_a_micro_batch_given_beside_an_auto_one_is_taken(tmp_path):
    """The error for ``device_train_microbatch_size: auto`` asks for ``micro_batch`` beside
    ``config``; given, it is the run's."""
    config = {"model": {"name": "mpt_causal_lm", "n_layers": 2},
              "device_train_microbatch_size": "auto", "global_train_batch_size": 32}
    w = flowsim.load_workload({"generator": "llmfoundry", "config": config, "micro_batch": 2},
                              flowsim.load_network(NODE))
    forwards = {op.name.split(".")[0] for op in w.programs[0].ops
                if op.kind == "compute" and ".layer0" in op.name}
    assert len(forwards) == 32 // (2 * 8)   # micro-batches per GPU

