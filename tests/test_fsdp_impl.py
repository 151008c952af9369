"""What each implementation of fully sharded data parallelism runs around its collectives
(``fsdp_impl``, :mod:`flowsim.workload.generators.transformer_fsdp`): PyTorch FSDP2's copies
out of the all-gather's buffer and into the reduction's, FSDP1's cast and pre-divide of each
unit's gradient, nothing for Megatron-FSDP."""

from __future__ import annotations

import pytest

import flowsim
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.generators.llmfoundry import _sharding

#: one node of 8 GPUs, FSDP over all of them
NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
H, FFN, DP, LAYERS = 512, 2048, 8, 4
SMALL = dict(layers=LAYERS, hidden=H, ffn=FFN, heads=8, sequence=256, micro_batch=2, vocab=0,
             dp=DP, global_batch=2 * DP * 3, fsdp=True)
#: one layer's weights: QKV and projection (4 h^2), FC1 and FC2 (2 h ffn), two norms
LAYER_PARAMS = 4 * H * H + 2 * H * FFN + 2 * H


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def flag(block, key, where, default):
    """The reader's boolean lookup, plain (the tests give booleans)."""
    return block.get(key, default)


def _prepare_ops(program, impl="fsdp1"):
    return [op for op in program.ops if op.name.endswith(f"{impl}_prepare")]


@pytest.mark.parametrize("bf16_reduce, per_param", [(False, 2 + 4 + 2 * 4), (True, 2 * 2)])
def test_each_units_gradient_is_prepared_once_per_micro_batch_before_its_reduction(
        node, bf16_reduce, per_param):
    """Per layer and micro-batch one op before the reduce-scatter: the cast (16-bit read,
    32-bit written) and the in-place pre-divide of the reduction's type; with a 16-bit
    reduction (Composer's PURE) only the pre-divide, on 16-bit elements."""
    (program,) = transformer(node, **SMALL, fsdp_impl="fsdp1",
                             grad_reduce_in_bf16=bf16_reduce).programs
    prepared = _prepare_ops(program)
    assert len(prepared) == LAYERS * 3
    assert {op.mem_bytes for op in prepared} == {per_param * LAYER_PARAMS}
    kinds = {k.name for op in prepared for k in op.kernels}
    assert kinds == ({"fsdp1_grad_predivide"} if bf16_reduce else
                     {"fsdp1_grad_cast", "fsdp1_grad_predivide"})
    by_id = {op.id: op for op in program.ops}
    for op in program.ops:   # every gradient reduce-scatter waits for its unit's preparation
        if op.kind == "collective" and op.collective == "reduce_scatter":
            (dep,) = op.deps
            assert by_id[dep].name.endswith("fsdp1_prepare") and by_id[dep].layer == op.layer


def test_megatron_fsdp_copies_nothing_and_fsdp1_costs_the_bytes_it_moves(node):
    """Megatron-FSDP runs no op around its collectives. FSDP1's ops add their memory
    traffic to the step: priced at the device's memory rate, the compute time grows by
    what they move, one op per layer and micro-batch."""
    spec = dict(generator="transformer", **SMALL, device="h100")
    megatron = flowsim.run_training(node, dict(spec, fsdp_impl="megatron"), "nccl").record
    fsdp1 = flowsim.run_training(node, dict(spec, fsdp_impl="fsdp1"), "nccl").record
    (program,) = transformer(node, **SMALL, fsdp_impl="megatron").programs
    assert not [op for op in program.ops if op.kind == "compute" and "fsdp" in op.name]
    moved = LAYERS * 3 * (2 + 4 + 8) * LAYER_PARAMS
    device = flowsim.compute.device("h100")
    rate = device.memory_gbps * device.memory_efficiency * device.sustained   # bytes per ns
    extra = float(fsdp1.npu_compute_ns.max() - megatron.npu_compute_ns.max())
    launches = LAYERS * 3 * 2 * device.launch_us * 1e3 / device.sustained
    assert extra == pytest.approx(moved / rate + launches, rel=0.02)
    # on a 100x faster network the step grows, by at most that (the ops may fill time the
    # compute stream spent waiting for a gather)
    fast = flowsim.load_network(dict(NODE, bandwidth=[30_000]))
    fast_megatron = flowsim.run_training(fast, dict(spec, fsdp_impl="megatron"), "nccl").record
    fast1 = flowsim.run_training(fast, dict(spec, fsdp_impl="fsdp1"), "nccl").record
    assert 0 < float(fast1.time_ns - fast_megatron.time_ns) <= extra * (1 + 1e-9)


@pytest.mark.parametrize("fp8_gather", [False, True])
def test_fsdp2_copies_each_gather_out_and_each_gradient_in(node, fp8_gather):
    """FSDP2 (the default): after every all-gather, before the unit's compute, the gathered
    parameters copied out of the all-gather's buffer (read and written, in the gathered
    type: one byte per weight with FP8 gathers, the norms in two); before every reduction
    the gradient copied into the reduction's buffer (16 bits read, 32 written)."""
    keys = dict(SMALL, dtype="fp8", fp8_param_gather=True) if fp8_gather else SMALL
    (program,) = transformer(node, **keys).programs
    by_id = {op.id: op for op in program.ops}
    out = [op for op in program.ops if op.name.endswith("fsdp2_copy_out")]
    gathers = [op for op in program.ops if op.kind == "collective" and
               op.collective == "all_gather"]
    assert len(out) == len(gathers) == LAYERS * 3 * 2
    for op in out:   # each waits for its gather and moves its whole buffer twice
        (dep,) = op.deps
        assert by_id[dep].collective == "all_gather" and by_id[dep].layer == op.layer
        assert op.mem_bytes == pytest.approx(2 * DP * by_id[dep].size, abs=2 * DP)
    if not fp8_gather:
        assert {op.mem_bytes for op in out} == {2 * 2 * LAYER_PARAMS}
    else:   # the weights in one byte: half
        assert 0.5 <= min(op.mem_bytes for op in out) / (2 * 2 * LAYER_PARAMS) < 0.51
    copied_in = _prepare_ops(program, "fsdp2")
    assert len(copied_in) == LAYERS * 3
    assert {op.mem_bytes for op in copied_in} == {(2 + 4) * LAYER_PARAMS}
    assert {k.name for op in copied_in for k in op.kernels} == {"fsdp2_copy_in"}


def test_bad_implementations_are_one_line_naming_the_key(node):
    with pytest.raises(ConfigError, match="fsdp_impl.*fsdp2 \\(unset\\) without fsdp"):
        transformer(node, **dict(SMALL, fsdp=False), fsdp_impl="fsdp1")
    with pytest.raises(ConfigError, match="fsdp_impl.*fsdp2, fsdp1, megatron"):
        transformer(node, **SMALL, fsdp_impl="deepspeed")
    with pytest.raises(ConfigError, match="fsdp_outer.*unless fsdp_impl is megatron"):
        transformer(node, **SMALL, fsdp_shard=4, fsdp_outer="optim")


def test_llm_foundry_configs_are_read_as_fsdp1(tmp_path):
    """Composer wraps LLM Foundry's model in PyTorch's FSDP1: a sharded config sets fsdp1,
    one without ``fsdp_config`` (DDP) does not."""
    sharded = _sharding({"fsdp_config": {"sharding_strategy": "FULL_SHARD"}}, "c.yaml", flag,
                        frozenset())
    assert sharded["fsdp"] and sharded["fsdp_impl"] == "fsdp1"
    assert "fsdp_impl" not in _sharding({}, "c.yaml", flag, frozenset())


def test_a_sharding_group_of_one_casts_but_does_not_divide(node):
    """Hybrid sharding over groups of one rank (every rank a replica): FSDP1's pre-divide
    factor over one rank is 1, so only the cast runs; the replicas still all-reduce."""
    (program,) = transformer(node, **SMALL, fsdp_shard=1, fsdp_impl="fsdp1").programs
    prepared = _prepare_ops(program)
    assert len(prepared) == LAYERS * 3
    assert {k.name for op in prepared for k in op.kernels} == {"fsdp1_grad_cast"}
    assert {op.mem_bytes for op in prepared} == {(2 + 4) * LAYER_PARAMS}


@pytest.mark.parametrize("tied, units", [(True, 1), (False, 2)])
def test_the_embedding_and_output_layer_are_prepared_like_any_unit(node, tied, units):
    """The vocabulary's units (one tied weight, or the embedding and the output layer) are
    units too: each gradient prepared once per micro-batch, 14 bytes per parameter."""
    vocab = 1024
    (program,) = transformer(node, **dict(SMALL, vocab=vocab), tied_embeddings=tied,
                             fsdp_impl="fsdp1").programs
    prepared = _prepare_ops(program)
    vocab_ops = [op for op in prepared if op.mem_bytes != 14 * LAYER_PARAMS]
    assert len(prepared) == (LAYERS + units) * 3
    assert {op.mem_bytes for op in vocab_ops} == {14 * vocab * H} and \
        len(vocab_ops) == units * 3


def test_a_mixture_of_experts_unit_prepares_its_local_experts_too(node):
    """With experts (EP 4 of the 8 ranks: 2 of 8 experts per rank) the unit's gradient is
    its dense weights (attention, norms, router) and its local experts' three matrices."""
    experts, ep, moe_ffn = 8, 4, 1024
    (program,) = transformer(node, **SMALL, experts=experts, top_k=2, ep=ep, moe_ffn=moe_ffn,
                             gated_mlp=True, fsdp_impl="fsdp1").programs
    dense = 4 * H * H + 2 * H + H * experts
    local = experts // ep * 3 * H * moe_ffn
    assert {op.mem_bytes for op in _prepare_ops(program)} == {14 * (dense + local)}


@pytest.mark.parametrize("strategy, fsdp1", [("FULL_SHARD", True), ("HYBRID_SHARD", True),
                                             ("SHARD_GRAD_OP", False)])
def test_the_reader_sets_fsdp1_for_the_strategies_that_shard_parameters(strategy, fsdp1):
    """FULL_SHARD and HYBRID_SHARD are read as ``fsdp`` with ``fsdp1``; SHARD_GRAD_OP is read
    as a distributed optimizer, which has no FSDP1 preparation in flowsim."""
    keys = _sharding({"fsdp_config": {"sharding_strategy": strategy}}, "c.yaml", flag,
                     frozenset({"fsdp_shard"}))
    assert (keys.get("fsdp_impl") == "fsdp1") is fsdp1 and keys["fsdp"] is fsdp1


@pytest.mark.parametrize("bf16_reduce, per_step", [
    (False, [(2 + 4), (4 + 2 + 4), (4 + 2 + 4) + (4 + 4)]),   # an FP32 accumulator
    (True, [None, 3 * 2, 3 * 2 + (2 + 2)])])                  # autograd's 16-bit one
def test_fsdp2_accumulates_deferred_gradients_on_the_compute_stream(node, bf16_reduce,
                                                                     per_step):
    """``fsdp_defer_grad_sync`` over 3 micro-batches: reducing in FP32, FSDP2 casts the first
    gradient into an FP32 accumulator and adds each later one to it, and the reduction's
    copy-in reads the accumulator; reducing in 16 bits, autograd adds each later gradient
    to the first. Per layer, bytes per parameter of each micro-batch's op (None: no op)."""
    (program,) = transformer(node, **SMALL, fsdp_defer_grad_sync=True,
                             grad_reduce_in_bf16=bf16_reduce).programs
    for layer in range(LAYERS):
        ops = {op.name.split(".")[0]: op for op in program.ops
               if op.layer == layer and op.kind == "compute" and
               op.name.endswith(("fsdp2_accumulate", "fsdp2_prepare"))}
        got = [ops[f"mb{m}"].mem_bytes / LAYER_PARAMS if f"mb{m}" in ops else None
               for m in range(3)]
        assert got == per_step, layer


def test_megatron_fsdp_accumulates_inside_its_gemms(node):
    """Megatron-FSDP accumulates into its own buffer in the weight-gradient GEMM: no op."""
    (program,) = transformer(node, **SMALL, fsdp_defer_grad_sync=True,
                             fsdp_impl="megatron").programs
    assert not [op for op in program.ops if op.kind == "compute" and "fsdp" in op.name]


def test_megatron_bridge_and_megatron_lm_read_megatron_fsdp_as_megatron():
    """Megatron-Bridge's ``ddp.use_megatron_fsdp`` and Megatron-LM's ``--use-megatron-fsdp``
    are Megatron-FSDP; the bridge without it sets nothing."""
    from flowsim.workload.generators.megatron_fsdp import bridge_fsdp_keys, flag_fsdp_keys

    bridge = bridge_fsdp_keys({"use_megatron_fsdp": True,
                               "data_parallel_sharding_strategy": "optim_grads_params"}, "c")
    assert bridge["fsdp"] and bridge["fsdp_impl"] == "megatron"
    assert bridge_fsdp_keys({}, "c") == {}
    flags = flag_fsdp_keys({"use-megatron-fsdp": None}, "args")
    assert flags["fsdp"] and flags["fsdp_impl"] == "megatron"
