"""Clusters of real machines from a handful of numbers: a ``cluster:`` block in a network file.

::

    cluster:
      device: h100            # the GPU (a preset of flowsim.compute, its short name or the
                              # vendor's, e.g. "NVIDIA H100 80GB HBM3" as nvidia-smi prints
                              # it; PCIe / NVL cards are other parts); sets the defaults below
      nodes: 128              # servers
      gpus_per_node: 8        # default 8
      nic_gbps: 400           # line rate of one NIC, Gb/s (default by device: 200 A100,
                              # 400 H100 to GB200, 800 B300 and GB300)
      nics_per_node: 8        # default one per GPU
      fabric: rail_optimized  # or clos: how NICs reach the leaf switches (this and the keys
                              # below: fabric form only; the multidim form warns of them)
      form: multidim          # or fabric: how the cluster is simulated (see below)
      hosts_per_leaf: 32      # fabric form: servers per leaf group (default 32, an SU)
      tiers: 2                # fabric form: 2 (leaf-spine) or 3 (pods of leaf-spine under
                              # a super-spine tier)
      hosts_per_pod: 384      # fabric form, 3 tiers: servers per pod (default all)
      oversubscription: 1     # fabric form: leaf downlink over uplink bandwidth; with 3
                              # tiers [leaf, spine]

Every other number comes from public specifications, set once per device and technology:

* **scale-up** (NVLink through NVSwitch): the device's per-direction NVLink bandwidth (A100:
  300 GB/s; H100 and H200: 450 GB/s; H800: 200 GB/s; B200, B300, GB200 and GB300: 900 GB/s, a
  node of GB200 or GB300 being its NVL72 rack's NVLink domain) at :data:`NVLINK_EFFICIENCY`,
  the bus bandwidth NCCL measures on 8 H100s (about 370 of 450 GB/s: the JAX scaling book's
  GPU chapter and the ASTRA-sim documentation's HGX-H100 validation both show it),
  :data:`NVLINK_LATENCY_NS` per link;
* **scale-out** (InfiniBand or RoCE): ``nic_gbps`` per NIC, shared by the GPUs of a node,
  at :data:`NIC_EFFICIENCY` (headers and protocol overhead of 4 KiB payloads), with
  :data:`NIC_LATENCY_NS` per link (NIC, cable and switch traversal).

``form: multidim`` (the default) is two Switch dimensions, ``[gpus_per_node, nodes]``: fast,
exact for the bandwidth of every NIC, blind to where flows meet above the leaves.
``form: fabric`` builds the leaf-spine fabric (:func:`~.fabric_generators.leaf_spine`),
rail-optimized or not, oversubscribed or not, in two or three tiers, routed with ECMP:
slower, and shows contention.

Presets of real machines, network files to copy and scale by ``nodes``, are in
``topologies/clusters/`` (a DGX A100 SuperPOD, DGX H100, H200, B200 and B300 clusters, Meta's
24K-GPU RoCE cluster of Llama 3, GB200 and GB300 NVL72 racks), each in both forms; their names
are bundled names (``flowsim run --network dgx_h100 --workload llama3_70b``).

NCCL's own cost per collective step (kernel synchronisation, proxy threads) is not a link
property: the bundled system config ``nccl`` (``topologies/systems/nccl.json``) sets it as
ASTRA-sim's ``endpoint-delay``, at the value that makes a 58 MB all-reduce on 8 H100s reach
the 150 GB/s of algorithm bandwidth the scaling book measures, turns off ASTRA-sim's
local-reduction cost (NCCL reduces while it copies), and charges a reduce-scatter or
all-gather across nodes the ``p - 1`` hand-offs of the one ring NCCL runs it as
(``ring-delays: flat``; an FSDP gather over 512 H100s pays 511 delays, not 70). A run on a
``cluster:`` network takes it when it is given no system (:data:`CLUSTER_SYSTEM`); ASTRA-sim's
network files keep ASTRA-sim's default (its ``Ring_4chunks`` example's settings, four chunks
per collective and rings for all-to-alls), which on a cluster prices expert parallelism's
all-to-alls far slower than NCCL runs them.

Bandwidths in the generated config are flowsim's GB/s (2**30 B/s, ASTRA-sim's convention).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from .._validate import (
    FACTOR,
    as_config,
    as_number,
    check_unknown_keys,
    read_choice,
    read_int,
    read_list,
    read_number,
    read_str,
)
from ..device_names import ALIASES, preset_name
from ..errors import FlowsimWarning, config_error

#: NCCL's bus bandwidth over NVLink as a fraction of the per-direction link bandwidth
NVLINK_EFFICIENCY = 370.0 / 450.0
#: latency of one NVLink link (GPU to NVSwitch or back), ns
NVLINK_LATENCY_NS = 250.0
#: achievable fraction of a NIC's line rate
NIC_EFFICIENCY = 0.9
#: latency of one scale-out link, ns
NIC_LATENCY_NS = 1_500.0
#: one vendor "GB" (10^9 B) in flowsim's GB (2^30 B)
_GB = 1e9 / 2**30


@dataclass(frozen=True)
class Interconnect:
    """The scale-up and default scale-out links of a device's servers."""

    nvlink_gbps: float       # per direction, 10^9 B/s
    nic_gbps: float          # default NIC line rate, Gb/s
    source: str


#: by device preset name (the names of :data:`flowsim.compute.DEVICES`)
INTERCONNECTS: dict[str, Interconnect] = {
    "a100_sxm_80gb": Interconnect(300.0, 200.0, "NVLink 3: 600 GB/s bidirectional; DGX A100: "
                                                "8 x 200 Gb/s HDR InfiniBand"),
    "a100_sxm_40gb": Interconnect(300.0, 200.0, "as the 80 GB part"),
    "h100_sxm_80gb": Interconnect(450.0, 400.0, "NVLink 4: 900 GB/s bidirectional; DGX H100: "
                                                "8 x 400 Gb/s ConnectX-7"),
    "h200_sxm_141gb": Interconnect(450.0, 400.0, "NVLink 4: 900 GB/s bidirectional; DGX "
                                                 "H200: 8 x 400 Gb/s ConnectX-7"),
    "h800_sxm_80gb": Interconnect(200.0, 400.0, "NVLink 400 GB/s bidirectional (H800's cut "
                                                "NVLink); 8 x 400 Gb/s InfiniBand per server, "
                                                "as DeepSeek-V3's H800 cluster (arXiv "
                                                "2412.19437, sec. 3.1)"),
    "gb200": Interconnect(900.0, 400.0, "NVLink 5: 1.8 TB/s bidirectional across the 72 GPUs "
                                        "of a GB200 NVL72 rack; DGX GB200: one 400 Gb/s "
                                        "ConnectX-7 per GPU"),
    "b200_sxm": Interconnect(900.0, 400.0, "NVLink 5: 1.8 TB/s bidirectional; DGX B200: "
                                           "8 x 400 Gb/s ConnectX-7"),
    "gb300": Interconnect(900.0, 800.0, "NVLink 5: 1.8 TB/s bidirectional across the 72 GPUs "
                                        "of a GB300 NVL72 rack; one 800 Gb/s ConnectX-8 per "
                                        "GPU (four per compute tray of four GPUs)"),
    "b300_sxm": Interconnect(900.0, 800.0, "NVLink 5: 1.8 TB/s bidirectional; DGX B300: "
                                           "8 x 800 Gb/s ConnectX-8"),
}
#: the bundled system a run on a ``cluster:`` network takes when it is given none
CLUSTER_SYSTEM = "nccl"
#: keys that only the fabric form reads
FABRIC_FORM_KEYS = ("fabric", "hosts_per_leaf", "tiers", "hosts_per_pod", "oversubscription")
CLUSTER_KEYS = ("device", "nodes", "gpus_per_node", "nic_gbps", "nics_per_node", "fabric",
                "form", "hosts_per_leaf", "tiers", "hosts_per_pod", "oversubscription")


def device_name(value: Any, *, source: str, key: str) -> str:
    """A device preset's full name (``h100`` -> ``h100_sxm_80gb``)."""
    if isinstance(value, str):
        name = preset_name(value)
        if name in INTERCONNECTS:
            return name
    raise config_error(source, key, "one of " + ", ".join([*INTERCONNECTS, *ALIASES]), value)


def expand_cluster(cluster: Any, source: str) -> dict[str, Any]:
    """The network mapping (multi-dimensional or ``fabric:``) a ``cluster:`` block stands for,
    with its ``device``."""
    as_config(cluster, source=source, what="cluster")
    check_unknown_keys(cluster, CLUSTER_KEYS, source=source, prefix="cluster.")
    device = device_name(read_str(cluster, "device", source=source, prefix="cluster."),
                         source=source, key="cluster.device")
    facts = INTERCONNECTS[device]
    nodes = read_int(cluster, "nodes", source=source, prefix="cluster.", minimum=1)
    gpus = read_int(cluster, "gpus_per_node", source=source, prefix="cluster.", default=8,
                    minimum=1)
    nic = read_number(cluster, "nic_gbps", source=source, prefix="cluster.",
                      default=facts.nic_gbps, minimum=1e-3, maximum=1e7)
    nics = read_int(cluster, "nics_per_node", source=source, prefix="cluster.", default=gpus,
                    minimum=1)
    form = read_choice(cluster, "form", ("multidim", "fabric"), source=source,
                       prefix="cluster.", default="multidim")
    fabric = read_choice(cluster, "fabric", ("rail_optimized", "clos"), source=source,
                         prefix="cluster.", default="rail_optimized")
    ignored = [key for key in FABRIC_FORM_KEYS if key in cluster] if form == "multidim" else []
    if ignored:   # a user switching forms keeps them; say they do nothing here
        names = ", ".join(f"'cluster.{k}'" for k in ignored)
        warnings.warn(f"{source}: {names}: fabric-form key{'s' if len(ignored) > 1 else ''}, "
                      f"ignored by the multidim form (the default); set 'cluster.form: "
                      f"fabric' to use {'them' if len(ignored) > 1 else 'it'}",
                      FlowsimWarning, stacklevel=4)
    if nodes * gpus < 2:
        raise config_error(source, "cluster.nodes", "at least 2 GPUs in the cluster", nodes)
    scale_up = facts.nvlink_gbps * NVLINK_EFFICIENCY * _GB
    per_nic = nic / 8 * NIC_EFFICIENCY * _GB
    if form == "multidim":
        if nodes == 1 or gpus == 1:
            n, bw, lat = (gpus, scale_up, NVLINK_LATENCY_NS) if nodes == 1 else \
                (nodes, per_nic * nics / gpus, NIC_LATENCY_NS)
            return {"topology": ["Switch"], "npus_count": [n], "bandwidth": [bw],
                    "latency": [lat], "device": device}
        return {"topology": ["Switch", "Switch"], "npus_count": [gpus, nodes],
                "bandwidth": [scale_up, per_nic * nics / gpus],
                "latency": [NVLINK_LATENCY_NS, NIC_LATENCY_NS], "device": device}
    per_leaf = read_int(cluster, "hosts_per_leaf", source=source, prefix="cluster.",
                        default=min(32, nodes), minimum=1)
    tiers = read_int(cluster, "tiers", source=source, prefix="cluster.", default=2, minimum=2,
                     maximum=3)
    spec: dict[str, Any] = {
        "generator": "leaf_spine", "hosts": nodes, "npus_per_host": gpus,
        "scale_up": {"bandwidth": scale_up, "latency": NVLINK_LATENCY_NS},
        "nic": {"bandwidth": per_nic, "latency": NIC_LATENCY_NS}, "nics_per_host": nics,
        "hosts_per_leaf": per_leaf, "rail_optimized": fabric == "rail_optimized",
        "spine_latency": NIC_LATENCY_NS}
    if tiers == 2:
        spec["oversubscription"] = read_number(cluster, "oversubscription", source=source,
                                               prefix="cluster.", default=1.0,
                                               quantity=FACTOR)
    else:
        per_pod = read_int(cluster, "hosts_per_pod", source=source, prefix="cluster.",
                           default=nodes, minimum=1)
        if nodes % per_pod or per_pod % per_leaf:
            raise config_error(source, "cluster.hosts_per_pod",
                               f"a divisor of nodes ({nodes}) and a multiple of "
                               f"hosts_per_leaf ({per_leaf})", per_pod)
        spec["pods"] = nodes // per_pod
        spec["oversubscription"] = read_list(
            cluster, "oversubscription", partial(as_number, quantity=FACTOR), source=source,
            prefix="cluster.", default=[1.0, 1.0], min_length=2, max_length=2,
            what="[leaf, spine] ratios")
    return {"fabric": spec, "device": device}


def as_cluster(config: Any) -> Any:
    """A parsed network config (multi-dimensional or fabric) marked as a cluster's: a run on
    it takes :data:`CLUSTER_SYSTEM` when it is given no system."""
    from dataclasses import replace

    return replace(config, system=CLUSTER_SYSTEM)


def cluster_mapping(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A network mapping with a ``cluster:`` block expanded (keys beside it are refused)."""
    extra = sorted(set(data) - {"cluster", "name"})
    if extra:
        raise config_error(source, extra[0], "no other keys beside 'cluster' (and 'name')",
                           data[extra[0]])
    return expand_cluster(data["cluster"], source)
