"""Chakra execution traces: the wire format, ASTRA-sim's example traces, the graph mapping,
export and round trips, and every bad input."""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import VALIDATION
from flowsim import ConfigError, FlowsimWarning
from flowsim.cli import main
from flowsim.workload.chakra import (
    load_chakra,
    read_custom_collective,
    read_et,
    save_chakra,
    write_et,
)
from flowsim.workload.graph import Op, Program, Workload, spmd

EXAMPLES = VALIDATION / "astra_sim" / "examples"
MICRO = EXAMPLES / "microbenchmarks"
CUSTOM = EXAMPLES / "custom_collectives"
needs_examples = pytest.mark.skipif(not EXAMPLES.is_dir(),
                                    reason=f"ASTRA-sim examples not found at {EXAMPLES}")
COLLECTIVE_OF = {"all_reduce": 0, "all_gather": 2, "all_to_all": 6, "reduce_scatter": 7}


def coll(node_id: int, comm_type: int = 0, size: int = 1 << 20, deps=(), **attrs) -> dict:
    return {"id": node_id, "name": f"n{node_id}", "type": "COMM_COLL_NODE",
            "data_deps": list(deps),
            "attrs": {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size, **attrs}}


def comp(node_id: int, micros: int = 5, deps=(), ctrl=(), **attrs) -> dict:
    return {"id": node_id, "name": f"c{node_id}", "type": "COMP_NODE", "duration_micros": micros,
            "data_deps": list(deps), "ctrl_deps": list(ctrl), "attrs": attrs}


def write_ranks(prefix: Path, per_rank: list[list[dict]]) -> None:
    for rank, nodes in enumerate(per_rank):
        write_et(f"{prefix}.{rank}.et", nodes)


# ------------------------------------------------------------------------------- wire format

def varint(value: int) -> bytes:
    """A base-128 varint (the framing of .et files), written here independently of flowsim."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


@pytest.mark.parametrize("length", [0, 1, 127, 128, 16383, 16384, 300_000])
def test_length_prefixes_of_every_width(tmp_path, length):
    # messages of 2**7 and 2**14 bytes and more need 2- and 3-byte length prefixes
    write_et(tmp_path / "w.0.et", [{"id": 1, "type": "COMP_NODE", "name": "x" * length}])
    raw = (tmp_path / "w.0.et").read_bytes()
    meta = b"\x0a\x050.0.4"
    node = b"\x08\x01" + (b"\x12" + varint(length) + b"x" * length if length else b"") \
        + b"\x18\x04"
    assert raw == varint(len(meta)) + meta + varint(len(node)) + node
    (back,) = read_et(tmp_path / "w.0.et")[1]
    assert back["name"] == "x" * length


@pytest.mark.parametrize("raw, problem", [
    (b"\x80\x80", r"byte 0 \(GlobalMetadata\): the length prefix runs past the end"),
    (b"\xff" * 11, r"byte 0 \(GlobalMetadata\): length prefix longer than 10 bytes"),
    (b"\x00\x05\x08", r"byte 1 \(node #0\): message declares 5 bytes, only 1 remain"),
    (b"\x00\x02\x08\x80", r"byte 1 \(node #0\): not a valid Node message"),
    (b"\x00\x02\x0b\x00", r"byte 1 \(node #0\): not a valid Node message"),   # wire type 3
    (b"\x00\x00\x03\x12\x01\xff", r"byte 2 \(node #1\): not a valid Node"),  # bad UTF-8
    (b"\x00\x07\x08\x09\x15\x14\x00\x00\x00",                       # name as a fixed32
     r"byte 1 \(node #0\): Node.name \(field 2\) has wire type 5"),
    (b"\x00\x02\x18\x0c", r"byte 1 \(node #0\): unknown node type 12"),
])
def test_corrupt_streams(tmp_path, raw, problem):
    (tmp_path / "c.0.et").write_bytes(raw)
    with pytest.raises(ConfigError, match=rf"c\.0\.et: corrupt Chakra trace at {problem}"):
        read_et(tmp_path / "c.0.et")


def test_a_huge_length_prefix_is_an_error_not_an_allocation(tmp_path):
    (tmp_path / "h.0.et").write_bytes(b"\x00" + varint((1 << 63) - 1))
    with pytest.raises(ConfigError, match=r"declares 9223372036854775807 bytes, only 0 "):
        read_et(tmp_path / "h.0.et")


SCALAR_VALUES = {
    "double": st.floats(allow_nan=False),
    "float": st.floats(allow_nan=False, width=32),
    "int32": st.integers(-(1 << 31), (1 << 31) - 1),
    "int64": st.integers(-(1 << 63), (1 << 63) - 1),
    "uint32": st.integers(0, (1 << 32) - 1),
    "uint64": st.integers(0, (1 << 64) - 1),
    "sint32": st.integers(-(1 << 31), (1 << 31) - 1),
    "sint64": st.integers(-(1 << 63), (1 << 63) - 1),
    "fixed32": st.integers(0, (1 << 32) - 1),
    "fixed64": st.integers(0, (1 << 64) - 1),
    "sfixed32": st.integers(-(1 << 31), (1 << 31) - 1),
    "sfixed64": st.integers(-(1 << 63), (1 << 63) - 1),
    "bool": st.booleans(),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
}


@st.composite
def attributes(draw):
    names = draw(st.lists(st.text(min_size=1, max_size=6), max_size=5, unique=True))
    attrs, kinds = {}, {}
    for name in names:
        scalar = draw(st.sampled_from(sorted(SCALAR_VALUES)))
        if draw(st.booleans()):
            kinds[name], attrs[name] = f"{scalar}_val", draw(SCALAR_VALUES[scalar])
        else:
            kinds[name] = f"{scalar}_list"
            attrs[name] = draw(st.lists(SCALAR_VALUES[scalar], max_size=4))
    return attrs, kinds


@st.composite
def raw_nodes(draw):
    count = draw(st.integers(0, 6))
    ids = draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=count, max_size=count,
                        unique=True))
    nodes = []
    for node_id in ids:
        attrs, kinds = draw(attributes())
        io = st.none() | st.fixed_dictionaries({k: st.text(max_size=5)
                                                for k in ("values", "shapes", "types")})
        nodes.append({
            "id": node_id, "name": draw(st.text(max_size=10)),
            "type": draw(st.sampled_from(["INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE",
                                          "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
                                          "COMM_RECV_NODE", "COMM_COLL_NODE"])),
            "ctrl_deps": draw(st.lists(st.integers(0, 1 << 40), max_size=3)),
            "data_deps": draw(st.lists(st.integers(0, (1 << 64) - 1), max_size=3)),
            "start_time_micros": draw(st.integers(0, 1 << 50)),
            "duration_micros": draw(st.integers(0, 1 << 50)),
            "inputs": draw(io), "outputs": draw(io), "attrs": attrs, "attr_types": kinds})
    return nodes


@settings(max_examples=60, deadline=None)
@given(raw_nodes(), st.text(max_size=8))
def test_random_node_lists_round_trip(nodes, version):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.0.et"
        write_et(path, nodes, metadata_version=version)
        metadata, back = read_et(path)
    assert metadata["version"] == version
    assert back == nodes


def test_inferred_attribute_kinds(tmp_path):
    attrs = {"b": True, "i": -3, "u": 1 << 63, "d": 0.5, "s": "x", "y": b"\x00",
             "bl": [True, False], "il": [1, 2], "ul": [1 << 63], "dl": [1, 0.5], "sl": ["a"]}
    write_et(tmp_path / "a.0.et", [{"id": 1, "type": 4, "attrs": attrs}])
    node = read_et(tmp_path / "a.0.et")[1][0]
    assert node["attrs"] == attrs
    assert node["attr_types"] == {"b": "bool_val", "i": "int64_val", "u": "uint64_val",
                                  "d": "double_val", "s": "string_val", "y": "bytes_val",
                                  "bl": "bool_list", "il": "int64_list", "ul": "uint64_list",
                                  "dl": "double_list", "sl": "string_list"}


def test_unpacked_repeated_fields_are_read(tmp_path):
    # ctrl_deps / data_deps one varint per element (proto2 style), and an unpacked int list:
    # Node{id 9, type 4, ctrl_deps 1, data_deps 2, 3, attr{name "l", int64_list{4, 5}}}
    attr = b"\x0a\x01l" + b"\x52\x04\x08\x04\x08\x05"
    node = b"\x08\x09\x18\x04\x20\x01\x28\x02\x28\x03" + b"\x52" + varint(len(attr)) + attr
    meta = b"\x0a\x050.0.4"
    (tmp_path / "u.0.et").write_bytes(varint(len(meta)) + meta + varint(len(node)) + node)
    _, (back,) = read_et(tmp_path / "u.0.et")
    assert back["ctrl_deps"] == [1] and back["data_deps"] == [2, 3]
    assert back["attrs"] == {"l": [4, 5]} and back["type"] == "COMP_NODE"


def test_attributes_without_a_value_are_absent(tmp_path):
    # symbolic_tensor_graph writes attributes whose oneof is unset
    attr = b"\x0a\x06inputs"
    node = b"\x08\x01\x18\x04\x52" + varint(len(attr)) + attr
    (tmp_path / "a.0.et").write_bytes(b"\x00" + varint(len(node)) + node)
    _, (back,) = read_et(tmp_path / "a.0.et")
    assert back["attrs"] == {} and back["attr_types"] == {}


def test_write_et_rejects_unencodable_nodes(tmp_path):
    with pytest.raises(ConfigError, match="node #0"):
        write_et(tmp_path / "x.0.et", [{"id": 1, "type": "NO_SUCH_NODE"}])
    with pytest.raises(ConfigError, match="does not fit int32"):
        write_et(tmp_path / "x.0.et", [{"id": 1, "attrs": {"a": 1 << 40},
                                        "attr_types": {"a": "int32_val"}}])
    with pytest.raises(ConfigError, match="no Chakra type"):
        write_et(tmp_path / "x.0.et", [{"id": 1, "attrs": {"a": None}}])
    assert not (tmp_path / "x.0.et").exists()


# ------------------------------------------------------------------------ ASTRA-sim examples

@needs_examples
@pytest.mark.parametrize("collective", sorted(COLLECTIVE_OF))
@pytest.mark.parametrize("npus", [4, 8, 16])
def test_microbenchmarks(collective, npus):
    folder = MICRO / collective / f"{npus}npus_1MB"
    for source in (folder, folder / collective):        # a folder or the path prefix
        workload = load_chakra(source)
        assert len(workload.programs) == npus and workload.name == collective
        for rank, program in enumerate(workload.programs):
            assert program.npus.tolist() == [rank]
            (op,) = program.ops
            assert (op.kind, op.collective, op.size) == ("collective", collective, 1 << 20)
            assert op.dims is None and op.group == () and op.deps == ()
        metadata, (node,) = read_et(folder / f"{collective}.0.et")
        assert metadata["version"] == "0.0.4" and node["type"] == "COMM_COLL_NODE"
        assert node["attrs"]["comm_type"] == COLLECTIVE_OF[collective]


@needs_examples
def test_custom_ring_all_reduce():
    system = json.loads((CUSTOM / "custom_collective.json").read_text())
    (configured,) = system["all-reduce-implementation-custom"]
    prefix = CUSTOM / Path(configured).parent.name / Path(configured).name
    ranks = read_custom_collective(prefix)
    assert len(ranks) == 8
    for rank, ops in enumerate(ranks):
        sends = [op for op in ops if op.kind == "send"]
        recvs = [op for op in ops if op.kind == "recv"]
        reductions = [op for op in ops if op.kind == "compute"]
        assert len(sends) == len(recvs) == 2 * (8 - 1) and len(reductions) == 8 - 1
        assert {op.peer for op in sends} == {(rank + 1) % 8}
        assert {op.peer for op in recvs} == {(rank - 1) % 8}
        assert {op.size for op in sends + recvs} == {(1 << 20) // 8}   # fixed bytes: N / p
        assert {op.duration_ns for op in reductions} == {7000.0}       # 7 us as traced
        by_id = {op.id: op for op in ops}
        chain = [op for op in ops if not op.deps]
        assert [op.kind for op in chain] == ["send"]                   # one chain per rank
        assert all(len(op.deps) == 1 and op.deps[0] in by_id for op in ops if op.deps)
    # the same files are a plain send/recv workload too
    workload = load_chakra(prefix.parent)
    assert [len(p.ops) for p in workload.programs] == [35] * 8
    assert len(load_chakra(prefix.parent / "custom_allreduce.5.et").programs) == 8


# ---------------------------------------------------------------------- corrupt and bad files

@needs_examples
def test_truncated_file(tmp_path):
    raw = (MICRO / "all_reduce" / "8npus_1MB" / "all_reduce.3.et").read_bytes()
    bad = tmp_path / "t.0.et"
    bad.write_bytes(raw[:-1])
    with pytest.raises(ConfigError, match=r"t\.0\.et: corrupt .* byte 8 \(node #0\)"):
        read_et(bad)
    bad.write_bytes(raw[:5])
    with pytest.raises(ConfigError, match=r"t\.0\.et.*byte 0 \(GlobalMetadata\)"):
        load_chakra(tmp_path / "t")
    bad.write_bytes(b"")
    with pytest.raises(ConfigError, match="t.0.et: empty file"):
        read_et(bad)


@needs_examples
@pytest.mark.parametrize("old, new, problem", [
    (b"\x18\x07", b"\x18\x0c", "unknown node type 12"),          # Node.type = 12
    (b"\x12\x14", b"\x15\x14", "not a valid Node message"),       # Node.name as fixed32
    (b"\x48\x80\x80\x40", b"\x48\xff\xff\xff", "not a valid Node message"),  # varint cut
])
def test_corrupted_byte(tmp_path, old, new, problem):
    raw = (MICRO / "all_reduce" / "8npus_1MB" / "all_reduce.3.et").read_bytes()
    assert raw.count(old) == 1
    bad = tmp_path / "c.0.et"
    bad.write_bytes(raw.replace(old, new))
    with pytest.raises(ConfigError, match=rf"c\.0\.et: corrupt .*node #0\): .*{problem}"):
        read_et(bad)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        read_et(tmp_path / "nothing.0.et")
    with pytest.raises(ConfigError, match="no Chakra trace files"):
        load_chakra(tmp_path)
    with pytest.raises(ConfigError, match=r"no Chakra trace files 'w\.<rank>\.et'"):
        load_chakra(tmp_path / "w")


def test_missing_and_extra_rank_files(tmp_path):
    write_ranks(tmp_path / "w", [[coll(0)], [coll(0)], [coll(0)]])
    (tmp_path / "w.1.et").unlink()
    with pytest.raises(ConfigError, match=r"missing trace file\(s\) for rank\(s\) 1 "):
        load_chakra(tmp_path / "w")
    write_et(tmp_path / "w.1.et", [coll(0)])
    with pytest.raises(ConfigError, match="3 ranks, but the network has 5 NPUs"):
        load_chakra(tmp_path / "w", npus=5)
    with pytest.raises(ConfigError, match="3 ranks, but the network has 2 NPUs"):
        load_chakra(tmp_path / "w", npus=2)
    write_et(tmp_path / "v.0.et", [coll(0)])
    with pytest.raises(ConfigError, match=r"several workloads \(v, w\)"):
        load_chakra(tmp_path)
    assert len(load_chakra(tmp_path / "w", npus=3).programs) == 3


def test_missing_dependency_and_cycle(tmp_path):
    write_ranks(tmp_path / "d", [[comp(1), comp(2, deps=[7])]])
    with pytest.raises(ConfigError, match=r"d\.0\.et: node 2 \(c2\) depends on node 7"):
        load_chakra(tmp_path / "d")
    write_ranks(tmp_path / "d", [[comp(1, ctrl=[3]), comp(2, deps=[1]), comp(3, deps=[2])]])
    with pytest.raises(ConfigError, match=r"d\.0\.et: dependency cycle among nodes 1, 2, 3"):
        load_chakra(tmp_path / "d")


def test_communicator_groups(tmp_path):
    prefix = tmp_path / "g"
    write_ranks(prefix, [[coll(0, pg_name="1")], [coll(0, pg_name="1")],
                         [coll(0, pg_name="2")], [coll(0, pg_name="0")]])
    groups = {"1": [0, 1], "2": [2, 3]}
    workload = load_chakra(prefix, comm_group=groups)
    assert [p.ops[0].group for p in workload.programs] == [(0, 1), (0, 1), (2, 3), ()]
    (tmp_path / "groups.json").write_text(json.dumps({"01": [0, 1], "2": [2, 3]}))
    workload = load_chakra(prefix, comm_group=tmp_path / "groups.json")
    assert workload.programs[0].ops[0].group == (0, 1)
    with pytest.raises(ConfigError, match=r"g\.0\.et: node 0 .*pg_name='1' .*no communicator"):
        load_chakra(prefix)
    (tmp_path / "groups.json").write_text(json.dumps({"2": [2, 3]}))
    with pytest.raises(ConfigError, match=r"g\.0\.et: node 0 \(n0\).*pg_name='1' is not in "
                                          r".*groups\.json"):
        load_chakra(prefix, comm_group=tmp_path / "groups.json")
    (tmp_path / "groups.json").write_text(json.dumps({"1": [0, 1], "2": [2, 4]}))
    with pytest.raises(ConfigError, match=r"groups\.json: communicator '2': rank\(s\) 4 "
                                          r"outside the network's NPUs 0\.\.3"):
        load_chakra(prefix, comm_group=tmp_path / "groups.json")
    with pytest.raises(ConfigError, match="does not include it"):
        load_chakra(prefix, comm_group={"1": [1, 2], "2": [2, 3]})
    with pytest.raises(ConfigError, match="distinct NPU ids"):
        load_chakra(prefix, comm_group={"1": [0, 0], "2": [2, 3]})


@pytest.mark.parametrize("node, problem", [
    (coll(0, comm_type=3), "comm_type GATHER is not supported"),
    (coll(0, comm_type=42), "comm_type value 42 is not supported"),
    (coll(0, involved_dim=[1, 2]), "expected a bool list"),
    (coll(0, is_cpu_op=2), "'is_cpu_op': expected a bool"),
    ({"id": 0, "type": "COMM_COLL_NODE", "attrs": {"comm_type": 0}}, "missing attribute "
                                                                      "'comm_size'"),
    ({"id": 0, "type": "COMM_SEND_NODE", "attrs": {"comm_size": 8, "comm_dst": 9,
                                                   "comm_tag": 0}}, "comm_dst 9 is outside"),
    ({"id": 0, "type": "COMM_SEND_NODE", "attrs": {"comm_size": 8, "comm_src": 1,
                                                   "comm_dst": 1, "comm_tag": 0}},
     "send issued by rank 0 has comm_src 1"),
    ({"id": 0, "type": "COMM_RECV_NODE", "attrs": {"comm_size": 8, "comm_src": 1}},
     "missing attribute 'comm_tag'"),
    ({"id": 0, "type": "MEM_LOAD_NODE", "attrs": {"tensor_size": -1}}, "number >= 0"),
    ({"id": 0, "type": "MEM_LOAD_NODE", "attrs": {"tensor_size": 1.5}}, "whole number"),
])
def test_bad_nodes(tmp_path, node, problem):
    write_ranks(tmp_path / "b", [[node], []])
    with pytest.raises(ConfigError, match=rf"b\.0\.et: node 0 .*{problem}"):
        load_chakra(tmp_path / "b")


def test_node_mapping(tmp_path):
    nodes = [
        {"id": 0, "type": "METADATA_NODE"},
        comp(1, micros=3, deps=[0], num_ops=2e9, tensor_size=4096),
        comp(2, micros=0, ctrl=[1]),
        comp(3, micros=0, num_ops=10, tensor_size=10),
        {"id": 4, "type": "MEM_LOAD_NODE", "attrs": {"tensor_size": 64}},
        {"id": 5, "type": "MEM_STORE_NODE", "attrs": {"tensor_size": 32, "tensor_loc": 1}},
        coll(6, comm_type=7, size=100, involved_dim=[True, False, True], deps=[1]),
        {"id": 7, "type": "COMM_SEND_NODE", "attrs": {"comm_size": 8, "comm_dst": 1,
                                                      "comm_tag": 5}},
        {"id": 8, "type": "COMM_RECV_NODE", "attrs": {"comm_size": 8, "comm_src": 1,
                                                      "comm_tag": 6}},
        {"id": 9, "type": "INVALID_NODE"},
    ]
    write_ranks(tmp_path / "m", [nodes, []])
    ops = {op.id: op for op in load_chakra(tmp_path / "m").programs[0].ops}
    assert (ops[0].kind, ops[0].duration_ns, ops[9].duration_ns) == ("compute", 0.0, 0.0)
    assert (ops[1].duration_ns, ops[1].flops, ops[1].mem_bytes, ops[1].deps) == (
        3000.0, 2e9, 4096.0, (0,))
    assert (ops[2].duration_ns, ops[2].ctrl_deps) == (1.0, (1,))   # ASTRA-sim's 1 ns floor
    assert ops[3].duration_ns == 0.0                                  # left to the roofline
    assert (ops[4].kind, ops[4].size, ops[4].remote) == ("memory", 64, True)
    assert (ops[5].kind, ops[5].size, ops[5].remote) == ("memory", 32, False)
    assert (ops[6].collective, ops[6].size, ops[6].dims) == ("reduce_scatter", 100, (0, 2))
    # on a 2-D network ASTRA-sim ignores involved_dim entries beyond dimension 1
    ops_2d = {op.id: op for op in load_chakra(tmp_path / "m", ndims=2).programs[0].ops}
    assert ops_2d[6].dims == (0,)
    assert (ops[7].kind, ops[7].peer, ops[7].tag, ops[7].size) == ("send", 1, 5, 8)
    assert (ops[8].kind, ops[8].peer, ops[8].tag) == ("recv", 1, 6)


# ------------------------------------------------------------------------------------ export

def _expanded(workload: Workload, npus: int) -> list[list[tuple]]:
    """Per NPU, what a Chakra trace can say about each op (peers made absolute)."""
    out: list[list[tuple]] = [[] for _ in range(npus)]
    for program in workload.programs:
        for npu in program.npus.tolist():
            for op in sorted(program.ops, key=lambda o: o.id):
                peer = op.peer if op.peer is not None else (
                    None if op.peer_offset is None else npu + op.peer_offset)
                out[npu].append((op.id, op.kind, op.name, op.duration_ns, op.flops,
                                 op.mem_bytes, op.collective, op.size, op.dims, op.group, peer,
                                 op.tag, op.remote, op.deps, op.ctrl_deps, op.gap_ns,
                                 op.update_delay_ns, op.priority, op.layer, op.pass_))
    return out


def _sample_workload() -> Workload:
    ops = [
        Op(0, "compute", "fwd0", duration_ns=1500.5, layer=0, pass_="fwd"),
        Op(1, "compute", "roof", flops=3e9, mem_bytes=1e6, deps=(0,), layer=1, pass_="fwd"),
        Op(2, "collective", "ar", collective="all_reduce", size=1 << 20, dims=(1,), deps=(1,),
           priority="highest", update_delay_ns=12.0, layer=1, pass_="wg"),
        Op(3, "collective", "ag", collective="all_gather", size=4096, deps=(2,), gap_ns=1.0),
        Op(4, "send", "to_next", peer_offset=1, size=256, tag=7, deps=(3,)),
        Op(5, "recv", "from_next", peer_offset=1, size=256, tag=8, ctrl_deps=(3,)),
        Op(6, "memory", "load", size=64, remote=True, duration_ns=20.0),
        Op(7, "compute", "tick", duration_ns=0.0, ctrl_deps=(6,)),
        Op(8, "compute", "us", duration_ns=4000.0),
    ]
    first = spmd(ops, 2, layers=["embed", "mlp"]).programs[0]
    tail = [Op(0, "collective", "grp", collective="reduce_scatter", size=512, group=(2, 3)),
            Op(1, "recv", "from_prev", peer=1, size=256, tag=7, deps=(0,)),
            Op(2, "send", "to_prev", peer=1, size=256, tag=8, deps=(0,)),
            Op(3, "collective", "bc", collective="broadcast", size=8, group=(3, 2))]
    return Workload([first, Program(tail[:2] + tail[3:], np.array([2]), "p2"),
                     Program(tail[:1] + tail[2:], np.array([3]), "p3")],
                    ["embed", "mlp"], "sample")


def test_save_and_load_give_the_same_graph(tmp_path):
    workload = _sample_workload()
    written = save_chakra(workload, tmp_path / "out" / "sample", 5, ndims=2)
    assert [p.name for p in written] == [f"sample.{r}.et" for r in range(5)] + [
        "sample.comm_group.json"]
    assert json.loads(written[-1].read_text()) == {"1": [2, 3], "2": [3, 2]}
    back = load_chakra(tmp_path / "out" / "sample")
    assert back.layers == ["embed", "mlp"] and back.name == "sample"
    assert _expanded(back, 5) == _expanded(workload, 5)
    assert back.programs[4].ops == []
    # what ASTRA-sim reads: whole microseconds, involved_dim, pg_name, absolute ranks
    _, nodes = read_et(tmp_path / "out" / "sample.1.et")
    by_name = {n["name"]: n for n in nodes}
    assert by_name["fwd0"]["duration_micros"] == 2 and by_name["us"]["duration_micros"] == 4
    assert by_name["ar"]["attrs"]["involved_dim"] == [False, True]
    assert by_name["to_next"]["attrs"]["comm_dst"] == 2
    assert by_name["from_next"]["attrs"]["comm_src"] == 2
    # a smaller export removes the stale files of the larger one
    save_chakra(spmd([Op(0, "compute", duration_ns=1000.0)], 2), tmp_path / "out" / "sample", 2)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sample.0.et",
                                                                   "sample.1.et"]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_random_dags_round_trip(data):
    npus = data.draw(st.integers(1, 4))
    count = data.draw(st.integers(1, 8))
    ops = []
    for i in range(count):
        deps = tuple(sorted(data.draw(st.sets(st.integers(0, i - 1), max_size=2)))) if i else ()
        kind = data.draw(st.sampled_from(["compute", "collective", "memory"]))
        ops.append(Op(i, kind, f"op{i}", deps=deps,
                      duration_ns=0.0 if kind == "collective" else data.draw(
                          st.sampled_from([0.0, 1000.0, 2.5])),
                      collective="all_to_all" if kind == "collective" else "",
                      size=data.draw(st.integers(0, 1 << 40)) if kind != "compute" else 0,
                      remote=kind == "memory" and data.draw(st.booleans())))
    workload = spmd(ops, npus)
    with tempfile.TemporaryDirectory() as folder:
        save_chakra(workload, Path(folder) / "r", npus)
        assert _expanded(load_chakra(Path(folder) / "r"), npus) == _expanded(workload, npus)


@pytest.mark.parametrize("ops, npus, kwargs, problem", [
    ([Op(0, "collective", collective="all_reduce", dims=(2,))], 2, {"ndims": 2},
     "need ndims covering them"),
    ([Op(0, "collective", collective="all_reduce", dims=(0,))], 2, {}, "argument 'ndims'"),
    ([Op(0, "collective", collective="send_recv")], 2, {}, "has no Chakra comm_type"),
    ([Op(0, "send", peer_offset=1)], 2, {}, "peer 2 of NPU 1 is outside 0..1"),
    ([Op(0, "recv")], 2, {}, "without peer"),
    ([Op(-1, "compute")], 2, {}, "unsigned"),
    ([Op(0, "compute", deps=(3,))], 2, {}, "depends on node 3"),
    ([Op(0, "compute")], 0, {}, "argument 'npus'"),
])
def test_bad_exports(tmp_path, ops, npus, kwargs, problem):
    with pytest.raises(ConfigError, match=problem):
        save_chakra(spmd(ops, 2), tmp_path / "x", npus, **kwargs)


def test_export_rejects_overlapping_programs(tmp_path):
    workload = Workload([Program([Op(0, "compute")], np.array([0, 1]), "a"),
                         Program([Op(0, "compute")], np.array([1]), "b")])
    with pytest.raises(ConfigError, match="b: NPU 1 already runs a"):
        save_chakra(workload, tmp_path / "x", 2)
    with pytest.raises(ConfigError, match="NPU 1 is outside 0..0"):
        save_chakra(workload, tmp_path / "x", 1)


def test_duration_units_are_microseconds(tmp_path):
    write_ranks(tmp_path / "u", [[comp(0, micros=1)]])
    (op,) = load_chakra(tmp_path / "u").programs[0].ops
    assert op.duration_ns == 1000.0 and math.isclose(op.duration_ns * 1e-9, 1e-6)


# ------------------------------------------------------------------------- with the engine

@needs_examples
@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_microbenchmark_trace_times_like_the_collective(model):
    import flowsim
    from flowsim import simulate

    network = EXAMPLES / "configs" / "Ring_8npus.yml"
    system = EXAMPLES / "configs" / "Ring_4chunks.json"
    trace = MICRO / "all_reduce" / "8npus_1MB" / "all_reduce"
    alone = flowsim.simulate_collective(network, "all_reduce", 1048576, system, model=model)
    in_workload = simulate(network, trace, system, model=model)
    assert float(in_workload.time_ns) == pytest.approx(float(alone.time_ns), rel=1e-12)
    # ASTRA-sim 2.x ran this trace's collective on this config: 64440 ns (validation cases.csv,
    # a_ring8__cu__all_reduce__ring__1MiB__ex); flowsim keeps fractional ns
    assert float(in_workload.time_ns) == pytest.approx(64440, rel=1e-3)


def test_a_trace_of_host_ops_only_says_the_network_plays_no_part(tmp_path):
    """A PyTorch job traced without GPUs (gloo on CPUs) converts to CPU ops only: it runs as
    host time, with a warning; one GPU op or one collective beside them silences it."""
    host = [Op(0, "compute", "aten::mm", duration_ns=3000.0),
            Op(1, "compute", "gloo:all_reduce", duration_ns=5000.0, deps=(0,))]
    for op in host:
        op.host = True
    save_chakra(spmd(host, 2), tmp_path / "cpu" / "t", 2)
    with pytest.warns(FlowsimWarning, match="every node is a host CPU op .* the network "
                                            "plays no part"):
        load_chakra(tmp_path / "cpu" / "t")
    gpu = [*host, Op(2, "compute", "gemm", duration_ns=1000.0, deps=(1,))]
    save_chakra(spmd(gpu, 2), tmp_path / "gpu" / "t", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlowsimWarning)
        load_chakra(tmp_path / "gpu" / "t")


def test_a_trace_with_no_work_prints_strict_json(tmp_path, capsys):
    # chakra_generator's one_metadata_node_all_types: nothing to time, so the shares are
    # undefined; --json writes them as null (RFC 8259 has no NaN), and the run's time as 0
    for rank in range(8):
        write_et(tmp_path / f"meta.{rank}.et", [{"id": 0, "type": "METADATA_NODE",
                                                 "name": "METADATA_NODE"}])
    assert main(["run", "--workload", str(tmp_path / "meta"), "--network", "ring8",
                 "--json"]) == 0
    out = capsys.readouterr().out

    def refuse(constant):
        raise AssertionError(f"not JSON: {constant}")

    summary = json.loads(out, parse_constant=refuse)
    assert summary["time_ns"] == 0 and summary["compute_share"] is None
