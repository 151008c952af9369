"""Megatron-FSDP's hybrid sharding (``fsdp_replicas``, ``fsdp_outer``), a repeated
multi-token prediction depth under FSDP, and the Megatron-LM and Megatron-Bridge settings
that ask for them, checked by closed forms (bytes and counts of each collective) and by what
Megatron-FSDP's source does (``megatron_fsdp.py``, ``param_and_grad_buffer.py`` at
Megatron-LM 24bad8e67)."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest

import flowsim
from flowsim.errors import ConfigError, FlowsimWarning
from flowsim.workload.generators import transformer
from flowsim.workload.generators.megatron import parse_megatron
from flowsim.workload.generators.megatron_bridge import bridge_keys

#: 2 nodes of 8 GPUs: the sharding group a node (dim 0), its 2 replicas across (dim 1)
TWO_NODES = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
             "latency": [500, 2000]}
H, FFN, M = 256, 1024, 3
KEYS = dict(layers=4, hidden=H, ffn=FFN, heads=8, sequence=128, micro_batch=2, vocab=0, tp=1,
            dp=16, global_batch=2 * 16 * M, fsdp=True, fsdp_replicas=2, fsdp_impl="megatron")
#: one layer's weights: QKV and projection, FC1 and FC2, two norms
LAYER = 4 * H * H + 2 * H * FFN + 2 * H


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(TWO_NODES)


def _collectives(workload):
    (program,) = workload.programs
    return Counter((op.collective, op.pass_, op.dims, op.size) for op in program.ops
                   if op.kind == "collective")


@pytest.mark.parametrize("outer, replicas", [
    ("all_reduce", {("all_reduce", "wg", (1,), 4 * LAYER // 8): 4 * M}),   # FSDP2's HSDP
    ("all_reduce_last", {("all_reduce", "wg", (1,), 4 * LAYER // 8): 4}),
    ("optim", {("reduce_scatter", "wg", (1,), 4 * LAYER // 8): 4,
               ("all_gather", "fwd", (1,), 2 * LAYER // 16): 4,
               ("all_gather", "ig", (1,), 2 * LAYER // 16): 4})])
def test_replicas_reduce_as_the_outer_strategy_says(net, outer, replicas):
    """Per layer over 3 micro-batches the node gathers the 1/8 shard before each forward and
    backward and reduce-scatters the gradients after each backward. The replicas all-reduce
    the gradient shard each time (FSDP2), once after the last micro-batch (Megatron-FSDP's
    ``no_shard``), or reduce-scatter it then, each gathering the 1/16 shard back in the
    first micro-batch's forward and backward (``optim``)."""
    work = transformer(net, **KEYS, fsdp_outer=outer)
    inner = {("all_gather", "fwd", (0,), 2 * LAYER // 8): 4 * M,
             ("all_gather", "ig", (0,), 2 * LAYER // 8): 4 * M,
             ("reduce_scatter", "wg", (0,), 4 * LAYER): 4 * M}
    assert _collectives(work) == {**inner, **replicas}


def test_optim_shards_the_optimizer_over_every_rank_and_keeps_the_node_shard(net):
    """``optim``: Adam's 12 bytes per parameter on 1/16 of each layer, not 1/8, and a step
    over that share; the weights kept are the node's 1/8 shards either way."""
    last = transformer(net, **KEYS, fsdp_outer="all_reduce_last")
    optim = transformer(net, **KEYS, fsdp_outer="optim")
    assert last.memory["optimizer"] == pytest.approx(12 * 4 * LAYER / 8)
    assert optim.memory["optimizer"] == pytest.approx(12 * 4 * LAYER / 16)
    assert optim.memory["weights"] == pytest.approx(last.memory["weights"])
    steps = [[op.mem_bytes for op in w.programs[0].ops if op.name == "optimizer"]
             for w in (last, optim)]
    assert steps[0][0] == pytest.approx(2 * steps[1][0])


def test_mxfp8_experts_cross_domains_in_mxfp8(net):
    """MXFP8 with ``fp8_param_gather``: 8 experts over EP 8 leave each expert on 2 ranks,
    one per replica, so its only gather is the replicas' (``optim``): the rank's half of it,
    a byte and a 32-element block's scale per weight, in the forward and again (the other
    layout) in the backward of the first micro-batch."""
    keys = dict(KEYS, experts=8, top_k=2, ep=8, moe_ffn=FFN, dtype="fp8", fp8_recipe="mxfp8",
                fp8_param_gather=True, device="gb200", fsdp_outer="optim")
    (program,) = transformer(net, **keys).programs
    expert = 2 * H * FFN   # one local expert: FC1 and FC2
    outer = Counter((op.pass_, op.size) for op in program.ops if op.kind == "collective"
                    and "outer" in op.name)
    size = int(expert * (1 + 1 / 32) / 2)
    assert outer[("fwd", size)] == outer[("ig", size)] == 4
    assert sum(outer.values()) == 16   # and each layer's dense shard, both passes


@pytest.mark.parametrize("keys, key, expected", [
    (dict(fsdp_replicas=0, fsdp_outer="optim"), "fsdp_outer", "unless fsdp has replicas"),
    (dict(fsdp_outer="optim", fsdp_defer_grad_sync=True), "fsdp_outer",
     "fsdp_defer_grad_sync"),
    (dict(fsdp=False, fsdp_replicas=2, distributed_optimizer=True), "fsdp_replicas",
     "without fsdp"),
    (dict(fsdp_replicas=3), "fsdp_replicas", "a divisor of dp=16"),
    (dict(fsdp_replicas=2, fsdp_shard=4), "fsdp_replicas", "dp / fsdp_shard"),
    (dict(fsdp_outer="sometimes"), "fsdp_outer", "all_reduce")])
def test_bad_hybrid_sharding_names_the_key(net, keys, key, expected):
    with pytest.raises(ConfigError, match=f"{key}.*{expected}"):
        transformer(net, **{**KEYS, **keys})


def test_a_repeated_depth_is_one_unit_gathered_for_each_use_and_reduced_once(net):
    """Two multi-token prediction depths sharing one layer (``mtp_repeated``): the shared
    unit is gathered before each depth's forward and backward (Megatron-FSDP frees it after
    each) and its gradients reduced once per micro-batch, after the first depth's backward,
    its last use; the second depth has no unit of its own."""
    keys = dict(KEYS, vocab=1000, mtp_layers=2, mtp_repeated=True,
                global_batch=2 * 16, fsdp_replicas=0)
    (program,) = transformer(net, **keys).programs
    depth = [op for op in program.ops if op.kind == "collective" and ".mtp" in op.name
             and ".params." in op.name or ".mtp" in op.name and ".grads." in op.name]
    gathers = Counter(op.pass_ for op in depth if op.collective == "all_gather"
                      and "embedding" not in op.name)
    reductions = [op for op in depth if op.collective == "reduce_scatter"]
    assert gathers == {"fwd": 2, "ig": 2}
    assert len(reductions) == 1 and ".mtp0." in reductions[0].name
    assert {op.layer for op in reductions} == {keys["layers"]}


def test_megatron_lm_flags_ask_for_hybrid_sharding_and_offloading():
    """``--use-megatron-fsdp`` with replicas and the outer strategy, and fine-grained
    offloading with its settings, read as keys; a module Megatron-Core does not name and
    replicas of a partial sharding are refused naming the flag; replicas of the distributed
    optimizer alone are left out with a warning."""
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
            "--micro-batch-size 1 --global-batch-size 16 --num-experts 8 --moe-router-topk 2 "
            "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --bf16 "
            "--vocab-size 1000 ")
    args = base + ("--use-megatron-fsdp --num-distributed-optimizer-instances 2 "
                   "--outer-dp-sharding-strategy optim --fine-grained-activation-offloading "
                   "--offload-modules moe_act expert_fc1 --min-offloaded-tensor-size 1000 "
                   "--fine-grained-offloading-max-inflight-offloads 1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        keys = dict(parse_megatron({"args": args}, "spec.yml").keys)
    assert {k: keys[k] for k in ("fsdp", "fsdp_replicas", "fsdp_outer", "offload_modules",
                                 "offload_min_elements", "offload_max_inflight")} == \
        dict(fsdp=True, fsdp_replicas=2, fsdp_outer="optim",
             offload_modules=["moe_act", "expert_fc1"], offload_min_elements=1000,
             offload_max_inflight=1)
    with pytest.raises(ConfigError, match="--offload-modules.*found 'flash'"):
        parse_megatron({"args": base + "--fine-grained-activation-offloading "
                                       "--offload-modules flash"}, "spec.yml")
    with pytest.raises(ConfigError, match="--num-distributed-optimizer-instances"):
        parse_megatron({"args": base + "--use-megatron-fsdp --data-parallel-sharding-"
                                       "strategy optim --num-distributed-optimizer-"
                                       "instances 2"}, "spec.yml")
    with pytest.warns(FlowsimWarning, match="--num-distributed-optimizer-instances"):
        keys = dict(parse_megatron({"args": base + "--use-distributed-optimizer "
                                               "--num-distributed-optimizer-instances 2"},
                                   "spec.yml").keys)
    assert "fsdp_replicas" not in keys


def test_megatron_bridge_ddp_and_model_blocks_ask_for_the_same():
    """Nemotron 3 Ultra's recipe settings (Megatron-Bridge 4ab94dfad,
    ``perf_recipes/nemotronh/common.py``): Megatron-FSDP over 64-GPU domains with the
    optimizer sharded across them, the fused grouped MLP's tensors offloaded; Megatron-
    Core's config default strategy is ``no_shard`` (Megatron's DDP)."""
    config = {"model": {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                        "seq_length": 128, "num_moe_experts": 8, "moe_router_topk": 2,
                        "moe_token_dispatcher_type": "alltoall",
                        "fine_grained_activation_offloading": True,
                        "offload_modules": ["fused_group_mlp"],
                        "min_offloaded_tensor_size": 500_000_000},
              "train": {"micro_batch_size": 1, "global_batch_size": 16},
              "ddp": {"use_megatron_fsdp": True,
                      "data_parallel_sharding_strategy": "optim_grads_params",
                      "num_distributed_optimizer_instances": 4,
                      "outer_dp_sharding_strategy": "optim"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        keys = bridge_keys(config, "spec.yml")
        assert {k: keys.get(k) for k in ("fsdp", "fsdp_replicas", "fsdp_outer",
                                         "offload_modules", "offload_min_elements",
                                         "fused_grouped_mlp")} == \
            dict(fsdp=True, fsdp_replicas=4, fsdp_outer="optim",
                 offload_modules=["fused_group_mlp"], offload_min_elements=500_000_000,
                 fused_grouped_mlp=True)
        config["ddp"] = {"use_megatron_fsdp": True}
        assert "fsdp" not in bridge_keys(config, "spec.yml")
    config["ddp"] = {"use_distributed_optimizer": True, "num_distributed_optimizer_instances": 2}
    with pytest.warns(FlowsimWarning, match="ddp.num_distributed_optimizer_instances"):
        assert "fsdp_replicas" not in bridge_keys(config, "spec.yml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlowsimWarning)
        config["model"]["use_transformer_engine_op_fuser"] = False
        with pytest.raises(ConfigError, match="use_transformer_engine_op_fuser"):
            bridge_keys(config, "spec.yml")
        config["model"]["offload_modules"] = []
        with pytest.raises(ConfigError, match="model.offload_modules"):
            bridge_keys(config, "spec.yml")


@pytest.fixture(scope="module")
def ultra():
    """The bundled Nemotron 3 Ultra workload and its network: 4 GB300 racks of 64."""
    import pathlib

    import yaml

    root = pathlib.Path(__file__).resolve().parents[1]
    spec = yaml.safe_load((root / "workloads" / "nemotron3_ultra.yml").read_text())
    cluster = yaml.safe_load((root / "topologies" / "clusters" / "gb300_nvl72.yml")
                             .read_text())["cluster"]
    return spec, {"cluster": {**cluster, "nodes": 4, "gpus_per_node": 64}}


@pytest.mark.parametrize("change, seconds, gib", [
    ({}, 1.770, 212.1),
    ({"offload_modules": []}, 1.770, 296.3),
    ({"fsdp_outer": "all_reduce_last"}, 1.797, 285.5),
    ({"offload_max_inflight": 0}, 2.132, 212.1)])
def test_the_guides_ultra_runs(ultra, change, seconds, gib):
    """The Training workloads page's numbers for the bundled Ultra and three changes: the
    run fits in a GB300's 288 GiB, not without its offloading, and with the optimizer sharded
    inside a domain only by 2.5 GiB, less than the estimate leaves out; waiting for the
    copies costs their time on the forward's path."""
    spec, network = ultra
    ds = flowsim.simulate(network, {**spec, **change}, "nccl", model="flow")
    assert round(float(ds.time_ns) / 1e9, 3) == seconds
    assert round(ds.attrs["memory_gib"], 1) == gib
    assert (ds.attrs["memory_gib"] <= ds.attrs["memory_capacity_gib"]) == (gib < 288)


def test_the_bundled_ultra_is_the_published_row(ultra):
    """``workloads/nemotron3_ultra.yml`` prices as the validation row of the same run."""
    import csv
    import pathlib
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "scripts"))
    import validate_published as vp

    row = next(r for r in vp.rows("mbridge2608_gb300_nemotron3_ultra") if r)
    spec, network = ultra
    bundled = flowsim.simulate(network, spec, "nccl", model="flow").time_ns
    record = {r["run"]: float(r["predicted_s"]) for r in
              csv.DictReader((root / "validation" / "published" / "results.csv").open())}
    assert float(bundled) / 1e9 == pytest.approx(record[row["run"]], rel=1e-5)


def test_the_readmes_ultra_command_fits_only_with_its_offloading():
    """The README's Nemotron 3 Ultra command runs as pasted and fits a GB300's memory; the
    same run without its offloading does not, and takes as long (the copies hide)."""
    import json
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    base = shlex.split(re.search(r"`(flowsim run --workload nemotron3_ultra[^`]*)`",
                                 readme).group(1))[2:]

    def run(*more):
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json", *base, *more],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
        return json.loads(out)

    plain, kept = run(), run("--set", "workload.offload_modules=[]")
    assert plain["memory_fits"] and not kept["memory_fits"]
    assert plain["time_ns"] == pytest.approx(kept["time_ns"], rel=1e-9)
