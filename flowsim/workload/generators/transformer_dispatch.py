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
(auxiliary losses, DeepSeek-V3's bias terms), so a token's ``top_k`` experts are taken as a
uniform draw without replacement from the experts it may use: all of them, or with
node-limited routing (``node_limit``: DeepSeek-V3's M, 4 of 8 nodes) those of ``node_limit``
nodes. Of ``P`` experts in units (nodes, ranks) of ``u``, a draw of ``k`` reaches
:func:`expected_units` of them. DeepSeek-V3's routing (256 experts, top 8, 64 ranks on 8
nodes, M = 4) reaches 3.6 nodes and 7.4 ranks per token: 3.6 copies on the inter-node stage
where the all-to-all dispatcher sends 8.

Megatron-Core's group-limited routing (``--moe-router-num-groups G``,
``--moe-router-group-topk M``; ``moe_utils.group_limited_topk``) splits the experts into
``G`` groups of consecutive experts, keeps a token's ``M`` best groups and picks its
``top_k`` experts among theirs; it runs under forced load balancing too (the random logits
are routed the same way). ``routing_groups: G`` with ``node_limit: M`` prices it with groups
of any size: a group per node is the case above, but a recipe's 8 groups need not be the EP
group's nodes (DeepSeek-V3's 8 groups over 32 ranks of one NVLink domain are groups of 4
ranks). A token's groups are a uniform draw of ``M`` of ``G``, its experts a uniform draw
from theirs (:func:`limited_units`); groups and units (nodes, ranks) must nest.

``fp8_dispatch`` (DeepSeek-V3 sec. 3.3.2; DeepEP's FP8 dispatch) sends the exchanges toward
the experts in FP8 with one FP32 scale per 128 values (the forward dispatch and the
backward's gradient of the combine); the combine and the dispatch's gradient stay in 16 bits.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from ...errors import config_error
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


def limited_units(experts: int, group: int, limit: int, unit: int, picks: int) -> float:
    """Expected number of units (of ``unit`` experts) group-limited routing touches: ``limit``
    of the groups (of ``group`` experts each) drawn uniformly, then ``picks`` distinct experts
    uniformly among theirs. A unit inside a group (``group % unit == 0``) is a draw from the
    chosen groups' whole units; a unit of ``g`` groups holds ``j`` chosen ones with
    hypergeometric odds, and is touched unless every pick misses their ``j * group``
    experts."""
    pool = limit * group
    if group % unit == 0:
        return expected_units(pool, unit, picks)
    groups, per_unit = experts // group, unit // group
    touched = sum(math.comb(per_unit, j) * math.comb(groups - per_unit, limit - j)
                  / math.comb(groups, limit)
                  * (1.0 - math.comb(pool - j * group, picks) / math.comb(pool, picks))
                  for j in range(1, min(per_unit, limit) + 1))
    return experts / unit * touched


@lru_cache(maxsize=64)   # asked for every exchange of every layer and micro-batch
def deepep_copies(spec: TransformerSpec, nodes: int) -> tuple[float, float]:
    """The copies of each token DeepEP sends, on average: one per distinct node (the
    inter-node stage) and one per distinct rank (the intra-node one), for an EP group over
    ``nodes`` nodes.

    Raises
    ------
    ConfigError
        ``node_limit`` exceeds the nodes (its groups being the nodes), the groups and the
        nodes do not nest, or the groups a token may use hold fewer experts than ``top_k``.
    """
    per_node, per_rank = spec.experts // nodes, spec.experts // spec.ep
    if spec.routing_groups:
        group = spec.experts // spec.routing_groups
        if per_node % group and group % per_node:
            raise config_error(spec.source, "routing_groups",
                               f"groups that hold whole nodes' experts or lie inside a node "
                               f"({spec.experts // per_node} nodes of {per_node} experts)",
                               spec.routing_groups)
    else:
        group = per_node
        if spec.node_limit > nodes:
            raise config_error(spec.source, "node_limit",
                               f"at most the {nodes} nodes the expert-parallel group spans "
                               f"(0: any)", spec.node_limit)
    limit = spec.node_limit or spec.experts // group
    if limit * group < spec.top_k:
        unit = "groups" if spec.routing_groups else "nodes"
        raise config_error(spec.source, "node_limit",
                           f"at least {-(-spec.top_k // group)} (top_k={spec.top_k} "
                           f"experts from {unit} of {group} experts)", spec.node_limit)
    return (limited_units(spec.experts, group, limit, per_node, spec.top_k),
            limited_units(spec.experts, group, limit, per_rank, spec.top_k))


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
