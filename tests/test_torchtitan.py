"""``generator: torchtitan``: a torchtitan job config (TOML) and its command line read into the
transformer's keys, checked against the H200 rows transcribed from torchtitan's benchmark
(``validation/published/torchtitan_h200.csv``) and on its settings one by one."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import yaml

import flowsim
from flowsim import ConfigError, FlowsimWarning
from flowsim.workload.generators.torchtitan import torchtitan_keys
from flowsim.workload.generators.torchtitan_config import apply_cli
from flowsim.workload.generators.transformer_parse import parse_transformer
from flowsim.workload.generators.transformer_schedule import layer_counts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import validate_published  # noqa: E402

#: the settings of torchtitan's Llama 3 8B job config (e7c0cae's layout)
LLAMA3_8B = """
[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 1
seq_len = 8192
compile = false

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[float8]
enable_fsdp_float8_all_gather = false
filter_fqns = ["output"]
"""
#: the command line of the H200 benchmark (torchrun's options and the file left out)
H200_COMMAND = ("--job.config-file torchtitan/models/llama3/train_configs/llama3_8b.toml "
                "--metrics.enable_wandb --training.local_batch_size=2 --training.compile "
                '--model.converters="float8" --float8.enable_fsdp_float8_all_gather '
                "--float8.precompute_float8_dynamic_scale_for_fsdp "
                "--float8.force_recompute_fp8_weight_in_bwd --profiling.profile_freq 1000000 "
                "--training.steps 2000")
#: Dec 2024's layout (9dec370): degrees under [training] and [experimental]
LLAMA3_405B_2024 = """
[model]
name = "llama3"
flavor = "405B"
[training]
batch_size = 2
seq_len = 8192
data_parallel_shard_degree = -1
tensor_parallel_degree = 8
compile = true
[experimental]
pipeline_parallel_degree = 1
enable_async_tensor_parallel = true
[activation_checkpoint]
mode = 'full'
[float8]
enable_float8_linear = true
enable_fsdp_float8_all_gather = true
"""
ROWS = validate_published.rows("torchtitan_")


def _keys(toml: str, overrides=None, tmp_path=None, *, quiet: bool = True):
    """The keys and data-parallel settings of job config ``toml`` (its warnings ignored
    unless not ``quiet``)."""
    path = tmp_path / "job.toml"
    path.write_text(toml)
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore", FlowsimWarning)
        return torchtitan_keys(str(path), str(tmp_path / "run.yml"), overrides)


def _write_run(tmp_path, toml: str, overrides: str | None = None, **extra) -> Path:
    (tmp_path / "job.toml").write_text(toml)
    run = {"generator": "torchtitan", "config": "job.toml", **extra}
    if overrides is not None:
        run["overrides"] = overrides
    path = tmp_path / "run.yml"
    path.write_text(yaml.safe_dump(run))
    return path


@pytest.mark.parametrize("row", ROWS, ids=[r["run"] for r in ROWS])
def test_the_benchmark_rows_are_what_the_importer_reads(row, tmp_path):
    """The transcribed row and the job config with the benchmark's command line simulate
    to the same iteration time on the row's cluster."""
    run = _write_run(tmp_path, LLAMA3_8B, H200_COMMAND)
    network = validate_published.network(row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        imported = flowsim.simulate(network, str(run), "nccl", model="analytical")
        transcribed = flowsim.simulate(network, validate_published.spec(row), "nccl",
                                       model="analytical")
    assert float(imported.time_ns) == float(transcribed.time_ns)


def test_flavors_have_torchtitans_shapes(tmp_path):
    widths = {}
    for flavor in ("8B", "70B", "405B"):
        keys, _ = _keys(LLAMA3_8B.replace('"8B"', f'"{flavor}"'), tmp_path=tmp_path)
        widths[flavor] = (keys["layers"], keys["hidden"], keys["ffn"], keys["kv_heads"])
    # Llama 3's published FFN widths (Dubey et al. 2024, Table 3)
    assert widths == {"8B": (32, 4096, 14336, 8), "70B": (80, 8192, 28672, 8),
                      "405B": (126, 16384, 53248, 8)}
    # mid-2024's Llama 2 (Touvron et al. 2023: 11008, 13824 and 28672 wide, 32K tokens)
    llama2 = {}
    for flavor in ("7B", "13B", "70B"):
        keys, _ = _keys(LLAMA3_8B.replace('"llama3"', '"llama2"').replace('"8B"',
                                                                        f'"{flavor}"'),
                        tmp_path=tmp_path)
        llama2[flavor] = (keys["ffn"], keys["kv_heads"], keys["vocab"])
    assert llama2 == {"7B": (11008, 32, 32000), "13B": (13824, 40, 32000),
                      "70B": (28672, 8, 32000)}
    # early 2024 called Llama 2 "llama"
    keys, _ = _keys(LLAMA3_8B.replace('"llama3"', '"llama"').replace('"8B"', '"7B"'),
                    tmp_path=tmp_path)
    assert (keys["ffn"], keys["vocab"]) == (11008, 32000)
    # late 2025's dense Qwen 3: heads 128 wide whatever the width, small models tied
    keys, _ = _keys(LLAMA3_8B.replace('"llama3"', '"qwen3"').replace('"8B"', '"1.7B"'),
                    tmp_path=tmp_path)
    assert (keys["hidden"], keys["heads"], keys["head_dim"], keys["ffn"],
            keys["tied_embeddings"], keys["vocab"]) == (2048, 16, 128, 6144, True, 151936)


def test_the_h200_command_line_sets_what_it_says(tmp_path):
    keys, data_parallel = _keys(LLAMA3_8B, H200_COMMAND, tmp_path)
    assert (keys["dtype"], keys["fp8_param_gather"], keys["recompute"], keys["micro_batch"],
            keys["sequence"], keys["vocab"]) == ("fp8", True, "every_other_matmul", 2, 8192,
                                                 128256)
    finished = data_parallel.finish({**keys, "dp": 32})
    assert (finished["fsdp"], finished["global_batch"], finished.get("fsdp_shard")) == \
        (True, 64, None)


def test_float8_is_current_scaling_and_the_mx_converter_mxfp8(tmp_path):
    """torchao's Float8Linear scales each tensor from its own amax (``tensorwise``); the MX
    converter is MXFP8, priced as such rather than warned of."""
    keys, _ = _keys(LLAMA3_8B, H200_COMMAND, tmp_path)
    assert (keys["fp8_recipe"], keys["fp8_library"]) == ("tensorwise", "torchao")
    mx, _ = _keys(LLAMA3_8B, H200_COMMAND.replace('"float8"', '"mx"'), tmp_path, quiet=False)
    assert (mx["dtype"], mx["fp8_recipe"]) == ("fp8", "mxfp8")


def test_command_line_forms(tmp_path):
    config = {"training": {"compile": True, "seq_len": 2048}}
    out = apply_cli(config, "--training.seq-len 4096 --training.no-compile --model.converters "
                    "float8,other --parallelism.tensor_parallel_degree=2", "run.yml")
    assert out["training"] == {"compile": False, "seq_len": 4096}
    assert out["model"]["converters"] == ["float8", "other"]
    assert out["parallelism"]["tensor_parallel_degree"] == 2
    assert config["training"]["seq_len"] == 2048   # the config itself is left alone
    with pytest.raises(ConfigError, match="torchrun's own options"):
        apply_cli(config, "--nnodes 4", "run.yml")


def test_the_2024_layout_and_its_pipeline_defaults(tmp_path):
    with pytest.warns(FlowsimWarning, match="asynchronous TP"):
        keys, data_parallel = _keys(LLAMA3_405B_2024, tmp_path=tmp_path, quiet=False)
    assert (keys["tp"], keys["sp"], keys["tp_comm_overlap"], keys["dtype"],
            keys["fp8_param_gather"], keys["recompute"], keys["micro_batch"]) == \
        (8, True, True, "fp8", True, "full", 2)
    # 2024: micro-batches default to one per stage; torchtitan's split gives the first and
    # last stage one layer fewer (the embedding and the output layer weigh a layer each)
    keys, _ = _keys(LLAMA3_405B_2024, "--experimental.pipeline_parallel_degree 8 "
                    "--training.batch_size 32", tmp_path)
    assert (keys["micro_batch"], _layers(keys)) == (4, [15] + [16] * 6 + [15])
    keys, _ = _keys(LLAMA3_405B_2024, "--experimental.pipeline_parallel_degree 8 "
                    "--training.batch_size 32 --experimental.pipeline_parallel_schedule "
                    "Interleaved1F1B", tmp_path)
    assert (keys["micro_batch"], keys["vpp"], keys["schedule"]) == (2, 2, "interleaved")
    assert _layers(keys) == [7] + [8] * 14 + [7]
    keys, _ = _keys(LLAMA3_405B_2024, "--experimental.pipeline_parallel_degree 8 "
                    "--training.batch_size 32 --experimental.pipeline_parallel_schedule "
                    "DualPipeV", tmp_path)   # its V: two stages per rank
    assert (keys["vpp"], keys["schedule"]) == (2, "dualpipev")
    assert _layers(keys) == [7] + [8] * 14 + [7]
    cuts = ",".join(f"layers.{4 * i}" for i in range(1, 32))   # four stages a rank: no V
    with pytest.raises(ConfigError, match=r"split_points.*two per rank with DualPipeV"):
        _keys(LLAMA3_405B_2024, "--experimental.pipeline_parallel_degree 8 "
              "--training.batch_size 32 --experimental.pipeline_parallel_schedule DualPipeV "
              f"--experimental.pipeline_parallel_split_points {cuts}", tmp_path)


def _layers(keys: dict) -> list[int]:
    """The layers of each (virtual) pipeline stage the keys give."""
    values = dict(keys, dp=1)
    values["global_batch"] = values["micro_batch"] * values["pp"] * values.get("vpp", 1)
    return layer_counts(parse_transformer(values, "job.toml"))


def test_pipeline_stages_from_split_points_and_layers_per_stage(tmp_path):
    base = LLAMA3_8B.replace("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 2")
    keys, _ = _keys(base, "--parallelism.pipeline_parallel_split_points layers.10",
                    tmp_path)
    assert (keys["pipeline_layout"], keys.get("vpp", 1), keys["micro_batch"]) == ([10, 22],
                                                                                  1, 1)
    keys, _ = _keys(base, "--parallelism.pipeline_parallel_layers_per_stage 17", tmp_path)
    assert (_layers(keys), keys.get("vpp", 1)) == ([16, 16], 1)
    # split points out of order, or past the model's layers, are one line naming them
    for bad in ("layers.40", "layers.20,layers.10"):
        with pytest.raises(ConfigError, match="pipeline_parallel_split_points"):
            _keys(base.replace("pipeline_parallel_degree = 2", "pipeline_parallel_degree = "
                               f"{bad.count(',') + 2}"),
                  f"--parallelism.pipeline_parallel_split_points {bad}", tmp_path)
    # a looped schedule needs two or more stages per rank: 34 / 2 / 17 is one
    with pytest.raises(ConfigError, match="pipeline_parallel_layers_per_stage"):
        _keys(base, "--parallelism.pipeline_parallel_schedule Interleaved1F1B "
              "--parallelism.pipeline_parallel_layers_per_stage 17", tmp_path)


def test_data_parallel_degrees(tmp_path):
    keys, data_parallel = _keys(LLAMA3_8B, "--parallelism.data_parallel_replicate_degree 2",
                                tmp_path)
    hsdp = data_parallel.finish({**keys, "dp": 16})
    assert (hsdp["fsdp"], hsdp["fsdp_shard"], hsdp["global_batch"]) == (True, 8, 16)
    keys, data_parallel = _keys(LLAMA3_8B, "--parallelism.data_parallel_replicate_degree 8 "
                                "--parallelism.data_parallel_shard_degree 1", tmp_path)
    ddp = data_parallel.finish({**keys, "dp": 8})
    assert (ddp["fsdp"], ddp["overlap_grad_reduce"]) == (False, True)
    keys, data_parallel = _keys(LLAMA3_8B, "--parallelism.data_parallel_shard_degree 4",
                                tmp_path)
    with pytest.raises(ConfigError, match="parallelism.data_parallel_shard_degree"):
        data_parallel.finish({**keys, "dp": 8})


@pytest.mark.parametrize("change, path", [
    ('flavor = "8B"', "model.flavor"),
    ('selective_ac_option = "op"', "activation_checkpoint.selective_ac_option"),
    ("context_parallel_degree = 1", "parallelism.context_parallel_rotate_method"),
    ("pipeline_parallel_degree = 1", "parallelism.pipeline_parallel_schedule"),
])
def test_bad_settings_are_named(change, path, tmp_path):
    bad = {"model.flavor": 'flavor = "17B"',
           "activation_checkpoint.selective_ac_option": 'selective_ac_option = "often"',
           "parallelism.context_parallel_rotate_method":
               'context_parallel_degree = 2\ncontext_parallel_rotate_method = "ring"',
           "parallelism.pipeline_parallel_schedule":
               'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "ZBVZeroBubble"'}
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        _keys(LLAMA3_8B.replace(change, bad[path]), tmp_path=tmp_path)


def test_late_2025_compile_section_and_memory_budget(tmp_path):
    """From August 2025 ``[compile] enable`` with ``components`` (the model compiled only
    when named); late 2025's ``memory_budget`` checkpointing priced as the per-op policy."""
    toml = LLAMA3_8B.replace("compile = false\n", "") + \
        '\n[compile]\nenable = true\ncomponents = ["model", "loss"]\n'
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlowsimWarning)
        keys, _ = _keys(toml, tmp_path=tmp_path, quiet=False)   # compiled: no warning
    # the loss compiled too: PyTorch's cross entropy fused by torch.compile
    assert (keys["cross_entropy_fusion"], keys["cross_entropy_fusion_impl"]) == (True,
                                                                                 "compiled")
    with pytest.warns(FlowsimWarning, match=r"compile\.enable is off for the model"):
        keys, _ = _keys(toml.replace('["model", "loss"]', '["loss"]'), tmp_path=tmp_path,
                        quiet=False)
    assert keys["cross_entropy_fusion_impl"] == "compiled"
    keys, _ = _keys(toml.replace('["model", "loss"]', '["model"]'), tmp_path=tmp_path)
    assert "cross_entropy_fusion" not in keys   # an eager loss: the unfused steps
    with pytest.warns(FlowsimWarning, match="memory_budget"):
        keys, _ = _keys(toml.replace('mode = "selective"', 'mode = "memory_budget"'),
                        tmp_path=tmp_path, quiet=False)
    assert keys["recompute"] == "every_other_matmul"


def test_a_file_that_is_not_toml_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"job\.toml: not valid TOML"):
        _keys("[model\nname = 1", tmp_path=tmp_path)


def test_eager_mode_and_beside_keys(tmp_path):
    run = _write_run(tmp_path, LLAMA3_8B, "--training.local_batch_size 2", device="h200")
    network = {"cluster": {"device": "h200", "nodes": 1, "gpus_per_node": 8, "nic_gbps": 400,
                           "nics_per_node": 8}}
    with pytest.warns(FlowsimWarning, match="training.compile is off for the model"):
        ds = flowsim.simulate(network, str(run), "nccl", model="analytical")
    assert float(ds.time_ns) > 0
    # a key beside the config wins over it
    run = _write_run(tmp_path, LLAMA3_8B, "--training.compile", recompute="none",
                     sequence=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        faster = flowsim.simulate(network, str(run), "nccl", model="analytical")
    assert float(faster.time_ns) < float(ds.time_ns)


#: torchtitan's DeepSeek-V3 16B flavor over 8 expert-parallel ranks
DEEPSEEK_16B = LLAMA3_8B.replace('"llama3"', '"deepseek_v3"').replace('"8B"', '"16B"').replace(
    "context_parallel_degree = 1", "context_parallel_degree = 1\nexpert_parallel_degree = 8")


def _run_on_nodes(tmp_path, toml: str, nodes: int, warn: str = "ignore"):
    """Simulate ``toml`` (compiled, 4K tokens) on ``nodes`` DGX H100s."""
    run = _write_run(tmp_path, toml, "--training.compile --training.seq_len 4096")
    net = {"cluster": {"device": "h100", "nodes": nodes, "gpus_per_node": 8, "nic_gbps": 400,
                       "nics_per_node": 8}}
    with warnings.catch_warnings():
        warnings.simplefilter(warn, FlowsimWarning)
        return flowsim.simulate(net, str(run), "nccl", model="analytical")


def test_deepseek_v3_reads_with_its_experts_and_latent_attention(tmp_path):
    """torchtitan's DeepSeek-V3 16B job config (late 2025): latent attention, one dense
    layer then 26 of 64 routed and 2 shared experts, expert parallelism inside FSDP's ranks,
    per-op checkpointing; it builds and runs on one node."""
    toml = DEEPSEEK_16B
    keys, data_parallel = _keys(toml, tmp_path=tmp_path)
    assert (keys["experts"], keys["top_k"], keys["shared_ffn"], keys["ep"],
            keys["moe_layer_freq"][:2], keys["mla"]["q_lora_rank"], keys["recompute"]) == \
        (64, 6, 2816, 8, [0, 1], 0, "every_other_matmul")
    assert float(_run_on_nodes(tmp_path, toml, 1).time_ns) > 0
    bad = toml.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 4\n"
                       "expert_tensor_parallel_degree = 2")
    with pytest.raises(ConfigError, match=r"parallelism\.expert_tensor_parallel_degree"):
        _keys(bad, tmp_path=tmp_path)


def test_llama4_mixes_dense_and_expert_layers_as_its_step_says(tmp_path):
    """17bx128e: a mixture of experts every 2nd layer (layers 1, 3, ...), 17bx16e every
    layer; expert MLPs half the dense width (torchtitan divides by top-k + shared experts)."""
    read = {}
    for flavor in ("17bx16e", "17bx128e"):
        toml = LLAMA3_8B.replace('"llama3"', '"llama4"').replace('"8B"', f'"{flavor}"')
        keys, _ = _keys(toml, tmp_path=tmp_path)
        read[flavor] = (keys["experts"], keys["moe_layer_freq"][:4], keys["ffn"],
                        keys["moe_ffn"], keys["shared_ffn"], keys["top_k"])
    assert read == {"17bx16e": (16, [1, 1, 1, 1], 16384, 8192, 8192, 1),
                    "17bx128e": (128, [0, 1, 0, 1], 16384, 8192, 8192, 1)}


def test_experts_outside_tensor_parallelism_span_its_ranks_as_torchtitan_lays_them(tmp_path):
    """``expert_tensor_parallel_degree = 1`` with TP 2: torchtitan's expert mesh (efsdp, ep,
    etp) over the dense one (dp_shard, cp, tp), so EP 8 is the TP pair and 4 of FSDP's
    ranks, beside FSDP: the folded layout, built and run on two nodes without a warning."""
    toml = DEEPSEEK_16B.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 2\n"
                                "expert_tensor_parallel_degree = 1")
    keys, _ = _keys(toml, tmp_path=tmp_path)
    assert (keys["tp"], keys["ep"], keys["expert_tp"], keys["expert_layout"]) == \
        (2, 8, 1, "folded")
    assert float(_run_on_nodes(tmp_path, toml, 2, warn="error").time_ns) > 0
    odd = toml.replace("expert_parallel_degree = 8", "expert_parallel_degree = 1").replace(
        "tensor_parallel_degree = 2", "tensor_parallel_degree = 4")   # torchtitan asserts
    with pytest.raises(ConfigError, match=r"parallelism\.expert_parallel_degree"):
        _keys(odd, "--parallelism.expert_parallel_degree 2", tmp_path)


def test_keys_beside_the_config_also_steer_what_is_derived_from_it(tmp_path):
    """A layer count given beside is split by torchtitan's rule (not the flavor's count); a
    recomputation given beside drops the one derived from selective_ac_option; expert
    parallelism on a dense model has no effect, as in torchtitan."""
    pipelined = "--parallelism.pipeline_parallel_degree 2"
    path = tmp_path / "job.toml"
    path.write_text(LLAMA3_8B)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        keys, _ = torchtitan_keys(str(path), str(tmp_path / "run.yml"), pipelined,
                                  beside={"layers": 40})
        assert _layers({**keys, "layers": 40}) == [20, 20]
        keys, _ = torchtitan_keys(str(path), str(tmp_path / "run.yml"),
                                  "--activation_checkpoint.selective_ac_option 3",
                                  beside={"recompute": "none"})
        assert "recompute_every" not in keys
        keys, _ = _keys(LLAMA3_8B, "--parallelism.expert_parallel_degree 8", tmp_path)
    assert "ep" not in keys


def test_the_page_s_job_at_8192_gpus_fully_sharded_and_hybrid(tmp_path):
    """The Training workloads page's torchtitan job on 8,192 H200s: fully sharded, every
    gather is NCCL's ring through 8,192 ranks and the step is mostly exposed communication;
    sharded inside nodes (HSDP) it is not. The page quotes the times, the exposed share and
    the memory."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "workloads.md").read_text()
    section = page[page.index("### From a torchtitan job config"):]
    blocks = section.split("```")
    toml = next(b for b in blocks if b.startswith("toml\n"))[5:]
    run, net = [b[5:] for b in blocks if b.startswith("yaml\n")][:2]
    (tmp_path / "llama3_8b.toml").write_text(toml)
    spec = yaml.safe_load(run)
    spec["config"] = str(tmp_path / "llama3_8b.toml")
    cluster = yaml.safe_load(net)
    cluster["cluster"]["nodes"] = 1024
    hybrid = dict(spec, overrides=spec["overrides"]
                  + " --parallelism.data_parallel_replicate_degree=1024")
    full, hsdp = (flowsim.simulate(cluster, s) for s in (spec, hybrid))
    exposed = 100 * float(full.exposed_comm_ns.max() / full.time_ns)
    text = " ".join(section.split())
    assert f"the step takes {float(full.time_ns) / 1e9:.2f} s, {exposed:.0f}% of it exposed" \
        in text
    assert f"NVLink: {float(hsdp.time_ns) / 1e9:.2f} s" in text
    assert (f"at {hsdp.attrs['memory_gib']:.1f} GiB per GPU instead of "
            f"{full.attrs['memory_gib']:.1f}") in text
    assert exposed > 50 and float(hsdp.exposed_comm_ns.max() / hsdp.time_ns) < 0.1


def test_reshard_never_keeps_the_parameters_to_the_backward(tmp_path):
    """``fsdp_reshard_after_forward = "never"`` without a pipeline: FSDP2 keeps each layer's
    gathered parameters from its forward to its backward (``fsdp_reshard:
    after_backward``); with a pipeline every unit stays gathered anyway."""
    keys, data_parallel = _keys(LLAMA3_8B, "--parallelism.fsdp_reshard_after_forward never",
                                tmp_path)
    assert data_parallel.finish({**keys, "dp": 8})["fsdp_reshard"] == "after_backward"
    keys, data_parallel = _keys(LLAMA3_8B, None, tmp_path)
    assert "fsdp_reshard" not in data_parallel.finish({**keys, "dp": 8})
