"""Activation offloading to host memory (``cpu_offload_layers``): Transformer Engine's default
schedule, checked by the copies' bytes and order, the memory it frees, timing bounds with a
slow and a fast host link, and what it refuses; the importers that read it."""

from __future__ import annotations

from dataclasses import replace

import pytest

import flowsim
from flowsim.compute import DEVICES, DeviceModel
from flowsim.errors import ConfigError
from flowsim.workload.generators import transformer
from flowsim.workload.graph import topological_order
from flowsim.workload.kernels import HostCopy

NODE = {"topology": ["Switch"], "npus_count": [8], "bandwidth": [300], "latency": [500]}
L = 6
SMALL = dict(layers=L, hidden=1024, ffn=4096, heads=16, sequence=1024, micro_batch=1,
             vocab=0, tp=1, dp=8, global_batch=16, distributed_optimizer=True,
             overlap_grad_reduce=True, overlap_param_gather=True, device="gb200")


@pytest.fixture(scope="module")
def node():
    return flowsim.load_network(NODE)


def _copies(program):
    return [op for op in program.ops if op.host]


def test_the_first_n_layers_are_copied_out_and_back_once_per_micro_batch(node):
    """Per micro-batch: layers 0..N-1 each copied to the host in the forward and back in the
    backward, the same bytes both ways (bytes sent = bytes received), on the host resource;
    each layer's backward waits for its copy back."""
    n, m = 3, 2
    w = transformer(node, **SMALL, cpu_offload_layers=n)
    (program,) = w.programs
    copies = _copies(program)
    out = [op for op in copies if op.name.endswith(".offload")]
    back = [op for op in copies if op.name.endswith(".reload")]
    assert len(out) == len(back) == n * m
    assert sorted(op.layer for op in out) == sorted(op.layer for op in back) == \
        sorted(list(range(n)) * m)
    for a in out:   # same layer, same micro-batch: same bytes
        twin = next(b for b in back if b.name == a.name.replace(".offload", ".reload"))
        assert a.kernels == twin.kernels and isinstance(a.kernels[0], HostCopy)
        assert a.kernels[0].bytes > 0 and a.pass_ == "fwd" and twin.pass_ == "ig"
    users = {op.id: [u for u in program.ops if op.id in u.deps] for op in back}
    for op in back:   # the layer's first backward op waits for it
        assert any(u.layer == op.layer and u.pass_ == "ig" and not u.host
                   for u in users[op.id])
    assert len(topological_order(program)) == len(program.ops)


def test_forward_of_layer_l_minus_n_plus_i_waits_for_layer_i_copy(node):
    """At most L - N layers' activations stay on the GPU: layer L - N + i's forward depends
    on layer i's copy to the host (Transformer Engine's finish_offload_map)."""
    n = 2
    (program,) = transformer(node, **SMALL, cpu_offload_layers=n).programs
    out = {op.id: op for op in _copies(program) if op.name.endswith(".offload")
           and op.name.startswith("mb0.")}
    for op in out.values():
        waiting = [u for u in program.ops if op.id in u.deps and not u.host]
        assert {u.layer for u in waiting} == {L - n + op.layer}


def test_offloading_n_layers_keeps_the_activations_of_a_model_n_layers_shorter(node):
    """At most L - N layers' activations stay on the GPU: the estimate of L layers with N
    offloaded is that of L - N layers without (the same layers, nothing else changed)."""
    for n in (1, 2, 4):
        offloaded = transformer(node, **SMALL, cpu_offload_layers=n).memory["activations"]
        shorter = transformer(node, **{**SMALL, "layers": L - n}).memory["activations"]
        assert offloaded == pytest.approx(shorter, rel=1e-12)


def test_a_fast_host_link_hides_the_copies_and_a_slow_one_stalls_the_backward(node):
    """With GB200's link the copies of 2 of 6 layers hide behind the compute: the same time
    as without offloading. Offloading L - 1 layers over a link 10^4 times slower stalls every
    copy back (issued when the backward reaches its layer): at least (L - 1) copies of idle
    time, at most every copy's."""
    plain = float(flowsim.simulate(node, transformer(node, **SMALL)).time_ns)
    hidden = flowsim.simulate(node, transformer(node, **SMALL, cpu_offload_layers=2))
    assert float(hidden.time_ns) == pytest.approx(plain, rel=1e-12)
    assert float(hidden.idle_ns.max()) == 0.0
    slow = replace(DEVICES["gb200"], name="gb200_slow_host", host_gbps=0.025)
    w = transformer(node, **SMALL, cpu_offload_layers=L - 1)
    copy_ns = DeviceModel(slow).kernel_ns(_copies(w.programs[0])[0].kernels[0])
    stalled = flowsim.simulate(node, w, device=DeviceModel(slow))
    micro = 16 // 8
    idle = float(stalled.idle_ns.max())
    assert micro * (L - 1) * copy_ns <= idle <= 2 * micro * (L - 1) * copy_ns
    parts = (stalled.compute_ns, stalled.exposed_comm_ns, stalled.bubble_ns, stalled.idle_ns)
    assert float(stalled.time_ns) == pytest.approx(float(sum(parts).max()), rel=1e-9)


def test_a_host_copy_takes_the_link_rate_not_the_sustained_fraction():
    for name, gbps in (("gb200", 250.0), ("gb300", 250.0), ("h100", 63.0), ("a100", 31.5)):
        model = DeviceModel(name)
        assert model.kernel_ns(HostCopy(gbps * 1e9)) == pytest.approx(1e9)


@pytest.mark.parametrize("keys, key", [
    (dict(cpu_offload_layers=L), "cpu_offload_layers"),
    (dict(cpu_offload_layers=2, pp=2, dp=4), "pp"),
    (dict(cpu_offload_layers=2, recompute="full"), "recompute"),
    (dict(cpu_offload_layers=-1), "cpu_offload_layers"),
    (dict(cpu_offload_layers=1, hybrid_pattern="M*M-M*", mamba={"heads": 32},
          layers=None), "hybrid_pattern"),
])
def test_what_megatron_core_refuses_is_one_line_naming_the_key(node, keys, key):
    spec = {k: v for k, v in {**SMALL, **keys}.items() if v is not None}
    with pytest.raises(ConfigError, match=key) as info:
        transformer(node, **spec)
    assert "\n" not in str(info.value)


def test_a_roofline_has_no_host_link(node):
    with pytest.raises(ConfigError, match="roofline"):
        transformer(node, **{**SMALL, "device": None}, cpu_offload_layers=1,
                    roofline={"peak_tflops": 100, "memory_bandwidth_GBps": 1000})


def test_megatron_bridge_and_megatron_lm_settings_are_read(node, tmp_path):
    model = dict(num_layers=L, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
                 seq_length=1024, vocab_size=32768, cpu_offloading=True,
                 cpu_offloading_num_layers=2)
    config = {"model": model, "train": {"global_batch_size": 16, "micro_batch_size": 1}}
    spec = {"generator": "megatron_bridge", "config": config, "device": "gb200"}
    w = flowsim.load_workload(spec, network=node)
    assert len(_copies(w.programs[0])) == 2 * 2 * 2
    flags = ("--num-layers 6 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads "
             "16 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
             "--global-batch-size 16 --vocab-size 32768 --bf16 --cpu-offloading-num-layers 2")
    w = flowsim.load_workload({"generator": "megatron", "args": flags, "device": "gb200"},
                              network=node)
    assert len(_copies(w.programs[0])) == 2 * 2 * 2


def test_nemo_s_settings_are_read_its_expression_default_as_all_but_one_layer(node):
    from flowsim.workload.generators.nemo import nemo_keys

    model = {"num_layers": L, "hidden_size": 1024, "num_attention_heads": 16,
             "cpu_offloading": True, "cpu_offloading_num_layers": 3}
    assert nemo_keys({"model": model, "trainer": {}}, "<test>")["cpu_offload_layers"] == 3
    model["cpu_offloading_num_layers"] = "${sub:${model.num_layers},1}"
    with pytest.warns(flowsim.FlowsimWarning, match="num_layers - 1"):
        keys = nemo_keys({"model": model, "trainer": {}}, "<test>")
    assert keys["cpu_offload_layers"] == L - 1
    model["cpu_offloading_activations"] = False   # weights only: not priced, named
    with pytest.warns(flowsim.FlowsimWarning):
        keys = nemo_keys({"model": {**model, "cpu_offloading_weights": True},
                          "trainer": {}}, "<test>")
    assert "cpu_offload_layers" not in keys


def test_the_readme_s_muon_and_offloading_commands_run_and_do_what_they_say():
    """The README's Llama 3 70B command on 16 GB300 racks' 64 GPUs each, with Muon (a longer
    optimizer step than Adam's) and with 40 of 80 layers offloaded (the copies hidden: the
    same time as without them, and less activation memory)."""
    import json
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    base = shlex.split(re.search(r"`(flowsim run --workload llama3_70b --network "
                                 r"gb300_nvl72[^`]*)`", readme).group(1))[2:]
    muon = shlex.split(re.search(r"Muon optimizer \(`([^`]*)`", readme).group(1))
    offload = shlex.split(re.search(r"offloading to host memory \(`([^`]*)`",
                                    readme).group(1))

    def run(*extra):
        out = subprocess.run([sys.executable, "-m", "flowsim", "run", "--json", *base,
                              *extra], capture_output=True, text=True, check=True,
                             cwd=REPO).stdout
        return json.loads(out)

    assert run(*muon)["time_ns"] > run()["time_ns"]
    without = [*offload[:-2], "--set", "workload.cpu_offload_layers=0"]
    kept, offloaded = run(*without), run(*offload)
    assert offloaded["time_ns"] == pytest.approx(kept["time_ns"], rel=1e-12)
    assert offloaded["memory"]["activations"] < kept["memory"]["activations"]
