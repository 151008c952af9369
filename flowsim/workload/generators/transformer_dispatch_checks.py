"""Consistency rules of the keys that say how a mixture of experts' tokens cross the
expert-parallel ranks (``dispatcher``, ``node_limit``, ``routing_groups``,
``fp8_dispatch``; :mod:`.transformer_dispatch` prices them). The rules that need the
network (the nodes the expert-parallel group spans) are checked where it is known."""

from __future__ import annotations

from typing import Any

from ...errors import Need


def check_dispatch(spec: Any, need: Need) -> None:
    """Check the dispatch keys of ``spec`` (a ``TransformerSpec``); ``need(ok, key,
    expected, found)`` raises the one-line error naming the key."""
    if spec.dispatcher == "deepep":
        need(spec.ep > 1, "dispatcher", "alltoall without expert parallelism (ep > 1)",
             spec.dispatcher)
        need(spec.expert_tp == 1, "expert_tp", "1 with dispatcher deepep (flowsim prices "
             "DeepEP for whole experts per rank)", spec.expert_tp)
    need(not spec.routing_groups or spec.dispatcher == "deepep", "routing_groups",
         "0 unless dispatcher is deepep (the all-to-all dispatcher sends every routed copy "
         "wherever its group is)", spec.routing_groups)
    need(not spec.node_limit or spec.dispatcher == "deepep", "node_limit",
         "0 unless dispatcher is deepep (the all-to-all dispatcher sends every routed copy "
         "wherever its node is)", spec.node_limit)
    need(spec.node_limit <= max(spec.top_k, 1), "node_limit",
         f"at most top_k={spec.top_k} (a group is ranked by the sum of its top_k / "
         f"node_limit best scores)", spec.node_limit)
    if spec.routing_groups:
        need(spec.experts % spec.routing_groups == 0, "routing_groups",
             f"a divisor of experts={spec.experts} (groups of whole experts)",
             spec.routing_groups)
        need(0 < spec.node_limit <= spec.routing_groups, "node_limit",
             f"1 to routing_groups={spec.routing_groups}: the groups a token may use "
             f"(Megatron-Core's --moe-router-group-topk beside --moe-router-num-groups)",
             spec.node_limit)
        check_allowed_experts(spec, spec.experts // spec.routing_groups, "groups", need)
    if spec.fp8_dispatch:
        need(spec.dispatcher == "deepep", "fp8_dispatch", "false unless dispatcher is deepep",
             spec.fp8_dispatch)
        need(spec.dtype == "fp8", "fp8_dispatch", "false unless dtype is fp8",
             spec.fp8_dispatch)


def check_allowed_experts(spec: Any, group: int, unit: str,
                          need: Need) -> None:
    """The ``node_limit`` groups (``unit``: nodes or groups, of ``group`` experts each) a
    token may use hold at least its ``top_k`` experts."""
    need(spec.node_limit * group >= spec.top_k, "node_limit",
         f"at least {-(-spec.top_k // group)} (top_k={spec.top_k} experts from {unit} of "
         f"{group} experts)", spec.node_limit)
