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
from flowsim.workload.generators.transformer_optimizer import OPTIMIZER_BYTES_PER_PARAM
from flowsim.workload.generators.transformer_parse import parse_transformer

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


@pytest.mark.parametrize("tied, extra, rank, copy", [
    (False, {}, PP - 1, 1), (True, {}, PP - 1, 0),
    (False, {"pp": 1, "dp": 8}, 0, 0),                            # the embedding beside it
    (False, {"vpp": 2, "schedule": "dualpipev"}, 0, 0)])          # the V: on the first rank
def test_a_depth_s_parameters_reach_its_rank_s_optimizer(tied, extra, rank, copy):
    """Its layer, its projection (2h x h over TP) and three norms; untied on another rank
    than the embedding, its own copy of the embedding too (Megatron-Core builds one)."""
    def step_bytes(work):
        ops = work.programs[rank].ops
        return next(op.mem_bytes for op in ops if op.name == "optimizer")

    keys = dict(extra, tied_embeddings=tied)
    plain, mtp = _build(**keys), _build(**keys, mtp_layers=1)
    k = layer_kernels(parse_transformer(dict(DENSE, **keys), "argument"))
    depth = k.dense_parameters + 2 * H * H // TP + 3 * H + copy * (V // TP) * H
    assert step_bytes(mtp) - step_bytes(plain) == pytest.approx(
        OPTIMIZER_BYTES_PER_PARAM * depth / keys.get("dp", DP), rel=1e-12)


def test_a_depth_takes_the_last_layer_s_kind_and_lengthens_the_step():
    moe = dict(experts=8, top_k=2, moe_ffn=256, ep=4, moe_layer_freq=[1, 1, 1, 0])
    work = _build(**moe, mtp_layers=1)
    names = [op.name for op in work.programs[PP - 1].ops]
    assert any(".mtp0." in n for n in names)
    assert not any(".mtp0." in n and "dispatch" in n for n in names)   # dense, as layer 3
    work = _build(**dict(moe, moe_layer_freq=[0, 1, 1, 1]), mtp_layers=1)
    assert any(".mtp0." in op.name and op.collective == "all_to_all"
               for op in work.programs[PP - 1].ops)
    times = [float(flowsim.simulate(NET, {"generator": "transformer", **DENSE,
                                          "mtp_layers": d}, "nccl").time_ns)
             for d in (0, 1, 2)]
    assert times[0] < times[1] < times[2]


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_a_depth_keeps_its_activations_and_logits(recompute):
    """Korthikanti et al.'s terms for its layer (attention's Q, K, V and output, the gated
    MLP's three inputs, split over TP; block inputs, norms and masks, split by sequence
    parallelism), its two inputs and their concatenation, its FP32 logits; recomputed,
    only its two inputs and the logits. One micro-batch in flight (no pipeline)."""
    keys = dict(pp=1, dp=8, recompute=recompute)
    plain, mtp = _build(**keys), _build(**keys, mtp_layers=1)
    kept = mtp.memory["activations"] - plain.memory["activations"]
    n, t, f = N, TP, 4 * H // TP
    layer = 2 * n * (4 * H // t) + 2 * n * 3 * f + (4 * 2 + 2) * n * H / t
    inputs = 2 * 2 * n * H / t
    logits = 4 * n * (V // TP)
    expected = inputs + logits + (0 if recompute == "full" else inputs + layer)
    assert kept == pytest.approx(expected, rel=1e-12)
    # and its weights, 16-bit: its layer (attention and gated MLP over TP, two norms), its
    # projection (2h x h over TP) and three norms; the embedding is this rank's own (pp 1)
    h, f = H, 4 * H
    depth = (4 * h * h + 3 * h * f) // TP + 2 * h + 2 * h * h // TP + 3 * h
    assert mtp.memory["weights"] - plain.memory["weights"] == 2 * depth


def test_block_recomputation_skips_the_depths_as_megatron_core_does():
    names = [op.name for op in _build(recompute="full", mtp_layers=1).programs[PP - 1].ops]
    assert any(".mtp0.recompute." in n for n in names)
    names = [op.name for op in _build(recompute="full", recompute_layers=1,
                                      mtp_layers=1).programs[PP - 1].ops]
    assert not any(".mtp0.recompute." in n for n in names)
    assert any(".recompute." in n for n in names)   # the decoder's first layer per chunk


def test_a_depth_s_gradient_joins_the_one_before_and_the_decoder_s():
    """The decoder's last layer backward waits for the first depth's input gradient, the
    first depth for the second's; with sequence parallelism the gradient of the depth's
    sequence split is all-gathered before its projection's backward."""
    ops = _build(mtp_layers=2).programs[PP - 1].ops
    ids = {op.name: op.id for op in ops}
    by_name = {op.name: op for op in ops}
    assert ids["mb0.mtp0.inputs_backward"] in by_name["mb0.layer3.residual_backward"].deps
    assert ids["mb0.mtp1.inputs_backward"] in \
        by_name["mb0.mtp0.layer4.residual_backward"].deps
    split = by_name["mb0.mtp0.projection.output.split.all_gather"]
    assert split.size == N * H * 2 // TP


def test_depth_j_attends_through_the_window_decoder_layer_j_does():
    """Megatron-Core numbers the depths' layers from 1 again (their window pattern too);
    their MLP is the last layer's kind."""
    spec = parse_transformer(dict(DENSE, window=256, window_skip_freq=[1, 0, 1, 0],
                                  mtp_layers=2), "argument")
    assert [spec.is_windowed(i) for i in spec.mtp_depths] == [True, False]


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
    six = model_shape(parse_transformer(dict(DENSE, layers=6), "argument"))
    tokens = shape.global_batch * shape.sequence
    expected = flops.megatron(six) + 6 * tokens * 2 * (3 * H + 2 * H * H) \
        + 6 * tokens * H * V * 2
    assert flops.megatron(shape) == pytest.approx(expected, rel=1e-12)
    moe = dict(DENSE, experts=8, top_k=2, moe_ffn=256, ep=4)
    dense_last = model_shape(parse_transformer(dict(moe, moe_layer_freq=[1, 1, 1, 0],
                                                    mtp_layers=1), "argument"))
    no_depth = model_shape(parse_transformer(dict(moe, moe_layer_freq=[1, 1, 1, 0]),
                                             "argument"))
    # the depth is dense as the last layer is: attention, two norms, the dense gated MLP,
    # its projection and three norms (no router, no experts)
    h, f = H, 4 * H
    depth = 4 * h * h + 2 * h + 3 * h * f + 2 * h * h + 3 * h
    assert dense_last.all_dense_layers == 2
    assert dense_last.parameters - no_depth.parameters == depth


def test_palm_flops_count_a_depth_as_a_layer_and_its_projection():
    """PaLM's ``6 N`` per token takes a depth's layer, projection and norms into N, its
    ``12 L h s`` attention term a layer more per depth; the logits' weights are shared."""
    h, f, s = H, 4 * H, N
    plain = model_shape(parse_transformer(DENSE, "argument"))
    two = model_shape(parse_transformer(dict(DENSE, mtp_layers=2), "argument"))
    tokens = plain.global_batch * s
    depth = 4 * h * h + 3 * h * f + 2 * h + 2 * h * h + 3 * h
    assert flops.palm(two) - flops.palm(plain) == pytest.approx(
        tokens * 2 * (6 * depth + 12 * h * s), rel=1e-12)


def test_importers_read_the_depths():
    assert megatron_keys(["--mtp-num-layers", "1", "--bf16"], "train.sh")["mtp_layers"] == 1
    keys = nemo_keys({"model": {"mtp_num_layers": 2}}, "config.yaml")
    assert keys["mtp_layers"] == 2


@pytest.mark.parametrize("extra", [{"mtp_layers": 1, "vocab": 0}, {"mtp_layers": -1}])
def test_bad_depths_are_refused_naming_the_key(extra):
    assert_spec_refused(dict(DENSE, **extra), "mtp_layers")


def test_the_graph_size_guard_counts_the_depths():
    """A depth builds about what a layer does: a spec whose depths alone would make a graph
    past the limit is refused naming them, not built until memory runs out."""
    from flowsim.errors import ConfigError
    from flowsim.workload.generators.transformer_parse import parse_transformer

    spec = dict(layers=1, hidden=64, heads=4, sequence=128, vocab=256, dp=2, global_batch=1024)
    parse_transformer(dict(spec, mtp_layers=1), "spec.yml")
    with pytest.raises(ConfigError, match=r"spec\.yml: layers=1 and mtp_layers=1023 over 512 "
                                          r"micro-batches make a graph of about"):
        parse_transformer(dict(spec, mtp_layers=1023), "spec.yml")


def test_a_depth_s_own_collectives_are_megatron_core_s():
    """With TP and sequence parallelism a depth's own communication (beside its layer's and
    its output layer's), in closed form from n tokens of width h over TP t, 16-bit: the
    embedding's output reduce-scattered (n h 2); the projection's 2h-wide input gathered
    (2 n h 2 / t per NPU), its output gathered (n h 2 / t); backward, the output split's
    gradient gathered (n h 2 / t), the input gathered again for the weight gradient (2 n h 2
    / t), the input gradient reduce-scattered (2 n h 2), the embedding's gradient gathered
    (n h 2 / t)."""
    ops = _build(mtp_layers=1).programs[PP - 1].ops
    own = {op.name.removeprefix("mb0.mtp0."): (op.collective, op.size) for op in ops
           if op.kind == "collective" and op.name.startswith("mb0.mtp0.")
           and ".layer" not in op.name and ".logits" not in op.name}
    act = N * H * 2
    assert own == {
        "embedding.reduce_scatter": ("reduce_scatter", act),
        "projection.all_gather": ("all_gather", 2 * act // TP),
        "projection.output.all_gather": ("all_gather", act // TP),
        "projection.output.split.all_gather": ("all_gather", act // TP),
        "projection.dgrad.input.all_gather": ("all_gather", 2 * act // TP),
        "projection.dgrad.reduce_scatter": ("reduce_scatter", 2 * act),
        "embedding.all_gather": ("all_gather", act // TP)}
