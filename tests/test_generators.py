"""Workload generators: the DLRM case-study sizes, the registry and YAML specs, the roofline,
bad specs, and generated workloads end to end (the transformer in detail:
``test_transformer.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

import flowsim
from flowsim import simulate
from flowsim.errors import ConfigError
from flowsim.workload.generators import build_generator, dlrm, transformer
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
                         roofline=Roofline(100e12, 1000e9, 1.0))
    for a, b in zip(built.programs, direct.programs):
        assert [vars(op) for op in a.ops] == [vars(op) for op in b.ops]
        assert str(path) in a.source
    d = build_generator({"generator": "dlrm", "batch_per_npu": 16}, "<dict>", cube)
    assert d.name == "dlrm" and d.programs[0].npus.size == 8


@pytest.mark.parametrize("change, match", [
    ({"generator": "gpt"},
     r"spec.yml: key 'generator': expected one of dlrm, huggingface, llmfoundry, megatron, "
     r"megatron_bridge, nemo, nemo2, torchtitan, transformer"),
    ({"generator": None}, r"key 'generator'"),
    ({"hiden": 3}, r"spec.yml: unknown key 'hiden'"),
    ({"layers": 0}, r"spec.yml: key 'layers': expected an integer >= 1, found 0"),
    ({"layers": 3}, r"key 'layers': expected a multiple of pp \* vpp = 2"),
    ({"hidden": "big"}, r"key 'hidden'"),
    ({"heads": 3}, r"key 'heads'"),
    ({"sequence": 127, "sp": True}, r"key 'sequence'"),
    ({"sp": "yes"}, r"key 'sp': expected true or false"),
    ({"schedule": "zigzag"}, r"key 'schedule': expected one of 1f1b, gpipe, interleaved"),
    ({"roofline": {"peak_tflops": -1}}, r"key 'roofline.peak_tflops'"),
    ({"roofline": {"efficiency": 1.5}}, r"key 'roofline.efficiency': expected a number > 0 "
                                        r"\(at least 1e-06 and at most 1\)"),
    ({"roofline": {"flops": 1}}, r"unknown key 'roofline.flops'"),
    ({"roofline": 312}, r"key 'roofline': expected a mapping"),
    ({"dims": {"tp": [0], "xp": [1]}}, r"unknown key 'dims.xp'"),
    ({"dims": {"tp": [0], "dp": [0]}}, r"key 'dims.dp'.*already in dims.tp"),
    ({"dims": [0, 1]}, r"key 'dims'"),
    ({"tp": 4, "heads": 8}, r"4 \* 1 \* 2 \* 2 = 16 NPUs, but the network has 8"),
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
    gpt = transformer(cube, layers=2, hidden=64, heads=2, sequence=32, micro_batch=1,
                      micro_batches=2, tp=2, dp=2, pp=2)
    rec = dlrm(cube, batch_per_npu=16)
    for workload in (gpt, rec):
        ds = simulate(cube, workload, model=model)
        assert float(ds.time_ns) > 0
        # every NPU's time splits into compute, exposed communication and idle
        assert np.all(ds.compute_ns + ds.exposed_comm_ns <= ds.finish_ns * (1 + 1e-9))
        assert float(ds.finish_ns.max()) <= float(ds.time_ns) + 1e-6
