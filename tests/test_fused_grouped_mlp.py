"""Transformer Engine's fused grouped MLP (``fused_grouped_mlp``): the experts' activation and
the casts between their two grouped GEMMs run in the GEMMs' epilogues. Checked by closed forms
on the generated kernels (the same GEMMs, none of the kernels between them) and by its bad
specs."""

from __future__ import annotations

import pytest

import flowsim
from conftest import assert_spec_refused
from flowsim.workload.generators import transformer
from flowsim.workload.kernels import Elementwise, Gemm, Quantize

#: 16 NPUs: two nodes of 8
NET = {"topology": ["Switch", "Switch"], "npus_count": [8, 2], "bandwidth": [300, 25],
       "latency": [500, 2000]}
H, MOE_FFN, SEQ, LAYERS, MICRO, EXPERTS, TOP_K, EP = 256, 128, 128, 2, 2, 16, 4, 16
MOE = dict(layers=LAYERS, hidden=H, heads=8, sequence=SEQ, micro_batch=1, vocab=0,
           experts=EXPERTS, top_k=TOP_K, moe_ffn=MOE_FFN, dp=16, ep=EP,
           global_batch=16 * MICRO, dtype="fp8", fp8_recipe="mxfp8", gated_mlp=True)


@pytest.fixture(scope="module")
def net():
    return flowsim.load_network(NET)


def _kernels(workload, kind: type) -> list:
    return [k for op in workload.programs[0].ops if op.kind == "compute"
            for k in op.kernels if isinstance(k, kind)]


@pytest.mark.parametrize("gated", [False, True])
def test_the_same_gemms_without_the_activation_and_casts_between_them(net, gated):
    """Per layer and micro-batch, fusing removes the expert activation (forward and backward)
    and the casts of the activation's output and of its gradient; every GEMM stays."""
    plain = transformer(net, **dict(MOE, gated_mlp=gated))
    fused = transformer(net, **dict(MOE, gated_mlp=gated), fused_grouped_mlp=True)
    assert sorted(map(repr, _kernels(fused, Gemm))) == sorted(map(repr, _kernels(plain, Gemm)))

    def names(w):
        return sorted(k.name for k in _kernels(w, Elementwise))
    removed = list(names(plain))
    for name in names(fused):
        removed.remove(name)
    assert sorted(removed) == sorted(["expert_activation", "expert_activation_backward"]
                                     * LAYERS * MICRO)
    rows = EP * SEQ * TOP_K // EXPERTS   # tokens each (one) local expert receives
    fc1 = (2 if gated else 1) * MOE_FFN
    between = rows * MOE_FFN + rows * fc1   # the activation's output, the gradient of FC1's
    elements = [sum(k.elements for k in _kernels(w, Quantize)) for w in (plain, fused)]
    assert elements[0] - elements[1] == between * LAYERS * MICRO


@pytest.mark.parametrize("extra", [
    dict(experts=0, top_k=0, ep=1),              # no experts to fuse
    dict(dtype="bf16", fp8_recipe="delayed"),   # 16-bit: no fused kernel
    dict(fp8_recipe="tensorwise"),               # FP8 not block-scaled
])
def test_what_transformer_engine_does_not_fuse_is_refused(extra):
    assert_spec_refused({**MOE, **extra, "fused_grouped_mlp": True}, "fused_grouped_mlp")


def test_fusing_shortens_the_step_on_blackwell():
    """Priced on a GB200 rack's device, the step is shorter by at least the removed
    kernels' memory-bound time (they ran on the critical path, one after another)."""
    net = flowsim.load_network(dict(NET, device="gb200"))
    times = [float(flowsim.simulate(net, {"generator": "transformer", **MOE,
                                          "fused_grouped_mlp": fused}, "nccl").time_ns)
             for fused in (False, True)]
    assert times[1] < times[0]
