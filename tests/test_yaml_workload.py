"""flowsim's YAML workload graphs: round trip, every bad input, and runs timed by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

import flowsim
from flowsim import simulate
from flowsim.errors import ConfigError, SimulationError
from flowsim.units import parse_duration
from flowsim.workload.graph import Op, Program, Workload
from flowsim.workload.yaml_graph import (
    format_workload_yaml,
    parse_workload_mapping,
    read_workload_yaml,
    write_workload_yaml,
)

RING4 = {"topology": ["Ring"], "npus_count": [4], "bandwidth": [100], "latency": [500]}
#: no endpoint delay, one chunk, one chunk per dimension at a time: closed forms hold exactly
PURE = {"preferred-dataset-splits": 1, "endpoint-delay": 0, "active-chunks-per-dimension": 1,
        "collective-optimization": "localBWAware"}
B = 100 * 2**30 / 1e9   # bytes per ns of a "100 GB/s" link (GB = 2**30 B)
L = 500.0               # ns per hop

EXAMPLE = """
name: two-layer data parallel
layers: [L0, L1]
programs:
  - npus: all
    ops:
      - {id: 0, kind: compute, name: fwd0, duration_ns: 1000, layer: L0, pass: fwd}
      - {id: 1, kind: compute, duration: 2us, deps: [0]}
      - {id: 2, kind: collective, collective: all-reduce, size: 1MiB, dims: [0], deps: [1],
         layer: L1, pass: wg}
      - {id: 3, kind: send, peer_offset: 4, tag: 7, size: 64KiB, ctrl_deps: [2]}
      - {id: 4, kind: recv, peer_offset: -4, tag: 7, size: 64KiB}
      - {id: 5, kind: memory, size: 1GiB, remote: true}
      - {id: 6, kind: compute, flops: 1.0e12, bytes: 1GiB}
"""


@pytest.fixture(scope="module")
def ring8():
    return flowsim.load_network({"topology": ["Ring"], "npus_count": [8], "bandwidth": [50],
                                 "latency": [500]})


def _ring_all_reduce_ns(nbytes: float, p: int = 4) -> float:
    """Ring all-reduce on one ring: 2(p-1) steps of N/p bytes, one hop each."""
    return 2 * (p - 1) / p * nbytes / B + 2 * (p - 1) * L


def _fields(workload: Workload) -> list:
    return [(p.npus.tolist(), [dataclasses.asdict(op) for op in p.ops])
            for p in workload.programs]


# ---------------------------------------------------------------- the format
def test_example_reads_as_documented(tmp_path, ring8):
    path = tmp_path / "example.yml"
    path.write_text(EXAMPLE)
    w = read_workload_yaml(path, ring8)
    assert w.name == "two-layer data parallel" and w.layers == ["L0", "L1"]
    (program,) = w.programs
    assert program.npus.tolist() == list(range(8))
    ops = {op.id: op for op in program.ops}
    assert ops[0].duration_ns == 1000.0 and ops[0].layer == 0 \
        and ops[0].pass_ == "fwd" and ops[0].name == "fwd0"
    assert ops[1].duration_ns == 2000.0 and ops[1].deps == (0,) and ops[1].layer == -1
    assert (ops[2].collective, ops[2].size, ops[2].dims, ops[2].layer, ops[2].pass_) == \
        ("all_reduce", 2**20, (0,), 1, "wg")
    assert (ops[3].peer_offset, ops[3].tag, ops[3].size, ops[3].ctrl_deps) == (4, 7, 65536, (2,))
    assert ops[4].peer_offset == -4
    assert ops[5].size == 2**30 and ops[5].remote
    assert ops[6].flops == 1e12 and ops[6].mem_bytes == 2**30


def test_shorthand_ranges_and_collected_layers(ring8):
    w = parse_workload_mapping({"ops": [{"id": 0, "kind": "compute", "layer": "b"},
                                        {"id": 1, "kind": "compute", "layer": "a"},
                                        {"id": 2, "kind": "compute", "layer": "b"}]},
                               "<dict>", ring8)
    assert w.layers == ["b", "a"] and [op.layer for op in w.programs[0].ops] == [0, 1, 0]
    assert w.programs[0].npus.tolist() == list(range(8))
    w = parse_workload_mapping({"programs": [
        {"npus": {"start": 1, "step": 2}, "ops": [{"id": 0, "kind": "compute"}]},
        {"npus": 0, "ops": [{"id": 0, "kind": "compute"}]},
        {"npus": [2, 6], "ops": [{"id": 0, "kind": "compute"}]}]}, "<dict>", ring8)
    assert [p.npus.tolist() for p in w.programs] == [[1, 3, 5, 7], [0], [2, 6]]


def test_durations_parse_with_units():
    assert parse_duration("2us") == 2000.0
    assert parse_duration("1.5ms") == 1.5e6
    assert parse_duration(250) == 250.0
    assert parse_duration("1e3") == 1000.0
    assert parse_duration("3 s") == 3e9
    for bad in ("-1us", "2 parsecs", float("inf"), True, None, -1):
        with pytest.raises(ConfigError, match="duration"):
            parse_duration(bad)


def test_round_trip(tmp_path, ring8):
    ops_a = [
        Op(0, "compute", "fwd yes: odd name", duration_ns=1234.5, layer=0, pass_="fwd"),
        Op(1, "compute", "yes", flops=3.5e12, mem_bytes=1e-5 + 7, deps=(0,), gap_ns=1.0),
        Op(2, "collective", "ar", collective="all_reduce", size=12345, dims=(0,),
           update_delay_ns=0.25, priority="LIFO", layer=1, pass_="wg", deps=(1,)),
        Op(3, "collective", collective="all_gather", size=4096, group=(0, 2, 4, 6),
           ctrl_deps=(2,)),
        Op(4, "collective", collective="reduce_scatter", size=8, dims=(), deps=(3,)),
        Op(5, "send", peer_offset=1, tag=3, size=100, deps=(4,)),
        Op(6, "recv", peer_offset=1, tag=4, size=100),
        Op(7, "memory", size=2**30, remote=True, deps=(6,), layer=1, pass_="ig"),
        Op(9, "compute", "naïve \"quoted\"", duration_ns=1e20, deps=(7, 5)),
    ]
    ops_b = [Op(0, "recv", peer=0, tag=3, size=100), Op(1, "send", peer=0, tag=4, size=100,
                                                        deps=(0,))]
    w = Workload([Program(ops_a, np.arange(0, 8, 2), "a"), Program(ops_b, [1], "b")],
                 ["L 0", "1"], "round trip")
    path = tmp_path / "w.yaml"
    write_workload_yaml(w, path)
    back = read_workload_yaml(path, ring8)
    assert back.name == w.name and back.layers == w.layers
    assert _fields(back) == _fields(w)
    assert format_workload_yaml(back) == path.read_text()
    # plain YAML that PyYAML reads without the flowsim reader, one op a line
    assert len(yaml.safe_load(path.read_text())["programs"][0]["ops"]) == len(ops_a)
    assert "{start: 0, stop: 8, step: 2}" in path.read_text()


# ---------------------------------------------------------------- bad inputs
OK_OP = {"id": 0, "kind": "compute", "duration": 10}


def _bad(ops=None, **top):
    mapping = {"layers": ["L0"], "ops": ops if ops is not None else [OK_OP]}
    mapping.update(top)
    return mapping


@pytest.mark.parametrize("mapping,match", [
    (_bad(extra=1), r"unknown key 'extra'"),
    (_bad([OK_OP, {"id": 1, "kind": "compute", "duraton": 5}]),
     r"ops\[1\] \(id 1\): unknown key 'duraton'"),
    (_bad([{"id": 0, "kind": "compute", "size": 5}]), r"ops\[0\] \(id 0\): unknown key 'size'"),
    (_bad([{"id": 0, "kind": "matmul"}]), r"ops\[0\] \(id 0\): key 'kind': expected one of "
                                          r"compute, collective"),
    (_bad([{"kind": "compute"}]), r"ops\[0\]: missing key 'id'"),
    (_bad([{"id": -1, "kind": "compute"}]), r"ops\[0\]: key 'id': expected an integer >= 0"),
    (_bad([{"id": 1.5, "kind": "compute"}]), r"ops\[0\]: key 'id'"),
    (_bad([{"id": 0, "kind": "memory", "size": -5}]), r"\(id 0\): key 'size': expected a whole"),
    (_bad([{"id": 0, "kind": "memory", "size": 1.5}]), r"\(id 0\): key 'size'.*found 1.5"),
    (_bad([{"id": 0, "kind": "memory", "size": "1.5B"}]), r"key 'size'.*'1.5B'"),
    (_bad([{"id": 0, "kind": "memory", "size": "3 parsecs"}]), r"key 'size'"),
    (_bad([{"id": 0, "kind": "memory"}]), r"\(id 0\): missing key 'size'"),
    (_bad([{"id": 0, "kind": "compute", "duration": "-2us"}]), r"\(id 0\): key 'duration'"),
    (_bad([{"id": 0, "kind": "compute", "gap_ns": "soon"}]), r"\(id 0\): key 'gap_ns'"),
    (_bad([{"id": 0, "kind": "compute", "duration": 1, "duration_ns": 1}]),
     r"\(id 0\): give one of 'duration' and 'duration_ns'"),
    (_bad([{"id": 0, "kind": "compute", "flops": -1}]), r"\(id 0\): key 'flops'"),
    (_bad([{"id": 0, "kind": "compute", "bytes": "lots"}]), r"\(id 0\): key 'bytes'"),
    (_bad([{"id": 0, "kind": "compute", "layer": "L9"}]),
     r"ops\[0\] \(id 0\): key 'layer': expected one of the names in 'layers' \(L0\)"),
    (_bad([{"id": 0, "kind": "compute", "pass": "bwd"}]), r"\(id 0\): key 'pass': expected one "
                                                          r"of fwd, ig, wg"),
    (_bad([OK_OP, {"id": 0, "kind": "compute"}]),
     r"ops\[1\] \(id 0\): key 'id': expected an id no other op.*ops\[0\]"),
    (_bad([OK_OP, {"id": 1, "kind": "compute", "deps": [0, 7]}]),
     r"ops\[1\] \(id 1\): key 'deps': expected ids of ops of this program, found '7, which"),
    (_bad([OK_OP, {"id": 1, "kind": "compute", "ctrl_deps": [5]}]),
     r"ops\[1\] \(id 1\): key 'ctrl_deps'"),
    (_bad([OK_OP, {"id": 1, "kind": "compute", "deps": "zero"}]), r"\(id 1\): key 'deps'"),
    (_bad([{"id": 0, "kind": "compute", "deps": [1]}, {"id": 1, "kind": "compute",
                                                       "deps": [0]}]),
     r"dependency cycle among nodes 0, 1"),
    (_bad([{"id": 0, "kind": "collective", "collective": "all-mangle", "size": 8}]),
     r"\(id 0\): key 'collective': expected one of all-reduce"),
    (_bad([{"id": 0, "kind": "collective", "collective": "all_reduce"}]),
     r"\(id 0\): missing key 'size'"),
    (_bad([{"id": 0, "kind": "collective", "collective": "all_reduce", "size": 8,
            "dims": [-1]}]), r"\(id 0\): key 'dims'"),
    (_bad([{"id": 0, "kind": "collective", "collective": "all_reduce", "size": 8,
            "group": [1, 1]}]), r"\(id 0\): key 'group': expected at least 2 distinct"),
    (_bad([{"id": 0, "kind": "collective", "collective": "all_reduce", "size": 8,
            "priority": "urgent"}]), r"\(id 0\): key 'priority'"),
    (_bad([{"id": 0, "kind": "send", "size": 8}]), r"\(id 0\): missing key 'peer_offset'"),
    (_bad([{"id": 0, "kind": "send", "size": 8, "peer": 1, "peer_offset": 1}]),
     r"\(id 0\): give one of 'peer' and 'peer_offset'"),
    (_bad([{"id": 0, "kind": "recv", "peer_offset": 1, "tag": "x"}]), r"\(id 0\): key 'tag'"),
    (_bad([{"id": 0, "kind": "memory", "size": 8, "remote": "yes please"}]),
     r"\(id 0\): key 'remote'"),
    (_bad([]), r"key 'ops': expected a non-empty list"),
    (_bad(layers=["a", "a"]), r"key 'layers': expected distinct"),
    (_bad(name=3), r"key 'name'"),
    (_bad(programs=[]), r"either 'programs'.*or 'ops'"),
    ({"programs": [{"npus": [0, 9], "ops": [OK_OP]}]},
     r"programs\[0\]: key 'npus': expected NPU ids inside the network \(the network has NPUs "
     r"0..7\), found 9"),
    ({"programs": [{"npus": {"start": 4, "stop": 2}, "ops": [OK_OP]}]},
     r"programs\[0\]: key 'npus': expected a range"),
    ({"programs": [{"npus": {"first": 4}, "ops": [OK_OP]}]}, r"unknown key 'npus.first'"),
    ({"programs": [{"npus": "some", "ops": [OK_OP]}]}, r"programs\[0\]: key 'npus'"),
    ({"programs": [{"npus": "all", "ops": [{"id": 0, "kind": "recv", "peer_offset": 1,
                                             "bogus": 1}]}]},
     r"programs\[0\]\.ops\[0\] \(id 0\): unknown key 'bogus'"),
    ({"programs": [{"npus": "all"}]}, r"programs\[0\]: missing key 'ops'"),
    ({"generator": "no-such-model"}, r"key 'generator'"),
])
def test_bad_inputs_name_the_op_and_key(mapping, match, ring8):
    with pytest.raises(ConfigError, match=match):
        parse_workload_mapping(mapping, "w.yml", ring8)


def test_file_errors_name_the_file(tmp_path, ring8):
    path = tmp_path / "bad.yml"
    path.write_text("ops: [{id: 0, kind: compute, duration: 1us, gpu: 3}]\n")
    with pytest.raises(ConfigError, match=r"bad\.yml: ops\[0\] \(id 0\): unknown key 'gpu'"):
        read_workload_yaml(path, ring8)
    path.write_text("ops: [{id: 0\n")
    with pytest.raises(ConfigError, match=r"bad\.yml: YAML syntax error"):
        simulate(RING4, path)


# ---------------------------------------------------------------- runs timed by hand
#: Two layers of data parallelism: forward, then each layer's backward pass and its gradient
#: all-reduce, issued without blocking; the end waits for both all-reduces.
T_FWD0, T_FWD1, T_BWD1, T_BWD0 = 4000.0, 5000.0, 8000.0, 10000.0
N1, N0 = 2**20, 2**18
DATA_PARALLEL = {"name": "dp", "layers": ["L0", "L1"], "ops": [
    {"id": 0, "kind": "compute", "name": "fwd0", "duration": "4us", "layer": "L0",
     "pass": "fwd"},
    {"id": 1, "kind": "compute", "name": "fwd1", "duration_ns": 5000, "layer": "L1",
     "pass": "fwd", "deps": [0]},
    {"id": 2, "kind": "compute", "name": "bwd1", "duration": "8us", "layer": "L1",
     "pass": "wg", "deps": [1]},
    {"id": 3, "kind": "collective", "name": "ar1", "collective": "all-reduce", "size": "1MiB",
     "layer": "L1", "pass": "wg", "deps": [2]},
    {"id": 4, "kind": "compute", "name": "bwd0", "duration": "0.01ms", "layer": "L0",
     "pass": "wg", "deps": [2]},
    {"id": 5, "kind": "collective", "name": "ar0", "collective": "AllReduce",
     "size": "256KiB", "layer": "L0", "pass": "wg", "deps": [4]},
    {"id": 6, "kind": "compute", "name": "end", "deps": [3, 5], "ctrl_deps": [4]},
]}


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_data_parallel_time_and_exposed_communication(model):
    ds = simulate(RING4, DATA_PARALLEL, PURE, model=model)
    a1, a0 = _ring_all_reduce_ns(N1), _ring_all_reduce_ns(N0)
    bwd1_end = T_FWD0 + T_FWD1 + T_BWD1
    # ar1 outlasts bwd0, so ar0 (one chunk per dimension at a time) waits for it
    assert a1 > T_BWD0
    total = bwd1_end + a1 + a0
    exposed = total - (bwd1_end + T_BWD0)
    assert float(ds.time_ns) == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(ds.exposed_comm_ns.values, exposed, rtol=1e-12)
    np.testing.assert_allclose(ds.compute_ns.values, T_FWD0 + T_FWD1 + T_BWD1 + T_BWD0)
    # the end waited for ar0 (layer L0's weight gradient); ar1 finished before ar0
    expected = np.zeros((2, 3))
    expected[0, 2] = exposed
    np.testing.assert_allclose(ds.layer_exposed_comm_ns.sel(layer=["L0", "L1"]).values,
                               expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(ds.layer_compute_ns.sel(layer="L1").values,
                               [T_FWD1, 0, T_BWD1])


def test_iterations_repeat_the_graph_after_its_end(tmp_path):
    path = tmp_path / "dp.yml"
    path.write_text(yaml.safe_dump(DATA_PARALLEL))
    one = float(simulate(RING4, path, PURE).time_ns)
    assert float(simulate(RING4, path, PURE, iterations=3).time_ns) == pytest.approx(3 * one)


#: A two-stage pipeline: NPUs 0-1 run stage 0, NPUs 2-3 stage 1 (peer_offset +-2).
S = 64 * 1024
T_F0, T_F1, T_B1, T_B0 = 3000.0, 2000.0, 4000.0, 6000.0
PIPELINE = {"layers": ["stage0", "stage1"], "programs": [
    {"npus": [0, 1], "name": "stage 0", "ops": [
        {"id": 0, "kind": "compute", "duration": "3us", "layer": "stage0", "pass": "fwd"},
        {"id": 1, "kind": "send", "peer_offset": 2, "tag": 1, "size": "64KiB", "deps": [0]},
        {"id": 2, "kind": "recv", "peer_offset": 2, "tag": 2, "size": "64KiB"},
        {"id": 3, "kind": "compute", "duration": "6us", "layer": "stage0", "pass": "ig",
         "deps": [2], "ctrl_deps": [1]}]},
    {"npus": {"start": 2, "stop": 4}, "name": "stage 1", "ops": [
        {"id": 0, "kind": "recv", "peer_offset": -2, "tag": 1, "size": "64KiB"},
        {"id": 1, "kind": "compute", "duration": "2us", "layer": "stage1", "pass": "fwd",
         "deps": [0]},
        {"id": 2, "kind": "compute", "duration": "4us", "layer": "stage1", "pass": "ig",
         "deps": [1]},
        {"id": 3, "kind": "send", "peer_offset": -2, "tag": 2, "size": 65536, "deps": [2]}]},
]}


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_send_recv_pipeline(model):
    delay = 10.0
    ds = simulate(RING4, PIPELINE, dict(PURE, **{"endpoint-delay": delay}), model=model)
    # a message: endpoint delay, then 2 hops (NPU i to i+2 on a 4-ring), then the delay again
    # on arrival. NPU 0->2 and 1->3 both go the same way round and share the link 1->2 (and
    # 2->0, 3->1 the link 3->0): the flow model halves their rates, the analytical one not.
    sharing = 2 if model == "flow" else 1
    message = delay + 2 * L + sharing * S / B + delay
    stage1_end = T_F0 + message + T_F1 + T_B1 + message
    total = stage1_end + T_B0
    assert float(ds.time_ns) == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(ds.finish_ns.values, [total, total, stage1_end, stage1_end],
                               rtol=1e-12)
    # stage 0's backward pass is control-ready when its send has ended (the message has
    # arrived); it then waits for the gradient: stage 1's work and the message back, the
    # pipeline's bubble. Stage 1 waits for stage 0's forward and its message (bubble), and
    # its last send is exposed communication (the tail after its last compute).
    np.testing.assert_allclose(ds.bubble_ns.values, [T_F1 + T_B1 + message] * 2
                               + [T_F0 + message] * 2, rtol=1e-12)
    np.testing.assert_allclose(ds.exposed_comm_ns.values, [0, 0, message, message],
                               rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(ds.blocked_comm_ns.values, ds.bubble_ns.values, rtol=1e-12)
    assert int(ds.attrs["messages"]) == 4


def test_recv_without_send_is_a_config_error():
    bad = {"programs": [
        {"npus": [0], "ops": [{"id": 0, "kind": "compute", "duration": 5}]},
        {"npus": [1], "ops": [{"id": 4, "kind": "recv", "name": "lonely", "peer": 0,
                               "tag": 3}]}]}
    with pytest.raises(ConfigError, match=r"programs\[1\]: node 4 \(lonely\): recv on NPU 1 "
                                          r"from NPU 0 with tag 3 has no matching send"):
        simulate(RING4, bad, PURE)


def test_deadlock_names_the_stuck_npus_and_ops():
    def stage(me: int, peer: int) -> dict:
        return {"npus": me, "ops": [
            {"id": 0, "kind": "recv", "name": f"wait{me}", "peer": peer},
            {"id": 1, "kind": "send", "name": f"reply{me}", "peer": peer, "size": 8,
             "deps": [0]}]}

    with pytest.raises(SimulationError) as info:
        simulate(RING4, {"programs": [stage(0, 1), stage(1, 0)]}, PURE)
    text = str(info.value)
    assert text.startswith("deadlock: 4 op(s) never finished")
    assert "NPU 0 (<dict>: programs[0]): node 0 (wait0) waits for a message from NPU 1" in text
    assert "NPU 1 (<dict>: programs[1]): node 0 (wait1) waits for a message from NPU 0" in text
    assert "node 1 (reply0) waits for node(s) [0]" in text
