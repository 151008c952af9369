"""NeMo 1's fine-tuning configs (``generator: nemo`` with a ``model.peft`` block): LoRA's rank
and targets as NeMo reads them, the launcher's stage-prefixed interpolations, the schemes that
are refused, and one of NeMo 24.07's published fine-tuning runs read from its launch command
as the validation row prices it."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators.nemo import nemo_keys

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import validate_published as vp  # noqa: E402

#: a NeMo-Framework-Launcher fine-tuning config as a launch resolves it: the converted
#: checkpoint's model keys (Llama 2 70B) under the stage's, which point into its data block
#: through the stage name (``${peft.model...}``)
SFT = {
    "trainer": {"devices": 8, "num_nodes": 1, "precision": "bf16"},
    "model": {
        "num_layers": 80, "hidden_size": 8192, "ffn_hidden_size": 28672,
        "num_attention_heads": 64, "num_query_groups": 8, "activation": "fast-swiglu",
        "position_embedding_type": "rope", "share_embeddings_and_output_weights": False,
        "tokenizer": {"type": "meta-llama/Llama-2-70b-hf"},
        "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
        "encoder_seq_length": "${peft.model.data.train_ds.max_seq_length}",
        "global_batch_size": 128, "micro_batch_size": 4, "mcore_gpt": True,
        "transformer_engine": True, "apply_rope_fusion": True, "sequence_parallel": False,
        "ub_tp_comm_overlap": False, "fp8": False, "fp8_hybrid": True,
        "peft": {"peft_scheme": None,
                 "lora_tuning": {"adapter_dim": 32, "adapter_dropout": 0.0,
                                 "layer_selection": None}},
        "data": {"train_ds": {"max_seq_length": 2048, "packed_sequence": False,
                              "global_batch_size": "${peft.model.global_batch_size}"}},
        "optim": {"name": "mcore_distributed_optim", "overlap_grad_sync": True,
                  "overlap_param_sync": True, "grad_sync_dtype": "bf16"},
    },
}


def _keys(model: dict | None = None, **kwargs) -> dict:
    config = copy.deepcopy(SFT)
    config["model"].update(model or {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        return nemo_keys(config, "<test>", **kwargs)


def _lora(**tuning) -> dict:
    return {"peft": {"peft_scheme": "lora", "lora_tuning": tuning}}


def test_the_sequence_is_read_through_the_launcher_s_interpolation():
    assert _keys()["sequence"] == 2048
    assert "lora_rank" not in _keys()   # no PEFT scheme: every weight trained


def test_an_interpolation_naming_no_key_is_nemo_s_default():
    """``${seq_len}`` (one part, no such key) names nothing: NeMo's default, with a
    warning, as before."""
    config = copy.deepcopy(SFT)
    config["model"]["encoder_seq_length"] = "${seq_len}"
    with pytest.warns(flowsim.FlowsimWarning, match="interpolation"):
        assert "sequence" not in nemo_keys(config, "<test>")


@pytest.mark.parametrize("tuning, rank, targets", [
    ({}, 32, ["linear_qkv"]),   # NeMo's defaults
    ({"adapter_dim": 8, "target_modules": ["attention_dense", "mlp_fc2"]}, 8,
     ["linear_proj", "linear_fc2"]),
    ({"target_modules": ["attention", "mlp_fc1"]}, 32,
     ["linear_qkv", "linear_proj", "linear_fc1"]),
    ({"target_modules": ["all", "attention_qkv"]}, 32,
     ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]),
])
def test_lora_reads_nemo_s_rank_and_targets(tuning, rank, targets):
    keys = _keys(_lora(**tuning))
    assert (keys["lora_rank"], keys["lora_targets"]) == (rank, targets)


@pytest.mark.parametrize("model, key", [
    ({"peft": {"peft_scheme": "ptuning"}}, r"model\.peft\.peft_scheme"),
    ({"peft": {"peft_scheme": "lora,ptuning"}}, r"model\.peft\.peft_scheme"),
    (_lora(adapter_dim=0), r"model\.peft\.lora_tuning\.adapter_dim"),
    (_lora(adapter_dim="32"), r"model\.peft\.lora_tuning\.adapter_dim"),
    (_lora(target_modules="attention_qkv"), r"model\.peft\.lora_tuning\.target_modules"),
    (_lora(target_modules=["attention_qkv", "router"]),
     r"model\.peft\.lora_tuning\.target_modules\[1\]"),
    (_lora(target_modules=[["attention_qkv"]]),
     r"model\.peft\.lora_tuning\.target_modules\[0\]"),
    ({"peft": {"peft_scheme": "lora", "lora_tuning": 32}}, r"model\.peft\.lora_tuning'"),
    ({"peft": "lora"}, r"key 'model\.peft'"),   # not priced as full training
])
def test_what_nemo_s_peft_cannot_be_priced_as_is_refused(model, key):
    with pytest.raises(ConfigError, match=key):
        _keys(model)


def test_what_is_priced_otherwise_is_named():
    """Adapters on some layers only, the canonical variant and packed sequences without a
    document length each come with a warning naming the key."""
    config = copy.deepcopy(SFT)
    config["model"].update(_lora(layer_selection=[1, 2], variant="canonical"))
    config["model"]["data"]["train_ds"]["packed_sequence"] = True
    with pytest.warns(flowsim.FlowsimWarning) as caught:
        nemo_keys(config, "<test>")
    text = " ".join(str(w.message) for w in caught)
    for key in ("layer_selection", "variant canonical", "packed_sequence"):
        assert key in text
    with warnings.catch_warnings():
        warnings.simplefilter("error", flowsim.FlowsimWarning)
        config["model"]["peft"] = {"peft_scheme": None}
        config["model"]["data"]["train_ds"]["packed_sequence"] = False
        nemo_keys(config, "<test>")   # none of them: no warning


def test_nemo_2407_s_70b_lora_launch_is_the_validation_row():
    """The launcher's H100 example (examples/peft/llama/h100/70b_1node_lora.sh: its
    ``peft.model.*`` items, the stage prefix dropped) on the fine-tuning config gives the
    spec the validation row prices by hand, and the same step."""
    row = next(r for r in vp.rows("nemo2407_h100_llama2_70b_lora_8gpu"))
    overrides = ("model.micro_batch_size=1 model.global_batch_size=32 "
                 "model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=4 "
                 "model.peft.peft_scheme=lora model.ub_tp_comm_overlap=true model.fp8=true "
                 "++model.fp8_params=true model.optim.name=fused_adam "
                 "model.data.train_ds.packed_sequence=true "
                 "model.data.train_ds.max_seq_length=4096")
    spec = {"generator": "nemo", "config": copy.deepcopy(SFT), "overrides": overrides,
            "device": row["device"], "document_tokens": 256}
    net = vp.network(row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        imported = flowsim.simulate(net, spec, "nccl")
        by_hand = flowsim.simulate(net, vp.spec(row), "nccl")
    assert float(imported.time_ns) == float(by_hand.time_ns)


def test_the_training_workloads_page_s_lora_example_is_the_row():
    """The page's NeMo fine-tuning example, on a launcher config without the checkpoint's
    model keys (which the example gives beside it), prices the validation row's step."""
    import yaml

    page = (ROOT / "docs" / "guide" / "workloads.md").read_text()
    section = page[page.index("NeMo 24.07's\nLlama 2 70B LoRA run"):]
    spec = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    launcher = copy.deepcopy(SFT)
    for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                "num_query_groups", "activation", "position_embedding_type",
                "share_embeddings_and_output_weights", "tokenizer"):
        del launcher["model"][key]
    spec["config"] = launcher
    row = next(r for r in vp.rows("nemo2407_h100_llama2_70b_lora_8gpu"))
    net = vp.network(row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        assert float(flowsim.simulate(net, spec, "nccl").time_ns) == \
            float(flowsim.simulate(net, vp.spec(row), "nccl").time_ns)
