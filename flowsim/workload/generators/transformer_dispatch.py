"""How a mixture of experts' tokens cross the expert-parallel ranks (``dispatcher``).

* ``alltoall``, Megatron-Core's all-to-all token dispatcher: every routed copy of a token (one
  per expert it is routed to, ``top_k``) travels to its expert's rank in one all-to-all over
  the EP group, and comes back the same way.
* ``deepep``, DeepEP's normal kernels (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv
  2412.19437, sec. 3.2.2; Megatron-Core's flex dispatcher with ``--moe-enable-deepep``): a
  token crosses the scale-out network once per node that hosts one of its experts, to the
  GPU of the same local index there, which forwards it over NVLink to each of that node's
  ranks that hosts one of them (once per rank, however many of its experts are there). The
  combine runs the other way round: the node's copies are summed over NVLink, then each
  node sends one sum back. Priced as two all-to-alls: over the EP ranks' inter-node dims,
  then over their intra-node dims (the combine: intra, then inter); an EP group inside one
  node is the intra-node exchange alone.

How many nodes and ranks a token reaches: routers are trained to spread the load evenly
(auxiliary losses, DeepSeek-V3's bias terms; Megatron-Core's benchmarks route random logits,
``--moe-router-force-load-balancing``), so a token's scores are taken as independent draws,
one per expert. Without a limit its ``top_k`` experts are then a uniform draw: of ``P``
experts in units (nodes, ranks) of ``u``, a draw of ``k`` reaches :func:`expected_units` of
them.

Node-limited routing (``node_limit``: DeepSeek-V3's M, 4 of 8 nodes) and Megatron-Core's
group-limited routing (``--moe-router-num-groups G --moe-router-group-topk M``;
``moe_utils.group_limited_topk``, which forced balancing's random logits go through too)
split the experts into groups of consecutive experts, the EP group's nodes or ``G`` of them
(``routing_groups``), rank each group by the sum of its ``top_k / M`` best scores, keep the
``M`` best and pick the ``top_k`` best experts among theirs (DeepSeek-V3, arXiv 2412.19437,
sec. 2.1.2: "the sum of the highest K_r/M affinity scores"). A group kept for its best scores
tends to hold some of the token's experts, so a token reaches more units than a uniform
draw from the kept groups would (:func:`routed_units` draws the rule on seeded sigmoid scores
of normal logits, DeepSeek-V3's score function). DeepSeek-V3's routing (256 experts, top 8,
64 ranks on 8 nodes, M = 4) reaches 3.97 nodes and 7.49 ranks per token: 3.97 copies on the
inter-node stage where the all-to-all dispatcher sends 8. A recipe's groups need not be the
nodes: Megatron-LM's DeepSeek-V3 recipe on GB200 keeps 4 of 8 groups over 32 ranks of one
NVLink domain, groups of 4 ranks.

``fp8_dispatch`` (DeepSeek-V3 sec. 3.3.2; DeepEP's FP8 dispatch) sends the exchanges toward
the experts in FP8 with one FP32 scale per 128 values (the forward dispatch and the
backward's gradient of the combine); the combine and the dispatch's gradient stay in 16 bits.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ...errors import requirement
from .transformer_dispatch_checks import check_allowed_experts
from .transformer_shapes import ACT

if TYPE_CHECKING:
    from .transformer_overlap import Builder, Frontier
    from .transformer_spec import TransformerSpec

#: bytes of one value sent in FP8: the value and its share of a 1 x 128 tile's FP32 scale
FP8_VALUE_BYTES = 1 + 4 / 128


def expected_units(pool: int, unit: int, picks: int) -> float:
    """Expected number of units (of ``unit`` experts each) a uniform draw of ``picks``
    distinct experts out of ``pool`` touches: ``(pool / unit) (1 - C(pool - unit, picks) /
    C(pool, picks))``."""
    missed = math.comb(pool - unit, picks) / math.comb(pool, picks)
    return pool / unit * (1.0 - missed)


#: tokens drawn to price limited routing (seeded: the same price every run; the mean's
#: standard error is about 0.2% of a token's ranks)
ROUTING_DRAWS = 16384


@lru_cache(maxsize=64)
def routed_units(experts: int, top_k: int, groups: int, limit: int,
                 units: tuple[int, ...]) -> tuple[float, ...]:
    """Expected number of units (of ``u`` consecutive experts, for each ``u`` of ``units``) a
    token's ``top_k`` experts fall in, when its ``limit`` best of ``groups`` groups (ranked
    by the sum of their ``top_k // limit`` best scores) hold them: the mean over
    :data:`ROUTING_DRAWS` tokens of independent sigmoid scores. Every group allowed is a
    uniform draw, :func:`expected_units` exactly."""
    if limit >= groups:
        return tuple(expected_units(experts, unit, top_k) for unit in units)
    logits = np.random.default_rng(0).standard_normal((ROUTING_DRAWS, experts),
                                                      dtype=np.float32)
    scores = 1.0 / (1.0 + np.exp(-logits))
    grouped = scores.reshape(ROUTING_DRAWS, groups, experts // groups)
    best = -np.partition(-grouped, top_k // limit - 1, axis=2)[:, :, :top_k // limit]
    kept = np.argpartition(-best.sum(axis=2), limit - 1, axis=1)[:, :limit]
    allowed = np.zeros((ROUTING_DRAWS, groups), dtype=bool)
    np.put_along_axis(allowed, kept, True, axis=1)
    grouped[~allowed] = -np.inf   # a view: the other groups' experts leave the scores
    picks = np.argpartition(-scores, top_k - 1, axis=1)[:, :top_k]
    reached = []
    for unit in units:
        ids = np.sort(picks // unit, axis=1)
        reached.append(float(np.mean(1 + np.count_nonzero(np.diff(ids, axis=1), axis=1))))
    return tuple(reached)


@lru_cache(maxsize=64)   # asked for every exchange of every layer and micro-batch
def deepep_copies(spec: TransformerSpec, nodes: int) -> tuple[float, float]:
    """The copies of each token DeepEP sends, on average: one per distinct node (the
    inter-node stage) and one per distinct rank (the intra-node one), for an EP group over
    ``nodes`` nodes.

    Raises
    ------
    ConfigError
        ``node_limit`` exceeds the nodes (its groups being the nodes), or the nodes it
        allows hold fewer experts than ``top_k``.
    """
    per_node, per_rank = spec.experts // nodes, spec.experts // spec.ep
    groups = spec.routing_groups or nodes
    if spec.node_limit and not spec.routing_groups:   # the groups are the nodes
        need = requirement(spec.source)
        need(spec.node_limit <= nodes, "node_limit", f"at most the {nodes} nodes the "
             f"expert-parallel group spans (0: any)", spec.node_limit)
        check_allowed_experts(spec, per_node, "nodes", need)
    node_copies, rank_copies = routed_units(spec.experts, spec.top_k, groups,
                                            spec.node_limit or groups, (per_node, per_rank))
    return node_copies, rank_copies


def exchange(b: Builder, name: str, toward_experts: bool, layer: int, pass_: str,
             deps: Frontier) -> Frontier:
    """Append one crossing of a layer's tokens over the EP group: toward the experts (the
    dispatch, or the backward's gradient of the combine) or back from them."""
    s, g, k = b.spec, b.groups, b.k
    if s.dispatcher == "alltoall":
        return (b.collective(name, "all_to_all", k.dispatch_bytes, g.ep, layer, pass_, deps),)
    value = FP8_VALUE_BYTES if toward_experts and s.fp8_dispatch else ACT
    per_copy = k.moe_tokens * s.capacity_factor * k.expert_dim * value
    node_copies, rank_copies = deepep_copies(s, g.ep_nodes)
    stages = [(f"{name}.inter", g.ep_inter, node_copies), (f"{name}.intra", g.ep_intra,
                                                           rank_copies)]
    stages = [stage for stage in stages if stage[1]]   # an EP group inside one node: intra
    if not toward_experts:
        stages.reverse()
    for stage_name, dims, copies in stages:
        deps = (b.collective(stage_name, "all_to_all", round(per_copy * copies), dims, layer,
                             pass_, deps),)
    return deps
