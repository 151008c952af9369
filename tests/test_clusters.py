"""Cluster presets: the ``cluster:`` block, the network files of real machines in
``topologies/clusters/`` in both forms, and the facts they rest on."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import flowsim
from flowsim.compute import DEVICES
from flowsim.errors import ConfigError
from flowsim.topology.clusters import (
    _GB,
    INTERCONNECTS,
    NIC_EFFICIENCY,
    NVLINK_EFFICIENCY,
    expand_cluster,
)

PRESETS = Path(__file__).resolve().parent.parent / "topologies" / "clusters"
FILES = sorted(PRESETS.glob("*.yml"))


def _cluster(path: Path, **changes) -> dict:
    data = yaml.safe_load(path.read_text())
    data["cluster"].update(changes)
    return data


def test_every_device_preset_has_its_interconnect_facts():
    """The cluster presets keep their own device tables (the topology layer does not load
    the compute model): the same devices, each short name one of them."""
    from flowsim.device_names import ALIASES

    assert set(DEVICES) == set(INTERCONNECTS)
    assert set(ALIASES.values()) <= set(DEVICES)


def test_the_presets_come_in_both_forms():
    names = {p.stem for p in FILES}
    assert {"dgx_a100_superpod", "dgx_h100", "roce_clos_h100"} <= names
    for name in names - {n for n in names if n.endswith("_fabric")}:
        assert f"{name}_fabric" in names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_preset_scaled_down_loads_as_its_machine(path):
    """Every preset loads with a few nodes (a multiple of its pod), with its device."""
    cluster = yaml.safe_load(path.read_text())["cluster"]
    nodes = cluster.get("hosts_per_pod", cluster.get("hosts_per_leaf", 4))
    nodes *= 2 if cluster.get("tiers") == 3 else 1
    net = flowsim.load_network(_cluster(path, nodes=nodes))
    assert net.npus == nodes * cluster["gpus_per_node"]
    assert net.dims == (cluster["gpus_per_node"], nodes)
    assert net.config.device == cluster["device"]


def test_the_multidimensional_form_is_nvlink_then_the_nics():
    """Scale-up at NCCL's NVLink bus bandwidth, scale-out at the NICs' usable line rate
    shared by the GPUs of a node (flowsim GB/s are 2**30 B/s)."""
    net = flowsim.load_network(_cluster(PRESETS / "dgx_h100.yml", nodes=4))
    bandwidth = net.config.bandwidth_gbps
    assert bandwidth[0] == pytest.approx(450 * NVLINK_EFFICIENCY * _GB)
    assert bandwidth[1] == pytest.approx(400 / 8 * NIC_EFFICIENCY * _GB)


def test_a_gb200_rack_is_one_nvlink_domain_of_72_gpus():
    """GB200 NVL72: a node is the rack's 72 GPUs on NVLink 5 (900 GB/s each way), one
    400 Gb/s NIC per GPU; jobs on 64 GPUs of each rack set gpus_per_node: 64. Its device
    prices a GEMM from the GB200 MAMF (1,822 TFLOP/s at 4096x9728x2048)."""
    from flowsim.compute import DeviceModel
    from flowsim.workload.kernels import Gemm

    net = flowsim.load_network(_cluster(PRESETS / "gb200_nvl72.yml", nodes=2))
    assert net.dims == (72, 2) and net.config.device == "gb200"
    bandwidth = net.config.bandwidth_gbps
    assert bandwidth[0] == pytest.approx(900 * NVLINK_EFFICIENCY * _GB)
    assert bandwidth[1] == pytest.approx(400 / 8 * NIC_EFFICIENCY * _GB)
    used = flowsim.load_network(_cluster(PRESETS / "gb200_nvl72.yml", nodes=2,
                                         gpus_per_node=64))
    assert used.npus == 128   # 64 GPUs of each rack, each with its own NIC (not 72 shared)
    assert used.config.bandwidth_gbps[1] == pytest.approx(bandwidth[1])
    model = DeviceModel("gb200", sustained=1.0)
    m, n, k = 4096, 9728, 2048
    achieved = 2 * m * n * k / model.kernel_ns(Gemm(m, n, k)) / 1e3   # TFLOP/s
    assert achieved == pytest.approx(1822.0, rel=1e-9)


@pytest.mark.parametrize("preset, device, gpus, nic_gbps, mamf, shape", [
    ("gb300_nvl72", "gb300", 72, 800, 1822.0, (4096, 9728, 2048)),
    ("dgx_b300", "b300_sxm", 8, 800, 1769.0, (12288, 18432, 1024)),
])
def test_blackwell_ultra_clusters_have_800_gb_s_nics_and_their_measured_gemms(
        preset, device, gpus, nic_gbps, mamf, shape):
    """GB300 NVL72 racks and DGX B300 servers: NVLink 5 as Blackwell's, one 800 Gb/s
    ConnectX-8 per GPU; a GB300 prices a GEMM from GB200's MAMF (none is published for it:
    the same BF16 peak and clocks), a B300 from its own (1,769 TFLOP/s at 12288x18432x1024).
    Both forms of each preset load, with the same GPUs."""
    from flowsim.compute import DeviceModel
    from flowsim.workload.kernels import Gemm

    net = flowsim.load_network(_cluster(PRESETS / f"{preset}.yml", nodes=2))
    assert net.dims == (gpus, 2) and net.config.device == device
    bandwidth = net.config.bandwidth_gbps
    assert bandwidth[0] == pytest.approx(900 * NVLINK_EFFICIENCY * _GB)
    assert bandwidth[1] == pytest.approx(nic_gbps / 8 * NIC_EFFICIENCY * _GB)
    fabric = flowsim.load_network(_cluster(PRESETS / f"{preset}_fabric.yml", nodes=2,
                                           hosts_per_leaf=2))
    assert fabric.npus == net.npus == 2 * gpus
    model = DeviceModel(device, sustained=1.0)
    m, n, k = shape
    achieved = 2 * m * n * k / model.kernel_ns(Gemm(m, n, k)) / 1e3   # TFLOP/s
    assert achieved == pytest.approx(mamf, rel=1e-9)


@pytest.mark.parametrize("collective", ["all_reduce", "all_to_all"])
def test_a_non_blocking_fabric_agrees_with_the_multidimensional_form(collective):
    """Rail-optimized and non-blocking, the fabric form has no contention the two Switch
    dimensions do not already have: same NPUs, times within a few percent (the fabric's
    extra hops add latency only)."""
    times = {}
    for name in ("dgx_h100", "dgx_h100_fabric"):
        net = _cluster(PRESETS / f"{name}.yml", nodes=4)
        if "hosts_per_leaf" in net["cluster"]:
            net["cluster"]["hosts_per_leaf"] = 2   # two leaf groups: traffic crosses spines
        ds = flowsim.simulate_collective(net, collective, 256 << 20, system="nccl",
                                         model="flow")
        times[name] = float(ds.time_ns)
    assert times["dgx_h100_fabric"] == pytest.approx(times["dgx_h100"], rel=0.05)


def test_oversubscription_above_the_pods_slows_traffic_between_them():
    """Three tiers, two pods of 8 GPUs: 8 of each GPU's 15 all-to-all messages cross pods, so
    at 1:2 above the pods (half the pod's NIC bandwidth) the crossing bytes need
    (8 / 15) / (1 / 2) = 1.07 times the 1:1 time, at least."""
    base = dict(device="h100", nodes=8, gpus_per_node=2, nics_per_node=2, fabric="clos",
                form="fabric", hosts_per_leaf=2, tiers=3, hosts_per_pod=4)
    times = [float(flowsim.simulate_collective(
        {"cluster": dict(base, oversubscription=[1, ratio])}, "all_to_all", 8 << 20,
        system="nccl", model="flow").time_ns) for ratio in (1, 2)]
    assert times[1] >= 16 / 15 * times[0]


@pytest.mark.parametrize("change, key", [
    ({"tiers": 4}, "cluster.tiers"),
    ({"tiers": 3, "hosts_per_pod": 3}, "cluster.hosts_per_pod"),
    ({"tiers": 3, "hosts_per_pod": 4, "oversubscription": 2}, "cluster.oversubscription"),
    ({"device": "tpu_v5"}, "cluster.device"),
    ({"fabric": "torus"}, "cluster.fabric"),
    ({"racks": 2}, "cluster.racks"),
])
def test_bad_cluster_blocks_name_the_key(change, key):
    cluster = {"device": "h100", "nodes": 8, "form": "fabric", "hosts_per_leaf": 2, **change}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        expand_cluster(cluster, "net.yml")


def test_fabric_keys_in_the_multidimensional_form_are_warned_of():
    from flowsim.errors import FlowsimWarning

    with pytest.warns(FlowsimWarning, match=r"'cluster\.tiers', 'cluster\.hosts_per_pod'.*"
                                            r"form: fabric"):
        expand_cluster({"device": "h100", "nodes": 8, "tiers": 3, "hosts_per_pod": 4},
                       "net.yml")
    for path in FILES:     # the presets themselves say nothing they do not use
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            expand_cluster(yaml.safe_load(path.read_text())["cluster"], str(path))


def test_the_device_of_a_cluster_prices_the_generator_s_kernels():
    """A transformer spec that names no device runs on the cluster's."""
    spec = dict(generator="transformer", layers=2, hidden=256, heads=8, sequence=128,
                micro_batch=1, global_batch=16, tp=8, dp=2)
    times = {device: float(flowsim.simulate(
        {"cluster": {"device": device, "nodes": 2}}, spec, "nccl").compute_ns.mean())
        for device in ("a100", "h100")}
    assert times["h100"] < times["a100"]
    assert np.isfinite(list(times.values())).all()


def test_h200_and_h800_are_h100_silicon_with_their_own_memory_and_nvlink():
    """H200: H100's die and clocks with 141 GB at 4.8 TB/s (GEMMs and attention priced as
    H100's, memory-bound kernels 4.8 / 3.35 faster); H800: H100 with NVLink cut to 400 GB/s
    bidirectional, which only the cluster sees."""
    from flowsim.compute import DeviceModel
    from flowsim.workload.kernels import Attention, Elementwise, Gemm

    h100, h200, h800 = (DeviceModel(name) for name in ("h100", "h200", "h800"))
    gemm, copy = Gemm(8192, 8192, 8192), Elementwise(bytes=8e9)
    for kernel in (gemm, Attention(4, 32, 8192, 8192, 128)):
        assert h200.kernel_ns(kernel) == h100.kernel_ns(kernel) == h800.kernel_ns(kernel)
    launch = h100.device.launch_us * 1e3 / h100.sustained   # the launch, at the same fraction
    assert (h100.kernel_ns(copy) - launch) / (h200.kernel_ns(copy) - launch) == \
        pytest.approx(4800 / 3350, rel=1e-12)
    assert h800.kernel_ns(copy) == h100.kernel_ns(copy)
    assert (h200.device.memory_gb, h800.device.memory_gb) == (141.0, 80.0)
    scale_up = {name: INTERCONNECTS[DEVICES[name].name].nvlink_gbps
                for name in ("h100_sxm_80gb", "h200_sxm_141gb", "h800_sxm_80gb")}
    assert scale_up == {"h100_sxm_80gb": 450.0, "h200_sxm_141gb": 450.0, "h800_sxm_80gb": 200.0}
    nets = {name: flowsim.load_network({"cluster": {"device": name, "nodes": 2}})
            for name in ("h100", "h800")}
    assert nets["h800"].config.bandwidth_gbps[0] == pytest.approx(
        nets["h100"].config.bandwidth_gbps[0] * 200 / 450, rel=1e-12)
    assert nets["h800"].config.bandwidth_gbps[1] == nets["h100"].config.bandwidth_gbps[1]
