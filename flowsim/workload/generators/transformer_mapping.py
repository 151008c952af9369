"""Mapping a transformer's parallel groups onto the network (see :mod:`.transformer`,
"Mapping onto the network"), and what each pipeline stage is told of the result
(:class:`StageContext`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...errors import ConfigError, config_error
from ...topology.view import base_dims, logical_view
from .transformer_checks import _where, folds_experts
from .transformer_passes import Groups
from .transformer_spec import TransformerSpec


@dataclass(frozen=True)
class StageContext:
    """What a stage's program needs beyond the spec."""

    stage: int
    groups: Groups
    stage_base: tuple[int, ...]   # lowest NPU id of every pipeline rank
    dp_size: int            # ranks the dense gradients are reduced over
    expert_dp_size: int     # ranks the expert gradients are reduced over
    replicas: int = 1       # FSDP's replicas of each shard (hybrid sharding)

    def shard_groups(self) -> tuple[tuple[tuple[int, ...], int], tuple[tuple[int, ...], int]]:
        """FSDP's sharding groups, dense and expert: (dims, ranks), the data-parallel ones
        without the replicas'."""
        rep = self.groups.replicate
        return ((tuple(d for d in self.groups.dp if d not in rep),
                 self.dp_size // self.replicas),
                (tuple(d for d in self.groups.expert_dp if d not in rep),
                 self.expert_dp_size // self.replicas))


def map_groups(network: Any, spec: TransformerSpec) -> tuple[Any, Groups, tuple[int, ...]]:
    """The network the program runs on (a logical view when a group is part of a dimension or
    holds uneven parts of several: :func:`~flowsim.topology.view.logical_view`), the logical
    dims of every communicator, and the pipeline-parallel dims.

    Raises
    ------
    ConfigError
        ``tp * cp * dp * pp`` differs from the network's NPUs.
    """
    sizes = tuple(int(p) for p in network.dims)
    total = spec.tp * spec.cp * spec.dp * spec.pp
    if total != network.npus:
        raise ConfigError(
            f"{_where(spec.source)}tp * cp * dp * pp = {spec.tp} * {spec.cp} * {spec.dp} * "
            f"{spec.pp} = {total} NPUs, but the network has {network.npus} (npus_count: "
            f"{list(sizes)})")
    if spec.dims is not None:
        view, groups, pp = _explicit(network, spec)
    elif folds_experts(spec):
        view, groups, pp = _folded(network, spec)
    else:
        # the data-parallel ranks: FSDP's sharding groups inside, their replicas outside
        sizes = (spec.tp, spec.cp, spec.ep, spec.fsdp_shard // spec.ep,
                 spec.dp // spec.fsdp_shard, spec.pp)
        view, owned = logical_view(network, sizes)
        tp, cp, ep, shard, replicate, pp = owned
        groups = _groups(spec, tp, cp, ep, shard + replicate, replicate)
    if spec.dispatcher == "deepep":
        groups = _by_node(view, groups, spec)
    return view, groups, pp


def _by_node(view: Any, groups: Groups, spec: TransformerSpec) -> Groups:
    """``groups`` with the EP dims split where DeepEP splits its exchanges: inside a node (the
    network's first dimension, its scale-up domain) and across nodes."""
    spans = {d: base_dims(view, d) for d in groups.ep}
    if any(len(s) > 1 for s in spans.values()):
        raise config_error(spec.source, "dispatcher",
                           "alltoall when the expert-parallel group holds uneven parts of "
                           "nodes (DeepEP splits it at node boundaries: tp, cp and ep that "
                           f"divide the {int(view.base.dims[0])} GPUs of a node, or multiples "
                           "of it)", spec.dispatcher)
    intra = tuple(d for d in groups.ep if spans[d] == (0,))
    inter = tuple(d for d in groups.ep if spans[d] != (0,))
    nodes = math.prod(int(view.dims[d]) for d in inter)
    return replace(groups, ep_intra=intra, ep_inter=inter, ep_nodes=nodes)


def _folded(network: Any, spec: TransformerSpec) -> tuple[Any, Groups, tuple[int, ...]]:
    """Megatron-Core's MoE parallel folding: the expert layers' grid (expert TP x EP x
    expert-DP) is laid over the dense one (TP x CP x DP) in the same rank order, innermost
    first, so the expert-parallel ranks are the first ``ep`` of the context x data-parallel
    ranks, or of all three with the tensor-parallel ones first when experts are not split
    over them (``expert_tp`` 1); with ``fsdp`` they come from the sharding groups, whose
    replicas (hybrid sharding) stay outermost. Both grids split at the same places
    (:func:`~.transformer_checks.check_consistent` checks that ``ep`` is whole leading
    groups of them and a divisor of the next)."""
    tp, cp, pp = spec.tp, spec.cp, spec.pp
    # FSDP's sharding groups are the inner data-parallel ranks, their replicas the outer
    shard, replicas = spec.fsdp_shard, spec.dp // spec.fsdp_shard
    lead = (tp,) if spec.expert_tp != 1 else ()   # experts split over TP: EP from CP x DP
    dense = (cp, shard) if lead else (tp, cp, shard)
    parts: list[int] = []   # each dense group in two: the part EP takes, the rest
    left = spec.ep
    for size in dense:
        take = min(left, size)
        parts += [take, size // take]
        left //= take
    view, owned = logical_view(network, (*lead, *parts, replicas, pp))
    halves, rep, p = owned[len(lead):-2], owned[-2], owned[-1]
    taken, kept = halves[0::2], halves[1::2]
    whole = [a + b for a, b in zip(taken, kept)]   # each dense group's dims
    cp_dims, dp_dims = whole[-2], whole[-1] + rep
    groups = Groups(tp=tuple(sorted(owned[0] if lead else whole[0])), cp=tuple(sorted(cp_dims)),
                    ep=tuple(sorted(sum(taken, ()))), dp=tuple(sorted(cp_dims + dp_dims)),
                    expert_dp=tuple(sorted(sum(kept, ()) + rep)), replicate=tuple(sorted(rep)))
    return view, groups, p


def _explicit(network: Any, spec: TransformerSpec) -> tuple[Any, Groups, tuple[int, ...]]:
    """Whole network dims given per parallelism (``dims``)."""
    sizes = tuple(int(p) for p in network.dims)
    degree = {"tp": spec.tp, "cp": spec.cp, "ep": spec.ep, "dp": spec.dp, "pp": spec.pp}
    dims = dict(spec.dims or ())
    for name, chosen in dims.items():
        bad = [d for d in chosen if d >= len(sizes)]
        if bad:
            raise config_error(spec.source, f"dims.{name}",
                               f"network dim indices 0..{len(sizes) - 1}", list(chosen))
        want = degree[name] if name != "dp" else spec.dp // spec.ep
        got = math.prod(sizes[d] for d in chosen)
        if got != want:
            raise config_error(spec.source, f"dims.{name}",
                               f"dims whose sizes multiply to {want} (the network's dims are "
                               f"{list(sizes)}; these multiply to {got})", list(chosen))
    tp, cp, ep, dpx, pp = (tuple(dims.get(p, ())) for p in ("tp", "cp", "ep", "dp", "pp"))
    return network, _groups(spec, tp, cp, ep, dpx), pp


def _groups(spec: TransformerSpec, tp: tuple[int, ...], cp: tuple[int, ...],
            ep: tuple[int, ...], dpx: tuple[int, ...], replicate: tuple[int, ...] = ()
            ) -> Groups:
    """The communicators from the dims each parallelism owns: dense gradients over data x
    context x expert ranks; expert gradients over the ranks that hold the same expert
    weights (Megatron-Core's data-modulo-expert group: the TP ranks too when the experts
    are not split over them); ``replicate``: the data-parallel dims of FSDP's replicas
    (hybrid sharding)."""
    shared = tp if spec.expert_tp == 1 else ()
    return Groups(tp=tp, cp=cp, ep=ep, dp=tuple(sorted(cp + ep + dpx)),
                  expert_dp=tuple(sorted(shared + cp + dpx)), replicate=tuple(replicate))


def stages(network: Any, pp_dims: tuple[int, ...], pp: int) -> list[np.ndarray]:
    """NPUs of every pipeline rank (by their coordinates along the pipeline dims)."""
    coords = network.coords(np.arange(network.npus, dtype=np.int64))
    stage = np.zeros(network.npus, np.int64)
    scale = 1
    for d in pp_dims:
        stage += coords[:, d] * scale
        scale *= int(network.dims[d])
    return [np.flatnonzero(stage == s) for s in range(pp)]
