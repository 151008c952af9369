"""``generator: nemo2``: NeMo 2 pre-training recipes (``nemo llm pretrain --factory NAME``)
read into the transformer's keys: the shapes and layouts NeMo's source gives each recipe,
performance mode, NeMo-Run's command-line overrides, a DGX Cloud row rebuilt from its recipe,
and every bad input as one line naming it."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import yaml

import flowsim
from flowsim import ConfigError, FlowsimWarning
from flowsim.workload.generators.nemo2 import finish_keys, nemo2_keys
from flowsim.workload.generators.nemo2_recipes import BUCKET_SIZE, RECIPES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import validate_published  # noqa: E402

#: (recipe, layers, hidden, ffn, heads, kv_heads, tp, pp, vpp, cp, ep, sequence, batch,
#: micro-batch, vocab, gated): NeMo 8cfedd7's recipes and model configs, read again here
SHAPES = [
    ("llama3_8b", 32, 4096, 14336, 32, 8, 1, 1, 1, 2, 1, 8192, 512, 1, 128256, True),
    ("llama3_70b", 80, 8192, 28672, 64, 8, 4, 4, 5, 2, 1, 8192, 512, 1, 128256, True),
    ("llama31_405b", 126, 16384, 53248, 128, 8, 8, 8, 2, 4, 1, 8192, 512, 1, 128256, True),
    ("llama2_7b", 32, 4096, 11008, 32, 32, 2, 1, 1, 1, 1, 4096, 512, 1, 32000, True),
    ("mixtral_8x7b", 32, 4096, 14336, 32, 8, 1, 4, 8, 1, 8, 4096, 512, 1, 32000, True),
    ("mixtral_8x22b", 56, 6144, 16384, 48, 8, 2, 4, 14, 2, 8, 4096, 512, 1, 32768, True),
    ("nemotron4_15b", 32, 6144, 24576, 48, 8, 4, 1, 1, 1, 1, 4096, 32, 2, 256000, False),
    ("nemotron4_340b", 96, 18432, 73728, 96, 8, 8, 12, 8, 2, 1, 4096, 2304, 1, 256000, False),
    ("gpt3_175b", 96, 12288, 49152, 96, 96, 4, 8, 6, 1, 1, 2048, 2048, 2, 50257, False),
    ("llama3_8b_16k", 32, 4096, 14336, 32, 8, 4, 2, 1, 2, 1, 16384, 512, 1, 128256, True),
    ("llama3_8b_64k", 32, 4096, 14336, 32, 8, 4, 2, 1, 4, 1, 65536, 512, 1, 128256, True),
    ("llama3_8b_128k", 32, 4096, 14336, 32, 8, 4, 2, 1, 8, 1, 131072, 512, 1, 128256, True),
    ("llama3_70b_16k", 80, 8192, 28672, 64, 8, 8, 2, 1, 2, 1, 16384, 512, 1, 128256, True),
    ("llama3_70b_64k", 80, 8192, 28672, 64, 8, 8, 4, 1, 8, 1, 65536, 512, 1, 128256, True),
    ("nemotron4_15b_16k", 32, 6144, 24576, 48, 8, 2, 2, 1, 2, 1, 16384, 32, 2, 256000, False),
    ("nemotron4_15b_64k", 32, 6144, 24576, 48, 8, 4, 2, 1, 4, 1, 65536, 32, 2, 256000, False),
    ("mixtral_8x7b_16k", 32, 4096, 14336, 32, 8, 4, 2, 1, 4, 1, 16384, 512, 1, 32000, True),
    ("mixtral_8x7b_64k", 32, 4096, 14336, 32, 8, 8, 4, 1, 4, 1, 65536, 512, 1, 32000, True),
    ("mixtral_8x22b_64k", 56, 6144, 16384, 48, 8, 2, 4, 14, 2, 8, 65536, 512, 1, 32768, True),
    ("llama32_1b", 16, 2048, 8192, 32, 8, 1, 1, 1, 1, 1, 8192, 512, 1, 128256, True),
    ("llama32_3b", 28, 3072, 8192, 24, 8, 1, 1, 1, 1, 1, 8192, 512, 1, 128256, True),
    ("nemotron3_4b", 32, 3072, 9216, 24, 8, 2, 1, 1, 1, 1, 4096, 32, 2, 256000, False),
    ("nemotron3_8b", 32, 4096, 16384, 32, 32, 2, 1, 1, 1, 1, 4096, 32, 2, 256000, False),
    ("nemotron3_22b", 40, 6144, 24576, 48, 48, 2, 4, 10, 1, 1, 4096, 32, 1, 256000, False),
    ("qwen2_500m", 24, 896, 4864, 14, 2, 1, 1, 1, 1, 1, 4096, 32, 2, 151936, True),
    ("qwen25_1p5b", 28, 1536, 8960, 12, 2, 1, 1, 1, 1, 1, 4096, 32, 2, 151936, True),
    ("qwen2_7b", 28, 3584, 18944, 28, 4, 2, 1, 1, 1, 1, 4096, 32, 2, 152064, True),
    ("qwen25_14b", 48, 5120, 13824, 40, 8, 4, 1, 1, 1, 1, 4096, 32, 2, 152064, True),
    ("qwen25_32b", 64, 5120, 27648, 40, 8, 8, 2, 1, 1, 1, 4096, 32, 2, 152064, True),
    ("qwen25_72b", 80, 8192, 29568, 64, 8, 8, 4, 1, 1, 1, 4096, 32, 2, 152064, True),
]
#: recipes whose strategy has no DDP config: Megatron-Core's defaults, no overlap
NO_OVERLAP = ("qwen",)
NAMES = ("layers", "hidden", "ffn", "heads", "kv_heads", "tp", "pp", "vpp", "cp", "ep",
         "sequence", "global_batch", "micro_batch", "vocab", "gated_mlp")


def _cluster(nodes: int) -> dict:
    return {"cluster": {"device": "h100", "nodes": nodes, "gpus_per_node": 8,
                        "nic_gbps": 400, "nics_per_node": 8}}


def _keys(recipe: str, overrides=None) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return nemo2_keys(recipe, "spec.yml", overrides)


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_each_recipe_as_nemo_sets_it(shape):
    keys = _keys(shape[0])
    got = tuple(keys.get(name, 1 if name in ("tp", "pp", "vpp", "cp", "ep") else None)
                for name in NAMES)
    assert got == shape[1:]
    # every recipe: the distributed optimizer, both overlaps (but Qwen's), FP32 gradient
    # reduction, bucket by bucket (NeMo 2), the fused cross entropy (GPTConfig's default)
    overlap = not shape[0].startswith(NO_OVERLAP)
    assert keys["distributed_optimizer"] and keys["overlap_grad_reduce"] == overlap
    assert keys["overlap_param_gather"] == overlap and not keys["grad_reduce_in_bf16"]
    assert keys["align_grad_reduce"] is False and keys["cross_entropy_fusion"] is True
    assert keys["tp_comm_overlap"] is False and keys["recompute"] == "none"


def test_model_details():
    assert _keys("gpt3_175b")["position_embedding"] == "learned_absolute"
    assert _keys("gpt3_175b")["tied_embeddings"] is True
    assert _keys("llama3_8b")["position_embedding"] == "rope"
    assert _keys("mixtral_8x7b")["experts"] == 8 and _keys("mixtral_8x7b")["top_k"] == 2
    # Llama 3.1 405B counts its embedding and loss as layers of the pipeline split
    assert _keys("llama31_405b")["pipeline_layout"] == "first_last_fewer"
    mistral = _keys("mistral_7b")
    assert mistral["window"] == 4096 and mistral["cp_comm_type"] == "a2a"
    # Llama 3.2 ties its output layer to the embedding; the long-context recipes use SP
    assert _keys("llama32_1b")["tied_embeddings"] and not _keys("llama3_8b_16k")["tied_embeddings"]
    assert _keys("llama3_70b_64k")["sp"] and _keys("mixtral_8x7b_16k")["experts"] == 8


def test_performance_mode():
    plain, fast = _keys("llama3_70b"), _keys("llama3_70b(performance_mode=True)")
    assert not plain["grad_reduce_in_bf16"] and fast["grad_reduce_in_bf16"]
    assert fast["tp_comm_overlap"] and fast["tp_comm_overlap_cfg"] == "nemo"
    # the overlap callback, once the data-parallel size is known: 128 Mi buckets and, with
    # interleaving, aligned gathers; with one data-parallel rank, no overlap at all
    wide = finish_keys({**fast, "dp": 2})
    assert wide["bucket_size"] == BUCKET_SIZE and wide["align_param_gather"] is True
    assert wide["overlap_grad_reduce"] and wide["overlap_param_gather"]
    alone = finish_keys({**fast, "dp": 1})
    assert not alone["overlap_grad_reduce"] and not alone["overlap_param_gather"]
    assert "bucket_size" not in alone and not alone["align_param_gather"]
    # Llama 3.1 70B's performance mode leaves the plugin's FP32 reduction as it is
    assert not _keys("llama31_70b(performance_mode=True)")["grad_reduce_in_bf16"]
    # Nemotron-4: the callback's overlap without a userbuffers config (Transformer Engine's)
    assert _keys("nemotron4_340b(performance_mode=True)")["tp_comm_overlap_cfg"] == "te_default"
    # Mixtral: tensor parallelism instead of expert parallelism
    mixtral = _keys("mixtral_8x7b(performance_mode=True)")
    assert (mixtral["tp"], mixtral.get("ep", 1), mixtral["sp"]) == (8, 1, True)
    assert not _keys("mixtral_8x7b(performance_mode=false)")["sp"]
    # Mixtral 8x22B 64k's performance mode keeps the FP32 gradient reduction
    long = _keys("mixtral_8x22b_64k(performance_mode=True)")
    assert (long["tp"], long.get("ep", 1), long["grad_reduce_in_bf16"]) == (8, 1, False)
    # Nemotron-3 asks for TP overlap without sequence parallelism: NeMo drops it
    nemotron3 = _keys("nemotron3_22b(performance_mode=True)")
    assert not nemotron3["tp_comm_overlap"] and nemotron3["grad_reduce_in_bf16"]
    assert _keys("nemotron3_8b(performance_mode=True, sequence_parallelism=True)"
                 )["tp_comm_overlap"]


def test_performance_mode_follows_the_data_parallel_size_when_built():
    # Llama 3.1 405B on 32 nodes: TP 8 x PP 8 x CP 4 leaves one data-parallel rank, so
    # NeMo's callback turns the overlaps off; on 64 nodes they are on, in 128 Mi buckets
    spec = {"generator": "nemo2", "recipe": "llama31_405b(performance_mode=True)",
            "overrides": "data.global_batch_size=16"}
    one = flowsim.simulate(flowsim.load_network(_cluster(32)), spec, "nccl")
    two = flowsim.simulate(flowsim.load_network(_cluster(64)),
                           {**spec, "overrides": "data.global_batch_size=32"}, "nccl")
    assert float(one.time_ns) > 0 and float(two.time_ns) > 0
    plain = flowsim.simulate(flowsim.load_network(_cluster(32)),
                             {**spec, "dp": 1, "overlap_grad_reduce": True}, "nccl")
    assert float(plain.time_ns) != float(one.time_ns)


def test_overrides_as_nemo_run_takes_them():
    keys = _keys("llama3_70b", "trainer.strategy.tensor_model_parallel_size=8 "
                 "trainer.strategy.virtual_pipeline_model_parallel_size=None "
                 "data.global_batch_size=128 trainer.plugins.fp8=hybrid "
                 "model.config.recompute_granularity=full log.name=run trainer.max_steps=10")
    assert (keys["tp"], keys.get("vpp", 1), keys["global_batch"]) == (8, 1, 128)
    assert keys["dtype"] == "fp8" and keys["recompute"] == "full"
    listed = _keys("llama3_8b", ["trainer.strategy.ddp.bucket_size=1000000",
                                 "trainer.plugins.grad_reduce_in_fp32=False"])
    assert listed["bucket_size"] == 1_000_000 and listed["grad_reduce_in_bf16"]
    with pytest.warns(FlowsimWarning, match=r"not modelled, left out: "
                                            r"trainer\.strategy\.ddp\.grad_reduce_in_fp32"):
        nemo2_keys("llama3_8b", "spec.yml", "trainer.strategy.ddp.grad_reduce_in_fp32=False")
    # Transformer Engine's cross entropy (NeMo's performance scripts from 25.07 on), only
    # beside the fusion (on by default in NeMo 2)
    te = _keys("llama3_8b", "model.config.cross_entropy_fusion_impl=te")
    assert te["cross_entropy_fusion"] and te["cross_entropy_fusion_impl"] == "te"
    off = _keys("llama3_8b", ["model.config.cross_entropy_fusion_impl=te",
                              "model.config.cross_entropy_loss_fusion=False"])
    assert "cross_entropy_fusion_impl" not in off
    with pytest.raises(ConfigError, match=r"key 'model\.config\.cross_entropy_fusion_impl': "
                                          r"expected native or te, found 'liger'"):
        _keys("llama3_8b", "model.config.cross_entropy_fusion_impl=liger")


def test_a_dgx_cloud_row_from_its_recipe():
    # DGX Cloud's Nemotron-4 340B on 256 H100s (NeMo 25.04): the recipe in performance mode,
    # resized as the benchmark's table says, gives the row's transcribed settings; only the
    # userbuffers differ (the benchmark's scripts name NeMo's, the recipe leaves TE's)
    row = validate_published.rows("dgxc2505_nemotron4_340b_bf16_256gpu")[0]
    spec = validate_published.spec(row)
    keys = _keys("nemotron4_340b(performance_mode=True)",
                 "trainer.strategy.pipeline_model_parallel_size=8 "
                 "trainer.strategy.virtual_pipeline_model_parallel_size=12 "
                 "trainer.strategy.context_parallel_size=1 data.global_batch_size=64")
    for key, value in spec.items():
        if key not in ("generator", "dp", "tp_comm_overlap_cfg", "attention", "device"):
            assert keys.get(key, value) == value, key
    keys = finish_keys({**keys, "dp": spec["dp"]})
    for key in ("grad_reduce_in_bf16", "bucket_size", "align_grad_reduce", "tp_comm_overlap",
                "cross_entropy_fusion", "vpp", "global_batch"):
        assert keys[key] == spec[key], key


def test_runs_from_a_yaml_spec(tmp_path):
    spec = tmp_path / "run.yml"
    spec.write_text(yaml.safe_dump({"generator": "nemo2",
                                    "recipe": "nemotron4_15b(performance_mode=True)",
                                    "overrides": "data.global_batch_size=16"}))
    ds = flowsim.simulate(flowsim.load_network(_cluster(1)), str(spec), "nccl")
    assert float(ds.time_ns) > 0 and 0 < ds.attrs["mfu"] < 1
    wider = flowsim.simulate(flowsim.load_network(_cluster(2)), str(spec), "nccl")
    assert float(wider.time_ns) < float(ds.time_ns)   # DP 4 instead of 2: half the batch each


def test_every_recipe_builds():
    for name in RECIPES:
        if name == "mistral_7b":   # its sliding window with context parallelism: refused below
            continue
        keys = _keys(name)
        model = keys["tp"] * keys.get("pp", 1) * keys.get("cp", 1)
        nodes = -(-model * keys.get("ep", 1) // 8)   # expert parallelism splits DP
        batch = keys["micro_batch"] * keys.get("pp", 1) * (nodes * 8 // model)  # a short step
        spec = {"generator": "nemo2", "recipe": name,
                "overrides": f"data.global_batch_size={batch}"}
        work = flowsim.load_workload(spec, flowsim.load_network(_cluster(nodes)))
        assert work.programs, name


@pytest.mark.parametrize("spec, message", [
    ({"recipe": "llama4_70b"}, r"key 'recipe': expected one of llama3_8b, .*found 'llama4_70b'"),
    ({"recipe": "llama3_8b(seq_length=4)"}, r"key 'recipe \(seq_length\)': expected a keyword"),
    ({"recipe": "llama3_8b(performance_mode='yes')"},
     r"key 'recipe \(performance_mode\)': expected True or False"),
    ({"recipe": "mistral_7b(performance_mode=True)"}, r"has no performance mode"),
    ({"recipe": "llama3_8b(1, 2)"}, r"key 'recipe': expected a recipe name or a call"),
    ({"recipe": 7}, r"key 'recipe': expected a NeMo 2 recipe"),
    ({"recipe": "llama3_8b", "overrides": "model.config.num_layers"}, r"key 'overrides'"),
    ({"recipe": "llama3_8b", "overrides": "executor.nodes=2"},
     r"key 'overrides \(executor\)': expected a path under trainer"),
    ({"recipe": "llama3_8b", "tp_size": 2}, r"key 'tp_size'"),
    ({"overrides": "data.seq_length=4"}, r"key 'recipe'"),
    ({"recipe": "llama3_8b", "overrides": "trainer.strategy=megatron"},
     r"key 'overrides \(trainer\.strategy\)': expected a mapping of settings"),
    ({"recipe": "llama3_8b", "overrides": "trainer.plugins=fp64_mixed"},
     r"key 'overrides \(trainer\.plugins\)': expected a mapping of settings or a precision"),
    ({"recipe": "llama3_8b", "overrides": "model=llama3_70b"},
     r"key 'overrides \(model\)': expected a mapping"),
    ({"recipe": "llama3_70b", "overrides": "trainer.strategy.sequence_parallel=maybe"},
     r"key 'trainer\.strategy\.sequence_parallel'"),
    ({"recipe": "llama3_8b", "overrides": "model.config.recompute_granularity=Full"},
     r"key 'model\.config\.recompute_granularity': expected selective, full or None"),
    ({"recipe": "llama3_8b", "overrides": "data.global_batch_size*=x"},
     r"key 'overrides \(data\.global_batch_size\)': expected a number on both sides"),
    ({"recipe": "llama3_8b(**x)"}, r"key 'recipe \(\*\*\)'"),
    ({"recipe": "llama3_8b", "overrides": "trainer.plugins.precision=x"},
     r"key 'trainer\.plugins\.precision': expected bf16-mixed"),
    ({"recipe": "llama3_8b", "overrides": "model.config.window_size=x"},
     r"model\.config\.window_size: expected two integers"),
    ({"recipe": "llama3_70b(performance_mode=True)",
      "overrides": "trainer.strategy.pipeline_model_parallel_size=four"}, r"key 'pp'"),
])
def test_bad_inputs_are_one_line(spec, message):
    with pytest.raises(ConfigError, match=message) as info:
        flowsim.load_workload({"generator": "nemo2", **spec},
                              flowsim.load_network(_cluster(1)))
    assert "\n" not in str(info.value)


def test_a_layout_flowsim_cannot_run_names_the_recipe_setting():
    # Mistral 7B's sliding window with its context parallelism of 2: at the recipe's 4,096
    # tokens the 4,096-token window is none, at 8,192 it is one flowsim cannot run with CP
    assert flowsim.load_workload({"generator": "nemo2", "recipe": "mistral_7b"},
                                 flowsim.load_network(_cluster(1))).programs
    with pytest.raises(ConfigError, match=r"window.*model\.config\.window_size"):
        flowsim.load_workload({"generator": "nemo2", "recipe": "mistral_7b",
                               "overrides": "data.seq_length=8192"},
                              flowsim.load_network(_cluster(1)))
    work = flowsim.load_workload({"generator": "nemo2", "recipe": "mistral_7b",
                                  "overrides": "trainer.strategy.context_parallel_size=1 "
                                               "data.global_batch_size=8"},
                                 flowsim.load_network(_cluster(1)))
    assert work.programs


def test_nemo_run_syntax_and_nemo_s_own_corrections():
    keys = _keys("llama3_8b", "data.global_batch_size*=2 data.seq_length-=4096 "
                 "model.config.window_size=(2048,0) trainer.strategy.context_parallel_size=1")
    assert (keys["global_batch"], keys["sequence"], keys["window"]) == (1024, 4096, 2048)
    # a precision factory in place of the plugin, and its fields; fp8=False is BF16
    assert _keys("llama3_8b", "trainer.plugins=bf16_with_fp8_mixed")["dtype"] == "fp8"
    assert _keys("llama3_8b", "trainer.plugins=bf16_with_fp8_mixed")["fp8_param_gather"]
    # the factories' scaling recipes: delayed, current scaling, MXFP8 blocks
    for plugin, recipe in (("bf16_with_fp8_mixed", "delayed"),
                           ("bf16_with_fp8_current_scaling_mixed", "tensorwise"),
                           ("bf16_with_mxfp8_mixed", "mxfp8"),
                           ("bf16_with_nvfp4_mixed", "nvfp4")):
        keys = _keys("llama3_8b", f"trainer.plugins={plugin}")
        assert (keys["dtype"], keys.get("fp8_recipe", "delayed")) == ("fp8", recipe)
    assert _keys("llama3_8b", "trainer.plugins.fp8=hybrid "
                 "trainer.plugins.fp8_recipe=cs")["fp8_recipe"] == "tensorwise"
    # Megatron-Bridge's sub-channel (blockwise) factory is priced as current scaling, said once
    with pytest.warns(FlowsimWarning, match="fp8_recipe blockwise: priced as tensorwise"):
        keys = nemo2_keys("llama3_8b", "spec.yml",
                          "trainer.plugins=bf16_with_fp8_subchannel_scaling_mixed")
    assert (keys["dtype"], keys["fp8_recipe"]) == ("fp8", "tensorwise")
    assert _keys("llama3_8b", "trainer.plugins.fp8=False")["dtype"] == "bf16"
    assert _keys("llama3_8b", "trainer.plugins=fp16_mixed")["dtype"] == "fp16"
    assert _keys("llama3_8b", "trainer.plugins.fp8=hybrid trainer.plugins.fp8_params=True"
                 )["fp8_param_gather"]
    # FP8 attention only in FP8 training, as Transformer Engine runs it
    assert _keys("llama3_8b", "trainer.plugins.fp8=hybrid "
                 "trainer.plugins.fp8_dot_product_attention=True")["fp8_attention"]
    assert not _keys("llama3_8b", "trainer.plugins.fp8_dot_product_attention=True"
                     )["fp8_attention"]
    # recomputation as Megatron-Core takes it: granularity, method and layers
    full = _keys("llama3_8b", "model.config.recompute_granularity=full "
                 "model.config.recompute_method=uniform model.config.recompute_num_layers=1")
    assert full["recompute"] == "full" and "recompute_layers" not in full
    block = _keys("llama3_8b", "model.config.recompute_granularity=full "
                  "model.config.recompute_method=block model.config.recompute_num_layers=4")
    assert (block["recompute"], block["recompute_layers"]) == ("full", 4)
    # None, and the layout keys of Nemotron's recipe calls
    assert _keys("llama3_8b", "trainer.strategy.ddp.bucket_size=None").get("bucket_size") is None
    nemotron = _keys("nemotron4_340b(tensor_parallelism=4, pipeline_parallelism=8, "
                     "global_batch_size=64, precision='16-mixed')")
    assert (nemotron["tp"], nemotron["pp"], nemotron["global_batch"]) == (4, 8, 64)
    assert nemotron["dtype"] == "fp16"
    # experts over the context- and data-parallel ranks, as Megatron-Core folds them
    assert _keys("mixtral_8x22b")["expert_layout"] == "folded"
    assert _keys("mixtral_8x7b", "trainer.strategy.expert_tensor_parallel_size=1"
                 )["expert_tp"] == 1
    # no split accounting: an even split
    assert "pipeline_layout" not in _keys(
        "llama31_405b", "trainer.strategy.account_for_embedding_in_pipeline_split=False")
    # NeMo drops virtual stages without pipelining and SP without TP, with a warning
    with pytest.warns(FlowsimWarning, match="virtual pipeline stages without pipeline"):
        flat = nemo2_keys("llama3_70b", "s", "trainer.strategy.pipeline_model_parallel_size=1")
    assert flat.get("vpp", 1) == 1
    with pytest.warns(FlowsimWarning, match="sequence parallelism without tensor"):
        lone = nemo2_keys("llama3_70b(performance_mode=True)", "s",
                          "trainer.strategy.tensor_model_parallel_size=1")
    assert not lone["sp"] and not lone["tp_comm_overlap"]


def test_what_is_skipped_and_what_is_named():
    _keys("llama3_8b", "optim.config.lr=1e-4 log.ckpt.save_top_k=2 trainer.max_steps=5")
    with pytest.warns(FlowsimWarning, match=r"not modelled, left out: "
                                            r"model\.config\.tensor_model_parallel_size, "
                                            r"trainer\.callbacks\[1\]\.tp_comm_overlap"):
        keys = nemo2_keys("llama3_8b", "s", "model.config.tensor_model_parallel_size=8 "
                          "trainer.callbacks[1].tp_comm_overlap=False")
    assert keys.get("tp", 1) == 1   # NeMo takes the parallel sizes from the strategy


def test_the_launch_command_as_typed():
    from flowsim.workload.generators.nemo2 import parse_nemo2

    typed = parse_nemo2({"command": "nemo llm pretrain --factory 'llama3_70b(performance_mode="
                                    "True)' trainer.strategy.context_parallel_size=1 "
                                    "executor=slurm run.name=x -y",
                         "overrides": "data.global_batch_size=256"}, "spec.yml")
    parts = parse_nemo2({"recipe": "llama3_70b(performance_mode=True)",
                         "overrides": "trainer.strategy.context_parallel_size=1 "
                                      "data.global_batch_size=256"}, "spec.yml")
    assert typed.keys == parts.keys and typed.finish is not None
    assert parse_nemo2({"command": "nemo llm pretrain --factory=llama3_8b"}, "s").keys == \
        parse_nemo2({"recipe": "llama3_8b"}, "s").keys


@pytest.mark.parametrize("spec, message", [
    ({"command": "nemo llm pretrain --factory llama3_8b --nodes 2"},
     r"key 'command': expected nemo llm pretrain --factory NAME .*found '--nodes'"),
    ({"command": "nemo llm pretrain trainer.max_steps=1"}, r"a command with --factory NAME"),
    ({"command": "nemo llm pretrain --factory llama3_8b", "recipe": "llama3_8b"},
     r"the launch command or 'recipe', not both"),
    ({"command": 3}, r"key 'command': expected a launch command"),
])
def test_bad_commands_are_one_line(spec, message):
    with pytest.raises(ConfigError, match=message):
        flowsim.load_workload({"generator": "nemo2", **spec}, flowsim.load_network(_cluster(1)))
