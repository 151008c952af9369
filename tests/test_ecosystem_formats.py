"""The dialects of the ecosystem's tools: symbolic_tensor_graph's units, chakra_generator's
nodes, SimAI / aicb text headers and expert-parallel groups, ASTRA-sim 1.0 algorithm lists on
split dimensions, custom collective implementations and ASTRA-sim's command-line flags."""

from __future__ import annotations

import json
import math

import pytest

import flowsim
from conftest import VALIDATION, pure, ring
from flowsim import ConfigError, FlowsimWarning, simulate
from flowsim.cli import main
from flowsim.workload.astra_text import parse_astra_text
from flowsim.workload.chakra import load_chakra, write_et
from flowsim.workload.chakra_format import read_et
from flowsim.workload.load import load_workload

REAL = VALIDATION / "real_inputs"
EXAMPLES = VALIDATION / "astra_sim" / "examples"
ASTRA1 = VALIDATION / "astra_sim_1" / "configs"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real inputs not found at {REAL}")


# ---------------------------------------------------------------- symbolic_tensor_graph

@needs_real
@pytest.mark.parametrize("element_bytes", [None, 4])
def test_stg_counts_macs_and_elements(element_bytes):
    prefix = REAL / "stg" / "dp2tp2pp2" / "workload"
    _, nodes = read_et(f"{prefix}.0.et")
    work = load_chakra(prefix, element_bytes=element_bytes)    # workload.json found beside
    ops = {op.id: op for op in work.programs[0].ops}
    size = element_bytes or 2
    for node in nodes:
        op, attrs = ops[node["id"]], node["attrs"]
        if node["type"] == "COMP_NODE":
            inputs = sum(float(v) for v in attrs["inputs"][1::2])
            assert op.flops == 2 * attrs["num_ops"]                       # 2 FLOPs a MAC
            assert op.mem_bytes == size * (attrs["tensor_size"] + inputs)
            assert op.duration_ns == 0.0                                  # the roofline's
        elif node["type"] == "COMM_COLL_NODE":
            assert op.size == size * attrs["comm_size"]                   # elements
            assert op.group == {"5": (0, 2), "1": (0, 1)}[attrs["pg_name"]]


def test_element_bytes_apply_to_element_counts_only(tmp_path):
    write_et(tmp_path / "b.0.et", [{"id": 1, "type": "COMP_NODE", "duration_micros": 1}])
    with pytest.raises(ConfigError, match="'element_bytes' applies to traces whose sizes count "
                                          "elements"):
        load_chakra(tmp_path / "b", element_bytes=2)
    with pytest.raises(ConfigError, match="argument 'element_bytes': expected an integer"):
        load_chakra(tmp_path / "b", element_bytes=0)
    with pytest.raises(ConfigError, match="argument 'element_bytes': applies to Chakra"):
        load_workload("resnet50_dp", flowsim.load_network(ring(8)), element_bytes=2)


@needs_real
def test_every_real_trace_decodes_identically_twice():
    for path in sorted(REAL.rglob("*.et")):
        assert read_et(path) == read_et(path)
        metadata, nodes = read_et(path)
        assert nodes and all(n["type"] != "INVALID_NODE" for n in nodes)


# ------------------------------------------------------------------------ chakra_generator

@needs_real
def test_generator_barrier_is_a_zero_byte_all_reduce():
    network = REAL / "networks" / "ring_8.yml"
    barrier = simulate(network, REAL / "chakra_generator" / "BARRIER", pure())
    zero = flowsim.workload.Op(0, "collective", collective="all_reduce", size=0)
    alone = simulate(network, flowsim.workload.spmd([zero], 8), pure())
    assert float(barrier.time_ns) == float(alone.time_ns) > 0
    # a barrier's time is latency only: 2 (p - 1) ring steps of 500 ns
    assert float(barrier.time_ns) == 2 * 7 * 500
    assert float(barrier.dim_bytes.sum()) == 0


def test_send_and_recv_take_their_size_from_tensor_size(tmp_path):
    write_et(tmp_path / "p.0.et", [{"id": 1, "type": "COMM_SEND_NODE", "attrs": {
        "tensor_size": 1024, "comm_dst": 1, "comm_tag": 3}}])
    write_et(tmp_path / "p.1.et", [{"id": 1, "type": "COMM_RECV_NODE", "attrs": {
        "tensor_size": 1024, "comm_src": 0, "comm_tag": 3}}])
    send, recv = (p.ops[0] for p in load_chakra(tmp_path / "p").programs)
    assert (send.size, send.peer, recv.size, recv.peer) == (1024, 1, 1024, 0)


# ------------------------------------------------------------------------ SimAI / aicb text

SIMAI = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 2 pp: 1 vpp: 8 "
         "ga: 1 all_gpus: 16 checkpoints: 0 checkpoint_initiates: 0 pp_comm 0\n2\n"
         "moe -1 100 ALLTOALL_EP 4096 100 ALLGATHER 4096 100 ALLGATHER_DP_EP 4096 10\n"
         "attn -1 100 ALLREDUCE 4096 100 NONE 0 100 REDUCESCATTER_DP_EP 4096 10\n")


def test_simai_header_keys_in_any_order():
    text = parse_astra_text(SIMAI, "s.txt")
    assert (text.model_parallel_group, text.expert_parallel_group, text.all_gpus) == (2, 2, 16)
    moved = SIMAI.replace("model_parallel_NPU_group: 2 ep: 2", "ep: 2 model_parallel_NPU_group: 2")
    assert parse_astra_text(moved, "s.txt") == text
    layer = text.layers[0]
    assert (layer.fwd_type, layer.fwd_group, layer.wg_type, layer.wg_group) == (
        "all_to_all", "EP", "all_gather", "DP_EP")


def test_expert_parallel_groups_are_split_dimensions():
    # ring of 16, TP 2, ep 2: logical dimensions [2 (TP), 2 (EP), 4 (DP_EP)]
    work = load_workload(parse_astra_text(SIMAI, "s.txt"), flowsim.load_network(ring(16)))
    assert work.network.npus_count == (2, 2, 4)
    dims = {op.name: op.dims for op in work.programs[0].ops if op.kind == "collective"}
    assert dims == {"moe.fwd.all_to_all": (1,), "moe.ig.all_gather": (0,),
                    "moe.wg.all_gather": (2,), "attn.fwd.all_reduce": (0,),
                    "attn.wg.reduce_scatter": (2,)}
    assert float(simulate(ring(16), parse_astra_text(SIMAI, "s.txt"), pure()).time_ns) > 0


@pytest.mark.parametrize("header, body, problem", [
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 tp: 2", "", "unknown HYBRID_TRANSFORMER "
                                                                 "header key 'tp:'"),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 0", "", "ep must be in 1.."),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep:", "", "'ep' needs a value"),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 2 ep: 2", "", "appears twice"),
    ("DATA", "ALLREDUCE_EP", "only HYBRID_TRANSFORMER"),
    ("DATA", "ALLREDUCE_TP", "wg comm type must be one of ALLREDUCE, ALLREDUCE_EP"),
])
def test_bad_simai_headers_and_types_are_one_line(header, body, problem):
    line = f"L0 -1 1 NONE 0 1 NONE 0 1 {body or 'NONE'} 8 0"
    with pytest.raises(ConfigError, match=problem):
        parse_astra_text(f"{header}\n1\n{line}\n", "s.txt")


def test_broadcast_is_no_communication_with_a_warning():
    text = "DATA\n2\nL0 -1 5 BROADCAST 64 1 NONE 0 1 NONE 0 0\nL1 -1 5 NONE 0 1 NONE 0 1 NONE 0 0\n"
    with pytest.warns(FlowsimWarning, match=r"s\.txt: 1 BROADCAST column\(s\) \(line 3\) run no "
                                            r"communication"):
        parsed = parse_astra_text(text, "s.txt")
    assert parsed.layers[0].fwd_type is None


def test_pipeline_keys_and_job_size_are_named():
    text = SIMAI.replace("pp: 1", "pp: 4")
    with pytest.warns(FlowsimWarning, match=r"s\.txt:1: key 'pp' = 4 is not modelled"):
        parsed = parse_astra_text(text, "s.txt")
    with pytest.warns(FlowsimWarning, match="written for all_gpus: 16, run on the network's 32"):
        load_workload(parsed, flowsim.load_network(ring(32)))


# ------------------------------------------------------- ASTRA-sim 1.0 on split dimensions

@pytest.mark.skipif(not ASTRA1.is_dir(), reason="ASTRA-sim 1.0 configs not found")
def test_physical_algorithm_lists_serve_split_dimensions(tmp_path):
    # TP 4 on Ring 2 x Ring 4 splits dimension 1 into 2 x 2; the system file lists two
    # algorithms (one per physical dimension), as ASTRA-sim 1.0 accepts
    text = ("HYBRID_TRANSFORMER model_parallel_NPU_group: 4\n1\n"
            "L0 -1 10 ALLREDUCE 80000 10 ALLREDUCE 80000 10 ALLREDUCE 80000 5\n")
    (tmp_path / "w.txt").write_text(text)
    system = (ASTRA1 / "system" / "hand_ring2d_sys.txt").read_text()
    assert "ring_ring\n" in system
    (tmp_path / "three.txt").write_text(system.replace("ring_ring\n", "ring_ring_ring\n"))
    network = ASTRA1 / "network" / "ring2x4_hand.json"
    physical = simulate(network, tmp_path / "w.txt", ASTRA1 / "system" / "hand_ring2d_sys.txt")
    logical = simulate(network, tmp_path / "w.txt", tmp_path / "three.txt")
    assert float(physical.time_ns) == float(logical.time_ns) > 0


# ------------------------------------------------------------------- custom collectives

@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="ASTRA-sim examples not found")
def test_flowsim_collective_runs_a_custom_implementation(tmp_path):
    prefix = EXAMPLES / "custom_collectives" / "custom_ring_allreduce_8npus_1MB" / \
        "custom_allreduce"
    system = {"preferred-dataset-splits": 1, "local-mem-bw": 50,
              "all-reduce-implementation-custom": [str(prefix)]}
    network = EXAMPLES / "configs" / "Ring_8npus.yml"
    with pytest.warns(FlowsimWarning, match="move the bytes written in them"):
        custom = flowsim.simulate_collective(network, "all_reduce", 1 << 20, system)
    native = flowsim.simulate_collective(network, "all_reduce", 1 << 20,
                                         {k: v for k, v in system.items() if "custom" not in k})
    assert str(custom.algorithm.values[0]) == "custom:custom_allreduce"
    assert float(custom.time_ns) != float(native.time_ns)          # not the native ring
    # the same traces as a workload's collective
    op = flowsim.workload.Op(0, "collective", collective="all_reduce", size=1 << 20)
    in_workload = simulate(network, flowsim.workload.spmd([op], 8), system)
    assert float(custom.time_ns) == pytest.approx(float(in_workload.time_ns))
    with pytest.raises(ConfigError, match="custom implementation runs over all NPUs or a group"):
        flowsim.simulate_collective(network, "all_reduce", 1 << 20, system, dims=[0])


# ------------------------------------------------------------ ASTRA-sim's command line

@needs_real
def test_astra_sim_flags_are_aliases(capsys):
    net = REAL / "networks" / "ring_8.yml"
    work = REAL / "simai" / "microAllReduce.txt"
    assert main(["run", "--network", str(net), "--workload", str(work), "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert main(["run", f"--network-configuration={net}", f"--workload-configuration={work}",
                 "--num-passes=1", "--comm-group-configuration=empty", "--json",
                 "--logging-folder=log"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["time_ns"] == ours["time_ns"] and math.isfinite(ours["time_ns"])
    assert "flowsim: warning: argument --logging-folder ignored" in err


@pytest.mark.parametrize("flag, problem", [
    ("--injection-scale=2", "argument --injection-scale=2: not modelled by flowsim"),
    ("--rendezvous-protocol=true", "argument --rendezvous-protocol=true: not modelled"),
    ("--logical-topology-configuration=l.json", "from the network config"),
])
def test_astra_sim_flags_flowsim_does_not_model_are_one_line(flag, problem, capsys):
    assert main(["run", flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err


# ------------------------------------------------------------------------ JSON the tools write
@pytest.mark.parametrize("text, says", [
    ('{"workload_graph": [{"Id": 1, "Name": "a", "NodeType": 4, "data_deps": []}]}',
     r"Chakra's JSON rendering of a trace .* give the \.et files it was made from"),
    ('{\n  "schema": "1.0.2-chakra.0.0.4", "pid": 1,\n  "nodes": []}',
     r"a PyTorch execution trace \(host side\): link it .* chakra_converter"),
    ('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096}',
     r"a Hugging Face model config .* 'generator: huggingface'"),
    ('{"something": "else"}', r"unknown workload format \(expected \.txt, \.yml/\.yaml or "
                              r"Chakra \.et files\)$")])
def test_json_workloads_of_the_tools_are_named_in_the_refusal(tmp_path, text, says):
    """Two JSON files users of the Chakra tools hold are not workloads flowsim reads; the
    refusal says which one it is and what to give instead."""
    path = tmp_path / "trace.json"
    path.write_text(text)
    net = flowsim.load_network({"topology": ["Switch"], "npus_count": [8],
                                "bandwidth": [50], "latency": [500]})
    with pytest.raises(flowsim.ConfigError, match=says):
        load_workload(str(path), net, 1)


def test_a_bundled_model_given_as_the_workload_says_how_to_run_it():
    net = flowsim.load_network({"topology": ["Switch"], "npus_count": [8],
                                "bandwidth": [50], "latency": [500]})
    with pytest.raises(flowsim.ConfigError, match=r"llama3_8b: workload not found .* "
                                                  r"llama3_8b is a bundled model config: "
                                                  r"give it as 'config' of a spec"):
        load_workload("llama3_8b", net, 1)
