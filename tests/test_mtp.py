"""Multi-token prediction (``mtp_layers``, DeepSeek-V3's MTP modules as Megatron-Core runs
them): each depth is one more layer of the last layer's kind, a ``2h -> h`` projection,
norms, an embedding lookup and the output layer again, on the last pipeline stage. Checked by
the FLOPs and parameters each depth adds there (closed forms), by what the other stages keep,
against Megatron-LM's FLOP count, and by its importers and bad specs."""

from __future__ import annotations

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.workload import flops
from flowsim.workload.generators import transformer
from flowsim.workload.generators.megatron import megatron_keys
from flowsim.workload.generators.nemo import nemo_keys
from flowsim.workload.generators.transformer import model_shape
from flowsim.workload.generators.transformer_mla import layer_kernels
from flowsim.workload.generators.transformer_program import OPTIMIZER_BYTES_PER_PARAM
from flowsim.workload.generators.transformer_spec import parse_transformer

#: 16 NPUs: two nodes of 8
NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [150, 25],
       "latency": [500, 2000]}
H, V, TP, PP, DP, N = 512, 4096, 2, 2, 4, 1024
DENSE = dict(layers=4, hidden=H, heads=8, sequence=N, micro_batch=1, vocab=V, gated_mlp=True,
             tied_embeddings=False, tp=TP, pp=PP, dp=DP, global_batch=4 * DP, sp=True,
             distributed_optimizer=True)
MICRO_BATCHES = 4


def _build(**keys):
    return transformer(flowsim.load_network(NET), **dict(DENSE, **keys))


def _row_flops(work, stage: int, row: str) -> float:
    index = work.layers.index(row)
    return sum(op.flops for op in work.programs[stage].ops
               if op.kind == "compute" and op.layer == index)


@pytest.mark.parametrize("recompute, passes", [("none", 3), ("full", 4)])
def test_a_depth_adds_a_layer_its_projection_and_the_logits_again_on_the_last_stage(
        recompute, passes):
    plain, mtp = _build(recompute=recompute), _build(recompute=recompute, mtp_layers=1)
    last = PP - 1
    # the projection's GEMMs: forward (again before the backward under recomputation), data
    # and weight gradients, each 2 n (2h) (h / t) per micro-batch
    projection = passes * 2 * N * 2 * H * (H // TP) * MICRO_BATCHES
    assert _row_flops(mtp, last, "mtp0") == pytest.approx(
        _row_flops(mtp, last, "layer3") + projection, rel=1e-12)
    assert _row_flops(mtp, last, "logits") == pytest.approx(
        2 * _row_flops(plain, last, "logits"), rel=1e-12)
    # the first stage builds the same ops
    first = [(op.name, op.flops, op.size) for op in plain.programs[0].ops]
    assert first == [(op.name, op.flops, op.size) for op in mtp.programs[0].ops]


@pytest.mark.parametrize("tied, copy", [(False, 1), (True, 0)])
def test_a_depth_s_parameters_reach_the_last_stage_s_optimizer(tied, copy):
    """Its layer, its projection (2h x h over TP) and three norms; untied on another stage
    than the embedding, its own copy of the embedding too (Megatron-Core builds one)."""
    def step_bytes(work):
        ops = work.programs[PP - 1].ops
        return next(op.mem_bytes for op in ops if op.name == "optimizer")

    plain, mtp = _build(tied_embeddings=tied), _build(tied_embeddings=tied, mtp_layers=1)
    k = layer_kernels(parse_transformer(dict(DENSE, tied_embeddings=tied), "argument"))
    depth = k.dense_parameters + 2 * H * H // TP + 3 * H + copy * (V // TP) * H
    assert step_bytes(mtp) - step_bytes(plain) == pytest.approx(
        OPTIMIZER_BYTES_PER_PARAM * depth / DP, rel=1e-12)


def test_a_depth_takes_the_last_layer_s_kind_and_lengthens_the_step():
    moe = dict(experts=8, top_k=2, moe_ffn=256, ep=4, moe_layer_freq=[1, 1, 1, 0])
    work = _build(**moe, mtp_layers=1)
    names = [op.name for op in work.programs[PP - 1].ops]
    assert not any(".mtp0." in n and "dispatch" in n for n in names)   # dense, as layer 3
    work = _build(**dict(moe, moe_layer_freq=[0, 1, 1, 1]), mtp_layers=1)
    assert any(".mtp0." in op.name and op.collective == "all_to_all"
               for op in work.programs[PP - 1].ops)
    times = [float(flowsim.simulate(NET, {"generator": "transformer", **DENSE,
                                          "mtp_layers": d}, "nccl").time_ns)
             for d in (0, 1, 2)]
    assert times[0] < times[1] < times[2]


def test_a_depth_keeps_its_activations_and_logits():
    plain, mtp = _build(pp=1, dp=8), _build(pp=1, dp=8, mtp_layers=1)
    kept = mtp.memory["activations"] - plain.memory["activations"]
    logits = 4 * N * (V // TP)   # FP32, for the one micro-batch in flight
    layer = 2 * N * H // TP      # more than the layer's input alone
    assert kept > logits + layer
    assert mtp.memory["weights"] > plain.memory["weights"]


def test_fully_sharded_depths_gather_their_parameters():
    work = _build(pp=1, dp=8, fsdp=True, distributed_optimizer=False, mtp_layers=1)
    k = layer_kernels(parse_transformer(dict(DENSE, pp=1, dp=8, fsdp=True,
                                             distributed_optimizer=False), "argument"))
    gathers = {op.size for op in work.programs[0].ops if op.kind == "collective"
               and ".mtp0." in op.name and op.name.endswith("params.all_gather")
               and ".embedding." not in op.name}   # the embedding's unit gathered again
    assert gathers == {int(2 * (k.dense_parameters + 2 * H * H // TP + 3 * H) / 8)}


def test_megatron_flops_count_depths_as_megatron_lm_does():
    """Megatron-LM's ``num_floating_point_operations`` (training.py) counts a depth's layer
    as a layer, its norms and projection as ``6 (3h + 2h^2)`` per token and its logits as
    ``6 h V`` per token."""
    spec = parse_transformer(dict(DENSE, mtp_layers=2), "argument")
    shape = model_shape(spec)
    five = model_shape(parse_transformer(dict(DENSE, layers=6), "argument"))
    tokens = shape.global_batch * shape.sequence
    expected = flops.megatron(five) + 6 * tokens * 2 * (3 * H + 2 * H * H) \
        + 6 * tokens * H * V * 2
    assert flops.megatron(shape) == pytest.approx(expected, rel=1e-12)
    moe = dict(DENSE, experts=8, top_k=2, moe_ffn=256, ep=4)
    dense_last = model_shape(parse_transformer(dict(moe, moe_layer_freq=[1, 1, 1, 0],
                                                    mtp_layers=1), "argument"))
    assert dense_last.all_dense_layers == 2 and dense_last.parameters > \
        model_shape(parse_transformer(dict(moe, moe_layer_freq=[1, 1, 1, 0]),
                                      "argument")).parameters


def test_importers_read_the_depths():
    assert megatron_keys(["--mtp-num-layers", "1", "--bf16"], "train.sh")["mtp_layers"] == 1
    keys = nemo_keys({"model": {"mtp_num_layers": 2}}, "config.yaml")
    assert keys["mtp_layers"] == 2


@pytest.mark.parametrize("extra", [{"mtp_layers": 1, "vocab": 0}, {"mtp_layers": -1}])
def test_bad_depths_are_refused_naming_the_key(extra):
    assert_spec_refused(dict(DENSE, **extra), "mtp_layers")
