"""``ring-delays: flat``: a ring reduce-scatter or all-gather over several dimensions pays the
endpoint delays of one ring through all its ``p`` ranks, as NCCL runs it across nodes, while
its bytes move as the per-dimension rings move them."""

from __future__ import annotations

import math

import pytest

import flowsim
from flowsim.system.config import parse_system_config
from flowsim.system.load import load_system
from flowsim.system.phases import collective_phases
from flowsim.topology import load_network
from flowsim.topology.clusters import NIC_LATENCY_NS, NVLINK_LATENCY_NS

DELAY = 7000.0
SIZE = 1 << 20


def switches(sizes):
    """Switch dimensions without link latency: every nanosecond beyond the bytes is a delay."""
    return {"topology": ["Switch"] * len(sizes), "npus_count": list(sizes),
            "bandwidth": [370.0] + [45.0] * (len(sizes) - 1), "latency": [0.0] * len(sizes)}


def system(ring_delays, algorithm="ring", **extra):
    return {"preferred-dataset-splits": 1, "endpoint-delay": DELAY,
            "collective-optimization": "localBWAware", "all-reduce-implementation": algorithm,
            "reduce-scatter-implementation": algorithm, "all-gather-implementation": algorithm,
            "all-to-all-implementation": "direct", "ring-delays": ring_delays, **extra}


@pytest.mark.parametrize("sizes", [(8, 64), (2, 4, 8), (4, 3)])
@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("sync", ["barrier", "per_npu"])
def test_a_flat_ring_pays_p_minus_one_hand_offs(sizes, collective, model, sync):
    net = switches(sizes)
    per_dimension = flowsim.estimate(net, collective, SIZE, system(
        "per_dimension", **{"step-synchronization": sync}), model)
    flat = flowsim.estimate(net, collective, SIZE, system(
        "flat", **{"step-synchronization": sync}), model)
    # per dimension: sum(n - 1) steps; one ring: p - 1; the bytes are the same
    extra = (math.prod(sizes) - 1) - sum(n - 1 for n in sizes)
    assert flat - per_dimension == pytest.approx(extra * DELAY, rel=1e-9)


def test_the_passes_are_the_sizes_of_the_outer_dimensions():
    net = load_network(switches((2, 4, 8)))
    phases = collective_phases(net, parse_system_config(system("flat")), "all_gather", 64.0)
    assert {ph.dims[0]: ph.delay_passes for ph in phases} == {0: 32, 1: 8, 2: 1}
    # a collective on the inner two dimensions only: its ring passes dimension 0 four times
    phases = collective_phases(net, parse_system_config(system("flat")), "reduce_scatter",
                               64.0, dims=(0, 1))
    assert {ph.dims[0]: ph.delay_passes for ph in phases} == {0: 4, 1: 1}


@pytest.mark.parametrize("collective,sizes,algorithm", [
    ("all_reduce", (8, 64), "ring"),        # NCCL runs these as trees across nodes too
    ("all_to_all", (8, 64), "ring"),
    ("all_gather", (64,), "ring"),          # one dimension: already one ring
    ("all_gather", (8, 8), "direct"),       # not a ring
])
def test_other_collectives_keep_their_per_dimension_delays(collective, sizes, algorithm):
    net = switches(sizes)
    times = [flowsim.estimate(net, collective, SIZE, system(mode, algorithm))
             for mode in ("per_dimension", "flat")]
    assert times[0] == times[1]


def test_the_batched_estimator_prices_the_passes():
    net = switches((8, 16))
    sizes = [64, 1 << 20, 1 << 26]
    batch = flowsim.estimate_batch(net, "all_gather", sizes, system("flat"))
    single = [flowsim.estimate(net, "all_gather", s, system("flat")) for s in sizes]
    assert batch.tolist() == pytest.approx(single, rel=1e-12)
    assert batch[0] > (8 * 16 - 1) * DELAY


def test_the_bundled_nccl_system_runs_flat_rings_on_a_cluster():
    """64 DGX H100 nodes: an all-gather of 64 bytes per GPU pays 511 hand-offs (NCCL's ring
    through 512 ranks), not the 7 + 63 of rings per dimension."""
    cluster = {"cluster": {"device": "h100", "nodes": 64}}
    nccl = load_system("nccl")
    assert nccl.ring_delays == "flat"
    t = flowsim.estimate(cluster, "all_gather", 64)
    delays = (512 - 1 + 2) * nccl.endpoint_delay_ns   # plus one before each of the 2 phases
    # each step's message: GPU -> switch -> GPU, 7 steps on NVLink and 63 across nodes
    links = 7 * 2 * NVLINK_LATENCY_NS + 63 * 2 * NIC_LATENCY_NS
    assert delays + links < t < delays + links + 10_000   # and 32 KiB of bytes
    assert flowsim.simulate_collective(cluster, "all_gather", 64).attrs["ring_delays"] == "flat"


def test_a_group_that_cuts_a_dimension_passes_through_its_own_pieces():
    """Tensor parallelism 2 inside 8-GPU nodes leaves data-parallel groups of 4 GPUs per node
    over 2 nodes (a logical view cuts dimension 0 into 2 x 4): their reduce-scatter's ring
    passes each node's 4 ranks twice, 7 hand-offs in all, and a 2-rank group inside a node
    is one ring of 1."""
    from flowsim.topology.view import LogicalView

    view = LogicalView(load_network(switches((8, 2))), ((0, 2), (0, 4), (1, 2)))
    nccl = parse_system_config(system("flat"))
    phases = collective_phases(view, nccl, "reduce_scatter", 64.0, dims=(1, 2))
    assert {ph.dims[0]: ph.delay_passes for ph in phases} == {1: 2, 2: 1}
    steps = sum(ph.delay_passes * (view.dims[ph.dims[0]] - 1) for ph in phases)
    assert steps == 4 * 2 - 1
    (inner,) = collective_phases(view, nccl, "all_gather", 64.0, dims=(0,))
    assert inner.delay_passes == 1
