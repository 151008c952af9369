"""The token dispatcher's data movements around its all-to-alls (Megatron-Core's
``MoEAlltoAllTokenDispatcher``): ``permute`` before the dispatch, ``sort_chunks_by_idxs``
after it and before the combine (more than one local expert), ``unpermute`` after the
combine, each a memory-bound gather or scatter, and the same bytes backward; checked by
closed forms over the ops of one layer."""

from __future__ import annotations

import pytest

import flowsim
from flowsim.workload.generators import transformer
from flowsim.workload.kernels import Elementwise

NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
ACT = 2   # bytes per 16-bit element


def _moved(program, name: str) -> dict[str, float]:
    """Bytes of the dispatcher's kernels by kernel name, over the ops whose name ends so."""
    out: dict[str, float] = {}
    for op in program.ops:
        if op.kind == "compute" and op.name.endswith(name):
            for k in op.kernels:
                if isinstance(k, Elementwise) and k.name.startswith("moe_"):
                    out[k.name] = out.get(k.name, 0.0) + k.bytes
    return out


@pytest.mark.parametrize("experts, ep, top_k", [(8, 4, 2), (16, 16, 8), (4, 4, 1)])
def test_each_routed_copy_is_moved_as_megatron_core_moves_it(experts, ep, top_k):
    net = flowsim.load_network(NET)
    tokens, hidden = 2 * 128, 256   # micro-batch x sequence on each rank (no TP)
    keys = dict(layers=1, hidden=hidden, heads=8, sequence=128, micro_batch=2, vocab=0,
                dp=16, ep=ep, experts=experts, top_k=top_k, global_batch=32, gated_mlp=True,
                moe_ffn=128, ffn=512)
    program = transformer(net, **keys).programs[0]
    copies = tokens * top_k * hidden * ACT           # the rank's routed copies
    received = tokens * top_k * hidden * ACT         # balanced: as many come back
    local = experts // ep
    sort = 2 * received if local > 1 else 0
    assert _moved(program, "mb0.layer0.router") == {"moe_permute": 2 * copies}
    assert _moved(program, "mb0.layer0.experts").get("moe_sort_chunks", 0) == 2 * sort
    assert _moved(program, "mb0.layer0.unpermute") == {
        "moe_unpermute": pytest.approx(copies * (1 + 1 / top_k))}
    # backward: the same movements in reverse order, as many bytes
    assert _moved(program, "mb0.layer0.unpermute_backward") == \
        _moved(program, "mb0.layer0.unpermute")
    assert _moved(program, "mb0.layer0.permute_backward") == {"moe_permute": 2 * copies}
    assert _moved(program, "mb0.layer0.experts.dgrad").get("moe_sort_chunks", 0) == 2 * sort
    order = [op.name.rsplit(".", 1)[-1] for op in program.ops
             if op.name.startswith("mb0.layer0.") and op.kind != "send"]
    assert order.index("router") < order.index("unpermute") < \
        order.index("unpermute_backward") < order.index("permute_backward")
