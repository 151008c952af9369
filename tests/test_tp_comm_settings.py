"""Three settings of the tensor-parallel communication that NeMo's LoRA runs set
(``lora_a2a``, ``tp_comm_overlap_disable_qkv``, ``tp_comm_overlap_rs_dgrad``): the
collectives each one changes, in kind and size, what it does to the step, and the readers of
Megatron-LM's, NeMo 1's and Megatron-Bridge's configs."""

from __future__ import annotations

import copy
import warnings
from collections import Counter

import pytest

import flowsim
from flowsim.workload.generators import transformer

#: 8 NPUs of one node
NET = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
H, FFN, SEQ, RANK, TP = 512, 1024, 1024, 16, 4
#: a dense layer pair at TP 4 with sequence parallelism, two micro-batches per rank
DENSE = dict(layers=2, hidden=H, ffn=FFN, heads=8, kv_heads=2, sequence=SEQ, vocab=1024,
             micro_batch=1, tp=TP, dp=2, global_batch=4, gated_mlp=True, sp=True,
             tied_embeddings=False, distributed_optimizer=True)
LORA = dict(lora_rank=RANK, lora_targets=["linear_qkv", "linear_proj"])
UB = dict(tp_comm_overlap=True)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _ops(net, **extra) -> list:
    return transformer(net, **{**DENSE, **extra}).programs[0].ops


def _collectives(net, part: str, **extra) -> Counter:
    """(kind, bytes per NPU, pass) of the collectives whose name holds ``part``, in the
    first micro-batch's first layer."""
    return Counter((op.collective, op.size, op.pass_) for op in _ops(net, **extra)
                   if op.kind == "collective" and op.name.startswith("mb0.layer0.")
                   and part in op.name)


def _time(net, **extra) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        return float(flowsim.simulate(net, {"generator": "transformer", **DENSE, **extra},
                                      "nccl").time_ns)


@pytest.mark.parametrize("ub", [{}, UB])
def test_a2a_moves_the_projection_adapter_s_output_by_one_all_to_all(net, ub):
    """``lora_a2a`` (NeMo's ``all2all_hp2sp``): the projection adapter's ``B`` output, split
    by its width (``n x h / t``), reaches the sequence shard by one all-to-all, forward and
    backward, in place of the whole output's all-gather and the shard gradient's; a t-th of
    the bytes each way. The other exchanges are unchanged."""
    gathered = _collectives(net, "lora_out", **LORA, **ub)
    a2a = _collectives(net, "lora_out", **LORA, **ub, lora_a2a=True)
    shard = 2 * SEQ * H // TP   # B's output on a rank, 16 bits: the same bytes either way
    assert gathered == Counter({("all_gather", shard, "fwd"): 1, ("all_gather", shard, "ig"): 1})
    assert a2a == Counter({("all_to_all", shard, "fwd"): 1, ("all_to_all", shard, "ig"): 1})
    for part in ("lora_in", "lora_mid", "lora_input"):
        assert _collectives(net, part, **LORA, **ub, lora_a2a=True) == _collectives(
            net, part, **LORA, **ub)
    assert _time(net, **LORA, **ub, lora_a2a=True) < _time(net, **LORA, **ub)


def test_a2a_needs_sequence_parallelism(net):
    """Without sequence parallelism NeMo gathers the adapter's output whole
    (``gather_output``): ``lora_a2a`` changes nothing."""
    plain = dict(LORA, sp=False)
    assert _collectives(net, "lora", **plain, lora_a2a=True) == _collectives(net, "lora",
                                                                             **plain)


def test_disable_qkv_leaves_qkv_s_gather_to_nccl(net):
    """``tp_comm_overlap_disable_qkv`` (Megatron-Core turns QKV's ``ub_overlap_ag`` off):
    QKV's forward all-gather runs whole before its GEMM, not chunked beside it; FC1 keeps its
    ring exchange."""
    def rings(**extra):
        return {op.name.split(".")[-2] for op in _ops(net, **UB, **extra)
                if op.name.endswith(".last_chunk") and op.pass_ == "fwd"}
    assert rings() == {"qkv", "fc1"}
    assert rings(tp_comm_overlap_disable_qkv=True) == {"fc1"}
    assert _time(net, **UB, tp_comm_overlap_disable_qkv=True) > _time(net, **UB)


def test_an_adapted_qkv_left_to_nccl_gathers_its_norm_output_in_16_bits(net):
    """In FP8 training an adapter that reads the gathered norm output
    (``return_layernorm_output_gathered``: QKV's under ``tp_comm_overlap_disable_qkv``)
    has it gathered in 16 bits, then cast; an unadapted QKV left to NCCL gathers its FP8
    input."""
    fp8 = dict(UB, dtype="fp8", tp_comm_overlap_disable_qkv=True)
    shard = SEQ // TP * H
    assert _collectives(net, "attention.qkv.all_gather", **fp8) == Counter(
        {("all_gather", shard, "fwd"): 1})
    assert _collectives(net, "attention.qkv.all_gather", **fp8, **LORA) == Counter(
        {("all_gather", 2 * shard, "fwd"): 1})


@pytest.mark.parametrize("targets", [["linear_qkv"], ["linear_qkv", "linear_fc1"]])
def test_disable_qkv_spares_the_qkv_adapter_its_own_gather(net, targets):
    """Under userbuffers an adapter on a column-parallel layer gathers its input itself and
    reduce-scatters that input's gradient; with QKV's gather left to NCCL the QKV adapter
    reads the norm output Transformer Engine gathers (``return_layernorm_output_gathered``):
    neither collective, while an FC1 adapter keeps both."""
    lora = dict(lora_rank=RANK, lora_targets=targets, **UB)
    kinds = Counter({("all_gather", 2 * SEQ // TP * H, "fwd"): 1,
                     ("reduce_scatter", 2 * SEQ * H, "ig"): 1})
    fc1 = kinds if "linear_fc1" in targets else Counter()
    assert _collectives(net, "lora_input", **lora) == kinds + fc1
    assert _collectives(net, "lora_input", **lora, tp_comm_overlap_disable_qkv=True) == fc1


def _dgrad_scatters(net, layer: str, **extra) -> Counter:
    return _collectives(net, f"{layer}.reduce_scatter", **UB, **extra)


@pytest.mark.parametrize("tp", [2, TP])
@pytest.mark.parametrize("extra", [{}, LORA, dict(dtype="fp8")])
def test_rs_dgrad_pipelines_the_data_gradient_s_reduce_scatter(net, tp, extra):
    """``tp_comm_overlap_rs_dgrad``: FC1's and QKV's data gradients run in ``tp`` chunks of
    their output, each chunk's reduce-scatter beside the next chunk (16 bits also in FP8
    training: the data gradient's buffer; the whole buffer split ``t - 1`` to 1), instead of
    one reduce-scatter after the whole GEMM; QKV's stays bulk under
    ``tp_comm_overlap_disable_qkv``, as Megatron-Core sets it."""
    layout = dict(extra, tp=tp, dp=8 // tp)
    full = 2 * SEQ * H   # the data gradient, 16 bits, before the reduce-scatter
    bulk = Counter({("reduce_scatter", full, "ig"): 1})
    split = Counter([("reduce_scatter", full * (tp - 1) // tp, "ig"),
                     ("reduce_scatter", full // tp, "ig")])
    for layer in ("dgrad.fc1", "dgrad.qkv"):
        assert _dgrad_scatters(net, layer, **layout) == bulk
        assert _dgrad_scatters(net, layer, **layout, tp_comm_overlap_rs_dgrad=True) == split
    both = dict(tp_comm_overlap_rs_dgrad=True, tp_comm_overlap_disable_qkv=True)
    assert _dgrad_scatters(net, "dgrad.qkv", **layout, **both) == bulk
    assert _dgrad_scatters(net, "dgrad.fc1", **layout, **both) == split


def test_rs_dgrad_keeps_what_runs_beside_and_before_the_chunks(net):
    """Under ``tp_comm_overlap_rs_dgrad`` a trained FC1's weight gradient still waits for its
    input gathered again, and an FC1 adapter's data gradient runs before the chunked GEMM
    (Transformer Engine's backward takes both gradients of the norm output at once)."""
    ops = {op.name: op for op in _ops(net, **UB, tp_comm_overlap_rs_dgrad=True)}
    regather = ops["mb0.layer0.mlp.dgrad.fc1.input.all_gather"]
    assert ops["mb0.layer0.mlp.dgrad.fc1.wgrad"].deps == (regather.id,)
    # the compute stream runs its ops in order: the adapter's last, then the first chunk
    compute = [op.name for op in _ops(net, **UB, tp_comm_overlap_rs_dgrad=True,
                                      lora_rank=RANK, lora_targets=["linear_fc1"])
               if op.kind == "compute" and op.name.startswith("mb0.layer0.mlp.dgrad.fc1")]
    chunk = compute.index("mb0.layer0.mlp.dgrad.fc1.chunk")
    assert chunk > 0 and all(".adapter" in name for name in compute[:chunk])


def test_rs_dgrad_spares_a_shared_expert(net):
    """Megatron-Core pipelines the data-gradient reduce-scatter of its layer-norm
    column-parallel layers only: a shared expert's FC1 keeps its bulk one."""
    moe = dict(UB, experts=8, top_k=2, ep=2, moe_ffn=FFN, shared_ffn=FFN,
               tp_comm_overlap_rs_dgrad=True)
    full = 2 * SEQ * H
    assert _collectives(net, "shared_expert.dgrad.fc1.reduce_scatter", **moe) == Counter(
        {("reduce_scatter", full, "ig"): 1})


def test_rs_dgrad_hides_what_a_frozen_layer_cannot(net):
    """A frozen layer (LoRA) has no weight gradient for the bulk reduce-scatter to hide
    behind: pipelined with its data gradient instead, it hides behind all but the last
    chunk, and the step gets shorter (a Llama-2-70B-wide layer, whose reduce-scatters
    outlast their chunks' launch costs)."""
    wide = dict(UB, **LORA, hidden=8192, ffn=28672, heads=64, kv_heads=8, sequence=8192)
    assert _time(net, **wide, tp_comm_overlap_rs_dgrad=True) < _time(net, **wide)


def test_the_settings_are_read_from_every_tool():
    """Megatron-LM's ``--tp-comm-overlap-rs-dgrad`` (``tp_comm_overlap_disable_qkv`` has no
    flag there); NeMo 1's model config (Megatron-Core's fields, copied by name) and its
    ``peft.lora_tuning.a2a_experimental``; Megatron-Bridge's ``model`` block and ``peft``
    block. Off unless set."""
    from test_importers import ARGS, NEMO
    from test_megatron_bridge import PEFT, _run

    from flowsim.workload.generators.megatron import megatron_keys
    from flowsim.workload.generators.megatron_bridge import bridge_keys
    from flowsim.workload.generators.nemo import nemo_keys
    rs, qkv = "tp_comm_overlap_rs_dgrad", "tp_comm_overlap_disable_qkv"
    assert megatron_keys(ARGS + " --tp-comm-overlap-rs-dgrad", "run.sh")[rs] is True
    assert not megatron_keys(ARGS, "run.sh").get(rs)
    nemo = copy.deepcopy(NEMO)
    nemo["model"].update({rs: True, qkv: True, "peft": {
        "peft_scheme": "lora", "lora_tuning": {"adapter_dim": 16, "a2a_experimental": True}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        keys = nemo_keys(nemo, "run.yaml")
        assert (keys[rs], keys[qkv], keys["lora_a2a"]) == (True, True, True)
        nemo["model"]["peft"]["lora_tuning"].pop("a2a_experimental")
        assert nemo_keys(nemo, "run.yaml")["lora_a2a"] is False
        keys = nemo_keys(NEMO, "run.yaml")
        assert (keys[rs], keys[qkv], keys.get("lora_a2a", False)) == (False, False, False)
        run = _run(**{rs: True, qkv: True})
        run["peft"] = dict(PEFT, a2a_experimental=True)
        keys = bridge_keys(run, "<test>")
        assert (keys[rs], keys[qkv], keys["lora_a2a"]) == (True, True, True)
        run = _run()
        run["peft"] = PEFT
        keys = bridge_keys(run, "<test>")
        assert (keys[rs], keys[qkv], keys["lora_a2a"]) == (False, False, False)
        old = copy.deepcopy(NEMO)   # Megatron-Core core_v0.7's name (MLPerf v4.0's configs)
        old["model"]["tp_comm_disable_qkv"] = True
        assert nemo_keys(old, "run.yaml")[qkv] is True
        old["model"]["tp_comm_disable_qkv"] = "${oc.env:MC_TP_DISABLE_QKV,True}"
        assert nemo_keys(old, "run.yaml")[qkv] is False   # an interpolation: the default
    nemo["model"]["peft"]["lora_tuning"]["a2a_experimental"] = "yes"
    with pytest.raises(flowsim.ConfigError, match=r"model\.peft\.lora_tuning\.a2a_experimental"):
        nemo_keys(nemo, "run.yaml")


@pytest.mark.parametrize("key", ["lora_a2a", "tp_comm_overlap_disable_qkv",
                                 "tp_comm_overlap_rs_dgrad"])
def test_a_setting_that_is_not_a_switch_is_refused(net, key):
    with pytest.raises(flowsim.ConfigError, match=key):
        transformer(net, **DENSE, **{key: "sometimes"})


def test_a2a_without_adapters_is_refused(net):
    with pytest.raises(flowsim.ConfigError, match="lora_a2a.*lora_rank"):
        transformer(net, **DENSE, lora_a2a=True)


def test_the_training_workloads_page_s_command_prints_what_it_says():
    """The Training workloads page's command with the three settings prints the time it
    quotes, and the same command without them the time it compares it with."""
    import json
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    page = (REPO / "docs" / "guide" / "workloads.md").read_text()
    start = page.index("Three switches of the tensor-parallel communication")
    begin = page.index("flowsim run", start)
    args = shlex.split(page[begin:page.index("```", begin)].replace("\\\n", " "))[2:]
    said = re.search(r"prints ([\d.]+) s; without the last three settings, ([\d.]+) s",
                     page[start:])
    keys = ("lora_a2a", "tp_comm_overlap_disable_qkv", "tp_comm_overlap_rs_dgrad")
    pairs = [args[i:i + 2] for i in range(0, len(args), 2)]   # --workload x, --set k=v, ...
    assert sum(any(f"workload.{k}=true" == p[1] for k in keys) for p in pairs) == 3
    without = [p for p in pairs if not any(p[1].startswith(f"workload.{k}=") for k in keys)]
    times = []
    for variant in (pairs, without):
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json",
                              *sum(variant, [])],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
        times.append(json.loads(out)["time_ns"] / 1e9)
    assert [f"{t:.3f}" for t in times] == [said.group(1), said.group(2)]
