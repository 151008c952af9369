"""Workload generators: closed-form op counts and bytes, pipeline schedules, send/recv pairing,
the mapping onto network dims, the DLRM case-study sizes, the roofline, and bad specs."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import yaml

import flowsim
from flowsim import simulate
from flowsim.errors import ConfigError
from flowsim.workload.generators import (
    build_generator,
    dlrm,
    parse_transformer,
    pipeline_schedule,
    transformer,
)
from flowsim.workload.generators.transformer import parallel_dims
from flowsim.workload.graph import topological_order
from flowsim.workload.roofline import Roofline, parse_roofline

#: tp 2 (dim 0), dp 2 (dim 1), pp 2 (dim 2) by the default mapping
CUBE = {"topology": ["Ring", "Switch", "Switch"], "npus_count": [2, 2, 2],
        "bandwidth": [100, 50, 25], "latency": [500, 500, 500]}
#: tp 4, dp 2, pp 4
WIDE = {"topology": ["Ring", "Switch", "Switch"], "npus_count": [4, 2, 4],
        "bandwidth": [100, 50, 25], "latency": [500, 500, 500]}
SMALL = dict(layers=8, hidden=256, sequence=128, micro_batch=2, micro_batches=6)


@pytest.fixture(scope="module")
def cube():
    return flowsim.load_network(CUBE)


@pytest.fixture(scope="module")
def wide():
    return flowsim.load_network(WIDE)


def _ops(program, kind, collective=None):
    return [op for op in program.ops
            if op.kind == kind and (collective is None or op.collective == collective)]


def _check_graph(workload):
    """Every program is a DAG whose compute ops form one chain in list order."""
    for program in workload.programs:
        assert len(topological_order(program)) == len(program.ops)
        computes = _ops(program, "compute")
        assert computes[0].ctrl_deps == ()
        for prev, op in zip(computes, computes[1:]):
            assert op.ctrl_deps == (prev.id,)
        for op in program.ops:
            assert isinstance(op.size, int)
            assert 0 <= op.layer < len(workload.layers)
            assert op.pass_ in ("fwd", "ig", "wg")


# ------------------------------------------------------------------ transformer: closed forms
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_tensor_parallel_all_reduce_bytes(wide, schedule):
    b, s, h, m = 2, 128, 256, 6
    w = transformer(wide, **SMALL, tp=4, dp=2, pp=4, schedule=schedule)
    assert len(w.programs) == 4 and w.layers == [f"layer{i}" for i in range(8)]
    per_stage = 8 // 4
    for program in w.programs:
        tp_ops = [op for op in _ops(program, "collective", "all_reduce") if op.dims == (0,)]
        assert len(tp_ops) == 4 * per_stage * m
        assert sum(op.size for op in tp_ops) == 4 * per_stage * m * b * s * h * 2
        assert sum(op.pass_ == "fwd" for op in tp_ops) == 2 * per_stage * m
    _check_graph(w)


def test_sequence_parallel_uses_reduce_scatter_and_all_gather(wide):
    b, s, h, m, t = 2, 128, 256, 6, 4
    w = transformer(wide, **SMALL, tp=t, dp=2, pp=4, sp=True)
    for program in w.programs:
        rs = _ops(program, "collective", "reduce_scatter")
        ag = _ops(program, "collective", "all_gather")
        assert all(op.dims == (0,) for op in rs + ag)
        assert len(rs) == len(ag) == 4 * 2 * m
        assert {op.size for op in rs} == {b * s * h * 2}
        assert {op.size for op in ag} == {b * s * h * 2 // t}     # each NPU's input
        # the only all-reduces left are the data-parallel gradients (dim 1)
        assert {op.dims for op in _ops(program, "collective", "all_reduce")} == {(1,)}
        # sequence-sharded activations between stages
        assert {op.size for op in _ops(program, "send") + _ops(program, "recv")} <= \
            {b * s * h * 2 // t}
    _check_graph(w)


def test_compute_flops_by_formula(wide):
    b, s, h, m, t = 2, 128, 256, 6, 4
    rl = Roofline(100e12, 1e12, 0.5)
    w = transformer(wide, **SMALL, tp=t, dp=2, pp=4, roofline=rl)
    forward = (24 * b * s * h * h + 4 * b * s * s * h) / t     # per layer, micro-batch, NPU
    for program in w.programs:
        computes = _ops(program, "compute")
        assert len(computes) == 2 * 3 * 2 * m                   # blocks x passes x layers
        for pass_ in ("fwd", "ig", "wg"):
            total = sum(op.flops for op in computes if op.pass_ == pass_)
            assert total == pytest.approx(2 * m * forward)
        for op in computes:
            assert op.duration_ns == pytest.approx(rl.time_ns(op.flops, op.mem_bytes))
            assert op.mem_bytes > 0


@pytest.mark.parametrize("zero", [False, True])
def test_data_parallel_gradients_after_the_last_weight_gradient(wide, zero):
    h, t, dp = 256, 4, 2
    w = transformer(wide, **SMALL, tp=t, dp=dp, pp=4, zero=zero)
    layer_bytes = 12 * h * h * 2 // t
    for program in w.programs:
        dp_ops = [op for op in _ops(program, "collective") if op.dims == (1,)]
        dp_ids = {op.id for op in dp_ops}
        waited = {d for op in program.ops if op.id not in dp_ids for d in op.deps}
        assert not waited & dp_ids          # only the next iteration would wait for them
        if zero:
            rs = [op for op in dp_ops if op.collective == "reduce_scatter"]
            ag = [op for op in dp_ops if op.collective == "all_gather"]
            assert len(rs) == len(ag) == 2 and {op.size for op in rs} == {layer_bytes}
            assert {op.size for op in ag} == {-(-layer_bytes // dp)}
            assert all(a.deps == (r.id,) for r, a in zip(rs, ag))
        else:
            assert [op.collective for op in dp_ops] == ["all_reduce"] * 2
            assert sum(op.size for op in dp_ops) == 2 * layer_bytes
        by_id = {op.id: op for op in program.ops}
        last_wg = {}
        for op in _ops(program, "compute"):
            if op.pass_ == "wg":
                last_wg[op.layer] = op.id
        for op in dp_ops:
            if op.collective != "all_gather":
                (dep,) = op.deps
                assert by_id[dep].pass_ == "wg" and dep == last_wg[op.layer]


def test_logits_layer_on_the_last_stage(cube):
    w = transformer(cube, layers=2, hidden=64, sequence=32, micro_batch=1, micro_batches=2,
                    tp=2, dp=2, pp=2, vocab=1000)
    assert w.layers == ["layer0", "layer1", "logits"]
    first, last = w.programs
    assert all(op.layer != 2 for op in first.ops)
    fwd = [op for op in _ops(last, "compute") if op.layer == 2 and op.pass_ == "fwd"]
    assert [op.flops for op in fwd] == [2 * 32 * 64 * 1000 / 2] * 2
    grads = [op for op in _ops(last, "collective", "all_reduce") if op.dims == (1,)]
    assert sorted(op.size for op in grads) == [12 * 64 * 64, 500 * 64 * 2]
    _check_graph(w)


# ------------------------------------------------------------------ pipeline schedules
def test_one_f_one_b_order():
    order = pipeline_schedule("1f1b", 4, 0, 8)
    assert order[:3] == [("fwd", 0), ("fwd", 1), ("fwd", 2)]        # pp - 1 warm-up
    assert order[3:7] == [("fwd", 3), ("bwd", 0), ("fwd", 4), ("bwd", 1)]
    assert order[-3:] == [("bwd", 5), ("bwd", 6), ("bwd", 7)]
    assert pipeline_schedule("1f1b", 4, 3, 3) == [("fwd", 0), ("bwd", 0), ("fwd", 1),
                                                  ("bwd", 1), ("fwd", 2), ("bwd", 2)]
    # fewer micro-batches than stages: the warm-up is cut short
    assert pipeline_schedule("1f1b", 4, 0, 2) == [("fwd", 0), ("fwd", 1), ("bwd", 0),
                                                  ("bwd", 1)]
    for stage in range(4):
        order = pipeline_schedule("1f1b", 4, stage, 8)
        assert sorted(order) == sorted([(p, m) for p in ("fwd", "bwd") for m in range(8)])
        warmup = next(i for i, (p, _) in enumerate(order) if p == "bwd") - 1
        assert warmup == 4 - stage - 1
    assert pipeline_schedule("gpipe", 4, 1, 3) == [("fwd", 0), ("fwd", 1), ("fwd", 2),
                                                   ("bwd", 0), ("bwd", 1), ("bwd", 2)]


def test_stage_programs_follow_the_schedule(wide):
    w = transformer(wide, **SMALL, tp=4, dp=2, pp=4)
    for stage, program in enumerate(w.programs):
        seen = []
        for op in _ops(program, "compute"):
            step = ("fwd" if op.pass_ == "fwd" else "bwd", int(op.name.split(".")[0][2:]))
            if not seen or seen[-1] != step:
                seen.append(step)
        assert seen == pipeline_schedule("1f1b", 4, stage, 6)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("sp", [False, True])
def test_sends_and_recvs_pair_up_across_stages(wide, schedule, sp):
    w = transformer(wide, **SMALL, tp=4, dp=2, pp=4, schedule=schedule, sp=sp)
    sends, recvs = Counter(), Counter()
    sizes = {}
    for program in w.programs:
        for op in _ops(program, "send") + _ops(program, "recv"):
            assert op.peer is None and abs(op.peer_offset) == 8      # stride between stages
            assert op.deps if op.kind == "send" else not op.deps
            for npu in program.npus.tolist():
                key = (npu, npu + op.peer_offset, op.tag) if op.kind == "send" else \
                    (npu + op.peer_offset, npu, op.tag)
                (sends if op.kind == "send" else recvs)[key] += 1
                sizes.setdefault(key, set()).add(op.size)
    assert sends == recvs
    assert set(sends.values()) == {1}
    assert all(len(s) == 1 for s in sizes.values())
    # per stage boundary and direction: one message per micro-batch and NPU
    assert len(sends) == 2 * 3 * 6 * 8


# ------------------------------------------------------------------ mapping
def test_default_mapping_innermost_tp_then_dp_then_pp(wide, cube):
    spec = parse_transformer(dict(SMALL, tp=4, dp=2, pp=4), "argument")
    assert parallel_dims(wide, spec) == {"tp": (0,), "dp": (1,), "pp": (2,)}
    w = transformer(wide, **SMALL, tp=4, dp=2, pp=4)
    np.testing.assert_array_equal(w.programs[1].npus, np.arange(8, 16))
    spec = parse_transformer(dict(SMALL, tp=1, dp=8, pp=4), "argument")
    assert parallel_dims(wide, spec) == {"tp": (), "dp": (0, 1), "pp": (2,)}
    spec = parse_transformer(dict(SMALL, tp=8, dp=1, pp=1), "argument")
    assert parallel_dims(cube, spec) == {"tp": (0, 1, 2), "dp": (), "pp": ()}


def test_explicit_dims(cube):
    w = transformer(cube, **SMALL, tp=2, dp=2, pp=2, dims={"tp": [2], "dp": [0], "pp": [1]})
    np.testing.assert_array_equal(w.programs[0].npus, [0, 1, 4, 5])
    np.testing.assert_array_equal(w.programs[1].npus, [2, 3, 6, 7])
    first = w.programs[0]
    assert {op.dims for op in _ops(first, "collective")} == {(2,), (0,)}
    assert {op.peer_offset for op in _ops(first, "send")} == {2}
    _check_graph(w)


def test_degree_that_does_not_fit_the_dims_suggests_a_shape():
    net = flowsim.load_network({"topology": ["Ring", "Switch"], "npus_count": [4, 8],
                                "bandwidth": [100, 50], "latency": [500, 500]})
    with pytest.raises(ConfigError, match=r"'dp'.*npus_count: \[4, 4, 2\]"):
        transformer(net, **SMALL, tp=4, dp=4, pp=2)
    with pytest.raises(ConfigError, match=r"'tp'.*npus_count: \[8, 4\]"):
        transformer(net, **SMALL, tp=8, dp=4, pp=1)
    odd = flowsim.load_network(dict(CUBE, npus_count=[2, 2, 4]))
    with pytest.raises(ConfigError, match=r"'dp'.*dims: \{tp: \[2\], dp: \[0\], pp: \[1\]\}"):
        transformer(odd, **SMALL, tp=4, dp=2, pp=2)
    w = transformer(odd, **SMALL, tp=4, dp=2, pp=2, dims={"tp": [2], "dp": [0], "pp": [1]})
    _check_graph(w)
    with pytest.raises(ConfigError, match=r"2 \* 2 \* 2 = 8 NPUs, but the network has 32"):
        transformer(net, **SMALL, tp=2, dp=2, pp=2)
    with pytest.raises(ConfigError, match=r"dims.dp.*multiply to dp=4"):
        transformer(net, **SMALL, tp=4, dp=4, pp=2, dims={"tp": [0], "dp": [1]})
    with pytest.raises(ConfigError, match=r"dims.tp.*0..1"):
        transformer(net, **SMALL, tp=4, dp=8, pp=1, dims={"tp": [5], "dp": [1]})


# ------------------------------------------------------------------ DLRM
def test_dlrm_defaults_give_the_case_study_sizes():
    net = flowsim.load_network({"topology": ["Switch"], "npus_count": [128],
                                "bandwidth": [50], "latency": [500]})
    w = dlrm(net)
    (program,) = w.programs
    assert program.npus.size == 128                    # global batch 128 * 512 = 65 536
    assert w.layers == (["embedding"] + [f"bottom{i}" for i in range(7)] + ["interaction"]
                        + [f"top{i}" for i in range(12)])
    by_name = {op.name: op for op in program.ops}
    lookup = by_name["embedding.fwd"]
    assert lookup.mem_bytes == 512 * 60 * 64 * 64 * 2
    assert lookup.duration_ns == pytest.approx(512 * 60 * 64 * 64 * 2 / 900e9 * 1e9)
    a2a = _ops(program, "collective", "all_to_all")
    assert [op.size for op in a2a] == [512 * 64 * 64 * 2] * 2 == [4 << 20] * 2
    assert all(op.dims is None for op in program.ops if op.kind == "collective")
    bottom = [(1600, 1024)] + [(1024, 1024)] * 5 + [(1024, 64)]
    top = [(2144, 2048)] + [(2048, 2048)] * 10 + [(2048, 1)]   # 2144 = 64 + 65 * 64 / 2
    ars = {op.name: op.size for op in _ops(program, "collective", "all_reduce")}
    assert len(ars) == 7 + 12
    for prefix, shapes in (("bottom", bottom), ("top", top)):
        for i, (n_in, n_out) in enumerate(shapes):
            assert ars[f"{prefix}{i}.wg.all_reduce"] == (n_in * n_out + n_out) * 2
            fwd = by_name[f"{prefix}{i}.fwd"]
            assert fwd.flops == 2 * 512 * n_in * n_out
    # the bottom MLP overlaps the forward all-to-all; the interaction waits for it
    assert by_name["bottom0.fwd"].deps == ()
    assert by_name["interaction.fwd"].deps == (a2a[0].id,)
    assert by_name["embedding.wg"].deps == (a2a[1].id,)
    assert by_name["embedding.wg"].mem_bytes == 2 * lookup.mem_bytes
    assert "bottom0.ig" not in by_name and "bottom1.ig" in by_name
    assert a2a[1].deps == (by_name["interaction.ig"].id,)
    waited = {d for op in program.ops for d in op.deps}
    assert not waited & {op.id for op in _ops(program, "collective", "all_reduce")}
    _check_graph(w)


def test_dlrm_options_and_errors(cube):
    w = dlrm(cube, batch_per_npu=8, bottom_mlp=[32, 16], top_mlp=[8, 1], embedding_dim=16,
             sparse_features=4, roofline={"peak_tflops": 1})
    by_name = {op.name: op for op in w.programs[0].ops}
    assert by_name["top0.fwd"].flops == 2 * 8 * (16 + 5 * 4 // 2) * 8
    with pytest.raises(ConfigError, match=r"bottom_mlp.*embedding_dim=64"):
        dlrm(cube, bottom_mlp=(1024, 32))
    with pytest.raises(ConfigError, match=r"top_mlp\[1\]"):
        dlrm(cube, top_mlp=(8, 0))
    with pytest.raises(ConfigError, match=r"'pooling'"):
        dlrm(cube, pooling=2.5)


# ------------------------------------------------------------------ specs and the registry
def test_yaml_spec_builds_the_same_workload(tmp_path, cube):
    path = tmp_path / "gpt.yml"
    path.write_text("generator: transformer\nlayers: 8\nhidden: 256\nsequence: 128\n"
                    "micro_batch: 2\nmicro_batches: 6\ntp: 2\ndp: 2\npp: 2\nsp: true\n"
                    "schedule: GPipe\n"
                    "roofline: {peak_tflops: 100, memory_bandwidth_GBps: 1000}\n")
    spec = yaml.safe_load(path.read_text())
    built = build_generator(spec, str(path), cube)
    direct = transformer(cube, **SMALL, tp=2, dp=2, pp=2, sp=True, schedule="gpipe",
                         roofline=Roofline(100e12, 1000e9, 0.5))
    for a, b in zip(built.programs, direct.programs):
        assert [vars(op) for op in a.ops] == [vars(op) for op in b.ops]
        assert str(path) in a.source
    d = build_generator({"generator": "dlrm", "batch_per_npu": 16}, "<dict>", cube)
    assert d.name == "dlrm" and d.programs[0].npus.size == 8


@pytest.mark.parametrize("change, match", [
    ({"generator": "gpt"}, r"spec.yml: key 'generator': expected one of dlrm, transformer"),
    ({"generator": None}, r"key 'generator'"),
    ({"hiden": 3}, r"spec.yml: unknown key 'hiden'"),
    ({"layers": 0}, r"spec.yml: key 'layers': expected an integer >= 1, found 0"),
    ({"layers": 3}, r"key 'layers': expected a multiple of pp=2"),
    ({"hidden": "big"}, r"key 'hidden'"),
    ({"hidden": 255}, r"key 'hidden': expected a multiple of tp=2"),
    ({"heads": 3}, r"key 'heads'"),
    ({"sequence": 127, "sp": True}, r"key 'sequence'"),
    ({"sp": "yes"}, r"key 'sp': expected true or false"),
    ({"schedule": "zigzag"}, r"key 'schedule': expected one of 1f1b, gpipe"),
    ({"roofline": {"peak_tflops": -1}}, r"key 'roofline.peak_tflops'"),
    ({"roofline": {"efficiency": 1.5}}, r"key 'roofline.efficiency': expected a number > 0 "
                                        r"\(at least 1e-06 and at most 1\)"),
    ({"roofline": {"flops": 1}}, r"unknown key 'roofline.flops'"),
    ({"roofline": 312}, r"key 'roofline': expected a mapping"),
    ({"dims": {"tp": [0], "ep": [1]}}, r"unknown key 'dims.ep'"),
    ({"dims": {"tp": [0], "dp": [0]}}, r"key 'dims.dp'.*already in dims.tp"),
    ({"dims": [0, 1]}, r"key 'dims'"),
    ({"tp": 4}, r"4 \* 2 \* 2 = 16 NPUs, but the network has 8"),
    ({"micro_batches": 10**9}, r"more than"),
])
def test_bad_specs_name_the_file_and_key(cube, change, match):
    spec = {"generator": "transformer", **SMALL, "tp": 2, "dp": 2, "pp": 2}
    spec.update(change)
    with pytest.raises(ConfigError, match=match):
        build_generator(spec, "spec.yml", cube)


def test_missing_key_and_non_mapping(cube):
    with pytest.raises(ConfigError, match=r"spec.yml: missing key 'hidden'"):
        build_generator({"generator": "transformer", "layers": 2, "sequence": 8,
                         "micro_batch": 1, "micro_batches": 1}, "spec.yml", cube)
    with pytest.raises(ConfigError, match=r"spec.yml: expected a mapping"):
        build_generator([1, 2], "spec.yml", cube)
    with pytest.raises(ConfigError, match=r"spec.yml: unknown key 'layers'"):
        build_generator({"generator": "dlrm", "layers": 2}, "spec.yml", cube)
    with pytest.raises(ConfigError, match=r"argument 'network'"):
        transformer({"topology": ["Ring"]}, **SMALL)


# ------------------------------------------------------------------ roofline
def test_roofline_time_is_the_larger_of_the_two_roofs():
    rl = Roofline(100e12, 1e12, 0.5)
    assert rl.time_ns(1e9, 0) == pytest.approx(1e9 / 50e12 * 1e9)        # compute bound
    assert rl.time_ns(0, 1e6) == pytest.approx(1e6 / 0.5e12 * 1e9)       # memory bound
    times = rl.time_ns(np.array([1e9, 0.0]), np.array([[0.0], [1e6]]))
    assert times.shape == (2, 2)
    np.testing.assert_allclose(times, [[20_000, 0], [20_000, 2_000]])
    assert isinstance(rl.time_ns(1, 1), float)


def test_parse_roofline_units_and_errors():
    rl = parse_roofline({"peak_tflops": 60, "memory_bandwidth_GBps": 900}, "sys.yml")
    assert rl == Roofline(60e12, 900e9, 1.0)                  # GB = 1e9 bytes
    assert parse_roofline({"efficiency": 0.25}, "x", default=rl) == Roofline(60e12, 900e9,
                                                                             0.25)
    with pytest.raises(ConfigError, match=r"sys.yml: missing key 'roofline.peak_tflops'"):
        parse_roofline({"memory_bandwidth_GBps": 900}, "sys.yml")
    with pytest.raises(ConfigError, match=r"key 'roofline.memory_bandwidth_GBps'"):
        parse_roofline({"peak_tflops": 1, "memory_bandwidth_GBps": float("inf")}, "sys.yml")
    with pytest.raises(ConfigError, match=r"argument 'efficiency'"):
        Roofline(1e12, 1e12, 0.0)
    with pytest.raises(ConfigError, match=r"argument 'peak_flops'"):
        Roofline(-1.0, 1e12)


# ------------------------------------------------------------------ end to end
@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_generated_workloads_simulate(cube, model):
    gpt = transformer(cube, layers=2, hidden=64, sequence=32, micro_batch=1,
                      micro_batches=2, tp=2, dp=2, pp=2)
    rec = dlrm(cube, batch_per_npu=16)
    for workload in (gpt, rec):
        ds = simulate(cube, workload, model=model)
        assert float(ds.time_ns) > 0
        # every NPU's time splits into compute, exposed communication and idle
        assert np.all(ds.compute_ns + ds.exposed_comm_ns <= ds.finish_ns * (1 + 1e-9))
        assert float(ds.finish_ns.max()) <= float(ds.time_ns) + 1e-6


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_one_layer_data_parallel_transformer_by_hand(model):
    """dp=2, one layer, compute-bound roofline: forward, input and weight gradient of
    (24 b s h^2 + 4 b s^2 h) FLOPs each in a chain, then the gradient all-reduce of
    12 h^2 fp16 parameters, which nothing waits for until the end (all of it exposed)."""
    h, s, peak = 256, 128, 1e14
    net = {"topology": ["Ring"], "npus_count": [2], "bandwidth": [50], "latency": [500]}
    roofline = {"peak_tflops": peak / 1e12, "memory_bandwidth_GBps": 1e12, "efficiency": 1.0}
    work = transformer(flowsim.load_network(net), layers=1, hidden=h, sequence=s,
                       micro_batch=1, micro_batches=1, dp=2, roofline=roofline)
    system = {"preferred-dataset-splits": 1, "endpoint-delay": 0}
    ds = simulate(net, work, system, model=model)
    fwd = (24 * s * h * h + 4 * s * s * h) / peak * 1e9
    grad_bytes = 12 * h * h * 2
    allreduce = grad_bytes / (50 * 2**30 / 1e9) + 2 * 500   # ring of 2: N/B + 2 latency
    np.testing.assert_allclose(ds.compute_ns, 3 * fwd, rtol=1e-9)
    assert float(ds.time_ns) == pytest.approx(3 * fwd + allreduce, rel=1e-9)
    np.testing.assert_allclose(ds.exposed_comm_ns, allreduce, rtol=1e-9)
