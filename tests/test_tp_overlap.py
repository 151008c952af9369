"""Tensor-parallel communication overlap as Transformer Engine's userbuffers run it
(``tp_comm_overlap``): the collectives of a layer's linear layers split and pipelined with
their GEMMs (TransformerEngine v1.11 ``comm_gemm_overlap.h``); checked on the generated ops,
by conservation of work, and by simulation against the bounds the pipelines imply."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import flowsim
from flowsim import simulate
from flowsim.compute.gemm import gemm_ns
from flowsim.workload.generators import transformer
from flowsim.workload.generators.transformer_overlap import RS_SPLITS, UB_SETTINGS
from flowsim.workload.graph import topological_order
from flowsim.workload.kernels import Gemm

TP = 4
#: NeMo's SMs beside the pipelined GEMMs (the default settings)
RS_SMS = UB_SETTINGS["nemo"].rs_sms
#: one node of 8 GPUs on a switch, then 2 nodes
NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
LAYER = dict(layers=2, hidden=1024, heads=8, sequence=512, micro_batch=1, vocab=0,
             ffn=2048, gated_mlp=False, tp=TP, dp=4, global_batch=4, sp=True)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _program(net, **kw):
    return transformer(net, **dict(LAYER, **kw)).programs[0]


def _layer_collectives(program):
    tp_dims = next(op.dims for op in program.ops if op.name.endswith("all_gather"))
    return [op for op in program.ops if op.kind == "collective" and op.dims == tp_dims]


@pytest.mark.parametrize("dtype, narrow", [("bf16", 2), ("fp8", 1)])
def test_collectives_of_a_layer(net, dtype, narrow):
    """Per layer and micro-batch, forward: the two all-gathers (FP8 in FP8 training) and two
    reduce-scatters in RS_SPLITS pipelined pieces (FP8 too: ``fp8_buf``); backward: the two
    gradient all-gathers, the two inputs gathered again for the weight gradients, and the
    two data gradients reduce-scattered in 16 bits."""
    program = _program(net, tp_comm_overlap=True, dtype=dtype)
    act = 512 * 1024 * 2
    shard = act // TP * narrow // 2
    rs = act * narrow // 2
    count = Counter((op.collective, op.pass_, op.size) for op in _layer_collectives(program))
    per = 2 * 2     # layers x blocks (attention, MLP)
    assert count == {("all_gather", "fwd", shard): per,
                     ("reduce_scatter", "fwd", rs * (RS_SPLITS - 1) // RS_SPLITS): per,
                     ("reduce_scatter", "fwd", rs // RS_SPLITS): per,
                     ("all_gather", "ig", shard): 2 * per,
                     ("reduce_scatter", "ig", act): per}


def test_the_work_is_the_same_split_into_chunks(net):
    """Overlap splits GEMMs, never adds or drops work: the same GEMM FLOPs as without it;
    a ring-exchange GEMM as its last chunk of tokens and the chunks before it, a pipelined
    one as its first chunk of output features and the chunks after it, on the SMs the
    reduce-scatter kernel leaves."""
    on, off = _program(net, tp_comm_overlap=True), _program(net)

    def gemms(program):
        return [k for op in program.ops if op.kind == "compute" for k in op.kernels
                if isinstance(k, Gemm)]
    assert sum(g.flops for g in gemms(on)) == pytest.approx(sum(g.flops for g in gemms(off)),
                                                            rel=1e-12)
    # the GEMMs fed by an all-gather (forward QKV and FC1, the projection's and FC2's data
    # gradients) are those reading the hidden size
    n = 512
    assert {g.m for g in gemms(on) if g.k == 1024} == {n // TP, n - n // TP}
    assert {g.m for g in gemms(off) if g.k == 1024} == {n}
    margins = {(g.n, g.sm_margin) for g in gemms(on) if g.sm_margin}
    h = 1024
    assert margins == {(h // RS_SPLITS, RS_SMS["projection"]),
                       (h - h // RS_SPLITS, RS_SMS["projection"]),
                       (h // RS_SPLITS, RS_SMS["fc2"]), (h - h // RS_SPLITS, RS_SMS["fc2"])}


def test_pipelines_wait_for_what_they_need(net):
    """The last token chunk waits for the all-gather and the others do not; the last
    reduce-scatter piece waits for the last GEMM chunks and the earlier pieces; a weight
    gradient waits for its input gathered again."""
    program = _program(net, tp_comm_overlap=True)
    assert len(topological_order(program)) == len(program.ops)
    by_id = {op.id: op for op in program.ops}
    for op in program.ops:
        deps = {by_id[d].name for d in op.deps}
        if op.name.endswith(".last_chunk"):
            assert deps == {op.name.replace("last_chunk", "all_gather")}
        if op.name.endswith(".chunks"):
            assert not any(d.endswith("all_gather") for d in deps)
        if op.name.endswith("reduce_scatter_last"):
            assert {d.rsplit(".", 1)[1] for d in deps} == {"chunks", "reduce_scatter"}
        if op.name.endswith((".qkv.wgrad", ".fc1.wgrad")):
            assert deps == {op.name.replace("wgrad", "input.all_gather")}
        if op.name.endswith((".qkv.reduce_scatter", ".fc1.reduce_scatter")):
            # the data gradient, then TE waits for the bulk all-gather before launching it
            assert deps == {op.name.rsplit(".", 1)[0],
                            op.name.replace("reduce_scatter", "input.all_gather")}


def test_without_overlap_the_input_is_gathered_again_beside_the_data_gradient(net):
    """Megatron-LM with sequence parallelism: each column-parallel layer's input gathered
    again when its backward starts (after the row-parallel layer's data gradient and what
    follows it), beside its data gradient; its weight gradient and the data gradient's
    reduce-scatter wait for it."""
    program = _program(net)
    by_id = {op.id: op for op in program.ops}
    regathers = [op for op in program.ops if op.name.endswith("input.all_gather")]
    assert len(regathers) == 2 * 2                      # layers x blocks, one micro-batch
    tails = {".mlp.": "fc1", ".attention.": "qkv"}
    for op in regathers:
        (dep,) = op.deps
        assert by_id[dep].kind == "compute" and by_id[dep].name.endswith(".dgrad")
    for op in program.ops:
        deps = {by_id[d].name for d in op.deps}
        if op.pass_ == "wg" and ".layer" in op.name:
            tail = next(t for part, t in tails.items() if part in op.name)
            assert deps == {op.name.replace("wgrad", f"dgrad.{tail}.input.all_gather")}
        if op.pass_ == "ig" and op.name.endswith("reduce_scatter"):
            assert deps == {op.name.rsplit(".", 1)[0],
                            op.name.replace("reduce_scatter", "input.all_gather")}


def test_a_gemm_beside_a_communication_kernel_runs_on_the_other_sms():
    """``sm_margin`` SMs held: the tiles run in waves over the rest, at the same rate per
    SM; a compute-bound GEMM of many waves slows by about sms / (sms - margin)."""
    dev = flowsim.compute.device("h100")
    big = Gemm(16384, 16384, 8192)
    launch = dev.launch_us * 1e3
    alone, beside = gemm_ns(dev, big), gemm_ns(dev, dataclasses.replace(big, sm_margin=24))
    assert (beside - launch) / (alone - launch) == pytest.approx(132 / 108, rel=0.03)
    assert gemm_ns(dev, dataclasses.replace(big, sm_margin=0)) == alone
    assert gemm_ns(dev, dataclasses.replace(big, sm_margin=1000)) > beside   # one SM left


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_overlap_hides_the_network_where_it_matches_the_gemms_and_costs_sms_alone(model):
    """Where the TP collectives take about as long as the GEMMs, overlap saves time; on a
    network too fast to matter it only costs the GEMM chunks and the SMs the reduce-scatter
    holds: the iteration is then its kernels in a row, longer than without overlap."""
    shape = dict(LAYER, hidden=4096, heads=32, sequence=2048, ffn=8192, dp=1, global_batch=1)

    def run(bandwidth, overlap):
        net = {"topology": ["Switch"], "npus_count": [TP], "bandwidth": [bandwidth],
               "latency": [0]}
        w = transformer(flowsim.load_network(net), **shape, tp_comm_overlap=overlap,
                        device="h100")
        ds = simulate(net, w, {"endpoint-delay": 0, "preferred-dataset-splits": 1},
                      model=model)
        return float(ds.time_ns), float(ds.compute_ns.max())
    (on, busy_on), (off, busy_off) = run(100, True), run(100, False)
    assert busy_on < on < off     # the overlap hid some of the collectives, not all
    (fast_on, fast_busy_on), (fast_off, fast_busy_off) = run(1e6, True), run(1e6, False)
    assert (fast_busy_on, fast_busy_off) == (busy_on, busy_off)
    assert fast_busy_on > fast_busy_off
    assert fast_on == pytest.approx(fast_busy_on, rel=1e-4)
    assert fast_off == pytest.approx(fast_busy_off, rel=1e-4)


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("cp_comm_type, reduced", [("all_gather", "kv.reduce_scatter"),
                                                   ("p2p", "kv_grad.ring1")])
def test_context_parallel_layers_overlap_too(net, model, cp_comm_type, reduced):
    """With context parallelism the QKV data gradient waits for the keys' and values'
    gradients reduced over the CP group (or brought home around the ring), and its input is
    gathered again beside it; the run simulates under both models and takes longer than its
    kernels alone."""
    spec = dict(LAYER, tp=TP, cp=2, dp=2, global_batch=2, sequence=1024,
                tp_comm_overlap=True, device="h100", cp_comm_type=cp_comm_type)
    w = transformer(net, **spec)
    program = w.programs[0]
    by_id = {op.id: op for op in program.ops}
    tails = [op for op in program.ops if op.name.endswith("attention.dgrad.qkv")]
    assert tails
    for op in tails:
        assert any(by_id[d].name.endswith(reduced) for d in op.deps)
    ds = simulate(NET, w, "nccl", model=model)
    assert float(ds.time_ns) > float(ds.compute_ns.max()) > 0


def test_transformer_engine_s_defaults_hold_no_sms_and_reduce_scatter_16_bit(net):
    """``tp_comm_overlap_cfg: te_default`` (Megatron-LM without a userbuffers config): the
    pipelined GEMMs run on every SM and, in FP8, the pipelined reduce-scatters stay 16-bit;
    the same ops and all-gathers as NeMo's settings otherwise."""
    nemo = _program(net, tp_comm_overlap=True, dtype="fp8")
    te = _program(net, tp_comm_overlap=True, dtype="fp8", tp_comm_overlap_cfg="te_default")
    assert [op.name for op in te.ops] == [op.name for op in nemo.ops]
    assert not any(k.sm_margin for op in te.ops if op.kind == "compute" for k in op.kernels
                   if isinstance(k, Gemm))
    act = 512 * 1024 * 2
    pieces = {op.size for op in _layer_collectives(te)
              if op.collective == "reduce_scatter" and op.pass_ == "fwd"}
    assert pieces == {act * (RS_SPLITS - 1) // RS_SPLITS, act // RS_SPLITS}
    gathers = {(op.name, op.size) for op in _layer_collectives(te) if op.collective == "all_gather"}
    assert gathers == {(op.name, op.size) for op in _layer_collectives(nemo)
                       if op.collective == "all_gather"}


def test_no_sm_margin_runs_the_pipelined_gemms_faster(net):
    """With every SM the projection's and FC2's forward chunks take less time, so a
    compute-bound BF16 layer's iteration is shorter under Transformer Engine's defaults."""
    spec = dict(LAYER, generator="transformer", tp_comm_overlap=True, device="h100",
                hidden=4096, ffn=16384, heads=32)
    nemo = simulate(NET, spec, "nccl")
    te = simulate(NET, dict(spec, tp_comm_overlap_cfg="te_default"), "nccl")
    assert float(te.compute_ns.max()) < float(nemo.compute_ns.max())
    assert float(te.time_ns) < float(nemo.time_ns)


def test_an_unknown_userbuffers_setting_names_the_key(tmp_path):
    spec = tmp_path / "spec.yml"
    spec.write_text("generator: transformer\nlayers: 2\nhidden: 1024\nheads: 8\nsequence: 512\n"
                    "tp: 4\ndp: 4\nglobal_batch: 4\ntp_comm_overlap: true\n"
                    "tp_comm_overlap_cfg: megatron\n")
    with pytest.raises(flowsim.ConfigError, match=r"spec\.yml.*key 'tp_comm_overlap_cfg': "
                                                   r"expected one of nemo, te_default, found "
                                                   r"'megatron'"):
        simulate(NET, str(spec), "nccl")
