"""A Megatron-Bridge run's saved ``run_config.yaml`` (``generator: megatron_bridge``): the file
as ``ConfigContainer.to_yaml`` writes it (every section a mapping with its class as
``_target_``, functions, dtypes and enums as ``_target_`` mappings) prices the run the
validation rows price by hand from the same settings; LoRA, packed sequences and the refusals
name their Megatron-Bridge paths."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest
import yaml

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators.megatron_bridge import bridge_keys

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import validate_published as vp  # noqa: E402


def _function(path: str) -> dict:
    return {"_target_": path, "_call_": False}


#: Megatron-Bridge 26.06's H100 Llama 3 70B SFT run (scripts/performance, FP8 with current
#: scaling, TP 4 x PP 4 x VP 5 on 32 GPUs) as its checkpoint's run_config.yaml would hold it
RUN = {
    "_target_": "megatron.bridge.training.config.ConfigContainer",
    "model": {
        "_target_": "megatron.bridge.models.gpt_provider.GPTModelProvider",
        "num_layers": 80, "hidden_size": 8192, "ffn_hidden_size": 28672,
        "num_attention_heads": 64, "num_query_groups": 8, "kv_channels": 128,
        "seq_length": 4096, "vocab_size": 128256, "make_vocab_size_divisible_by": 128,
        "should_pad_vocab": False, "gated_linear_unit": True,
        "activation_func": _function("torch.nn.functional.silu"),
        "normalization": "RMSNorm", "layernorm_epsilon": 1e-05,
        "position_embedding_type": "rope", "rotary_base": 500000,
        "share_embeddings_and_output_weights": False, "add_bias_linear": False,
        "params_dtype": _function("torch.bfloat16"), "bf16": True, "fp16": False,
        "attention_backend": {"_target_": "megatron.core.transformer.enums.AttnBackend",
                              "_call_": True, "_args_": [5], "_name_": "auto"},
        "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 4,
        "virtual_pipeline_model_parallel_size": 5, "context_parallel_size": 1,
        "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None,
        "sequence_parallel": True, "num_moe_experts": None,
        "recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
        "fp8": "e4m3", "fp8_recipe": "tensorwise", "fp8_param": True,
        "fp8_dot_product_attention": False, "fp4": None,
        "tp_comm_overlap": True, "overlap_p2p_comm": True, "batch_p2p_comm": False,
        "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te",
        "apply_rope_fusion": True, "transformer_impl": "transformer_engine",
        "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["mlp"],
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
    },
    "train": {"_target_": "megatron.bridge.training.config.TrainingConfig",
              "global_batch_size": 32, "micro_batch_size": 1, "train_iters": 50},
    "ddp": {"_target_": "megatron.bridge.training.config.DistributedDataParallelConfig",
            "use_distributed_optimizer": True, "overlap_grad_reduce": True,
            "overlap_param_gather": True, "align_param_gather": True,
            "bucket_size": 134217728, "grad_reduce_in_fp32": False,
            "use_megatron_fsdp": False},
    "optimizer": {"_target_": "megatron.bridge.training.config.OptimizerConfig",
                  "optimizer": "adam", "use_distributed_optimizer": True, "lr": 0.0001},
    "dist": {"_target_": "megatron.training.config.DistributedInitConfig",
             "align_grad_reduce": True},
    "comm_overlap": {"_target_": "megatron.bridge.training.comm_overlap.CommOverlapConfig",
                     "tp_comm_overlap": True, "tp_comm_overlap_cfg": None},
    "mixed_precision": {
        "_target_": "megatron.bridge.training.mixed_precision.MixedPrecisionConfig",
        "bf16": True, "fp8": "e4m3", "fp8_recipe": "tensorwise", "fp8_param_gather": True},
    "dataset": {"_target_": "megatron.bridge.training.config.FinetuningDatasetConfig",
                "seq_length": 4096, "packed_sequence_specs": None},
    "peft": None,
}
#: the same run's LoRA counterpart's differences (26.06's H100 LoRA config: 8 GPUs, TP 2 x
#: PP 4 x VP 20, rank 16 on QKV, the cross entropy not fused)
LORA = {"tensor_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 20,
        "cross_entropy_loss_fusion": False}
PEFT = {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 16, "alpha": 32,
        "dropout": 0.0, "target_modules": ["linear_qkv"]}


def _run(**model) -> dict:
    run = copy.deepcopy(RUN)
    run["model"].update(model)
    return run


def _time(net, spec) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        return float(flowsim.simulate(net, spec, "nccl").time_ns)


@pytest.mark.parametrize("run, peft", [
    ("mbridge2606_h100_llama3_70b_sft_fp8_32gpu", None),
    ("mbridge2606_h100_llama3_70b_lora_fp8_8gpu", PEFT)])
def test_a_saved_run_config_prices_the_validation_row(tmp_path, run, peft):
    """The file, written as Megatron-Bridge writes it and read back, gives the step of the
    row priced by hand from the configs (its keys read in the row's notes)."""
    config = _run(**(LORA if peft else {}))
    config["peft"] = peft
    (tmp_path / "run_config.yaml").write_text(yaml.safe_dump(config))
    row = vp.rows(run)[0]
    spec = {"generator": "megatron_bridge", "config": "run_config.yaml",
            "device": row["device"]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    net = vp.network(row)
    assert _time(net, str(tmp_path / "spec.yaml")) == _time(net, vp.spec(row))


def test_the_settings_it_reads():
    keys = bridge_keys(_run(), "<test>")
    assert (keys["layers"], keys["sequence"], keys["global_batch"], keys["vocab"]) == \
        (80, 4096, 32, 128256)
    assert (keys["tp"], keys["pp"], keys["vpp"], keys["sp"]) == (4, 4, 5, True)
    assert (keys["dtype"], keys["fp8_recipe"], keys["fp8_param_gather"]) == \
        ("fp8", "tensorwise", True)
    assert keys["tp_comm_overlap"] and keys["tp_comm_overlap_cfg"] == "te_default"
    assert keys["cross_entropy_fusion_impl"] == "te" and keys["grad_reduce_in_bf16"]
    moe = bridge_keys(_run(num_moe_experts=128, moe_router_topk=8, moe_ffn_hidden_size=1536,
                           expert_model_parallel_size=8, overlap_moe_expert_parallel_comm=True,
                           moe_token_dispatcher_type="alltoall"), "<test>")
    assert (moe["experts"], moe["top_k"], moe["moe_ffn"], moe["ffn"], moe["ep"]) == \
        (128, 8, 1536, 28672, 8)
    assert moe["expert_layout"] == "folded" and moe["moe_a2a_overlap"]
    nvfp4 = bridge_keys(_run(fp8=None, fp4="e2m1", fp4_recipe="nvfp4"), "<test>")
    assert (nvfp4["dtype"], nvfp4["fp8_recipe"]) == ("fp8", "nvfp4")
    padded = bridge_keys(_run(vocab_size=32001, should_pad_vocab=True), "<test>")
    assert padded["vocab"] == 32256   # rounded up to a multiple of 128 x TP 4
    assert bridge_keys(_run(vocab_size=32001), "<test>")["vocab"] == 32001



def test_the_pipeline_split_reads_as_megatron_lm_s_flags():
    """Megatron-Core's split settings give the layers per stage Megatron-LM's flags give:
    the embedding and the loss counted as layers, uneven first and last stages, a layout
    string; a bad count is named by its Megatron-Bridge path; a layout saved as an object
    (26.06 writes it without its stages) is named in a warning."""
    flat = {"virtual_pipeline_model_parallel_size": None}
    both = bridge_keys(_run(num_layers=78, account_for_embedding_in_pipeline_split=True,
                            account_for_loss_in_pipeline_split=True, **flat), "<test>")
    assert both["pipeline_layout"] == [19, 20, 20, 19]
    uneven = bridge_keys(_run(num_layers_in_first_pipeline_stage=18,
                              num_layers_in_last_pipeline_stage=18, **flat), "<test>")
    assert uneven["pipeline_layout"] == [18, 22, 22, 18]
    text = bridge_keys(_run(pipeline_model_parallel_layout="Et*19|t*20|t*20|t*21L", **flat),
                       "<test>")
    assert text["pipeline_layout"] == [19, 20, 20, 21]
    with pytest.raises(ConfigError, match=r"model\.num_layers_in_first_pipeline_stage"):
        bridge_keys(_run(num_layers_in_first_pipeline_stage=100, **flat), "<test>")
    saved = {"_target_": "megatron.core.transformer.pipeline_parallel_layer_layout."
                         "PipelineParallelLayerLayout", "_call_": True}
    with pytest.warns(flowsim.FlowsimWarning, match="pipeline_model_parallel_layout"):
        assert "pipeline_layout" not in bridge_keys(
            _run(pipeline_model_parallel_layout=saved), "<test>")


def test_ddp_settings_hold_without_the_distributed_optimizer():
    """Megatron-Bridge's LoRA recipes run Megatron-Core's DDP without the distributed
    optimizer: its overlap, buckets and reduction precision still hold."""
    config = _run()
    config["ddp"] = dict(config["ddp"], use_distributed_optimizer=False)
    keys = bridge_keys(config, "<test>")
    assert not keys.get("distributed_optimizer")
    assert keys["overlap_grad_reduce"] and keys["grad_reduce_in_bf16"]
    assert keys["bucket_size"] == 134217728


def test_overrides_and_lora_targets():
    config = _run()
    config["peft"] = dict(PEFT, target_modules=["linear_fc1", "linear_qkv", "linear_fc1"])
    keys = bridge_keys(config, "<test>", "train.global_batch_size=256 peft.dim=8")
    assert keys["global_batch"] == 256
    assert (keys["lora_rank"], keys["lora_targets"]) == (8, ["linear_fc1", "linear_qkv"])


@pytest.mark.parametrize("change, key", [
    ({"peft": {"_target_": "megatron.bridge.peft.dora.DoRA", "dim": 8}}, r"peft\._target_"),
    ({"peft": dict(PEFT, dim=0)}, r"peft\.dim"),
    ({"peft": dict(PEFT, target_modules=["linear_qkv", "router"])},
     r"peft\.target_modules\[1\]"),
    ({"model": None}, "model"),
    ({"train": None}, "train"),   # a checkpoint conversion's file
    ({"peft": "megatron.bridge.peft.lora.LoRA"}, r"key 'peft'"),
    ({"ddp": dict(RUN["ddp"], overlap_grad_reduce="yes")}, r"key 'ddp\.overlap_grad_reduce'"),
    # read through the NeMo importer, named by the Megatron-Bridge path
    ({"ddp": dict(RUN["ddp"], overlap_param_gather="yes")}, r"key 'ddp\.overlap_param_gather'"),
])
def test_what_cannot_be_priced_is_refused(change, key):
    config = {**copy.deepcopy(RUN), **change}
    with pytest.raises(ConfigError, match=key):
        bridge_keys(config, "<test>")


def test_packed_sequences_without_a_length_are_named():
    config = _run()
    config["dataset"]["packed_sequence_specs"] = {
        "_target_": "megatron.bridge.data.datasets.packed_sequence.PackedSequenceSpecs",
        "packed_sequence_size": 4096}
    with pytest.warns(flowsim.FlowsimWarning, match="packed_sequence_specs"):
        bridge_keys(config, "<test>")
    with warnings.catch_warnings():
        warnings.simplefilter("error", flowsim.FlowsimWarning)
        bridge_keys(config, "<test>", documents=True)
        config["dataset"]["packed_sequence_specs"]["packed_sequence_size"] = -1   # off
        bridge_keys(config, "<test>")


def test_the_file_itself_is_a_workload(tmp_path):
    """A checkpoint's run_config.yaml given as the workload, as saved (no spec around it),
    is read by the importer; the device comes from the cluster preset."""
    row = vp.rows("mbridge2606_h100_llama3_70b_sft_fp8_32gpu")[0]
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump(RUN))
    net = vp.network(row)
    assert _time(net, str(path)) == _time(net, vp.spec(row))


def test_a_run_config_without_its_class_line_is_named(tmp_path):
    """Without ``_target_`` a run_config.yaml is no graph either: the error names the missing
    class line and the spec that reads it, not the graph keys it lacks."""
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in RUN.items() if k != "_target_"}))
    with pytest.raises(ConfigError, match=r"run_config\.yaml: key '_target_'.*ConfigContainer"
                                          r".*generator: megatron_bridge"):
        flowsim.load_workload(str(path), vp.network(vp.rows(
            "mbridge2606_h100_llama3_70b_sft_fp8_32gpu")[0]))
