"""Megatron-Core's fine-grained activation offloading (``offload_modules``: its
``--fine-grained-activation-offloading`` with ``--offload-modules``; ``megatron/core/
pipeline_parallel/fine_grained_activation_offload.py``, Megatron-LM 24bad8e67), for the
mixture of experts' modules.

A named module's call is a *group*: the tensors autograd saves inside it, those of at least
``offload_min_elements`` elements each, are copied to host memory on a copy stream once the
module's forward is done, and freed on the GPU when the copy ends. The compute never waits
for a copy unless ``offload_max_inflight`` is set: then, after issuing a copy, it waits for
the oldest ones until at most that many are in flight (0: for this one). In the backward the
groups come back one ahead: when a group's backward is done, the copy back of the group
before it (in forward order) starts, after the compute issued so far, and that group's
backward waits for it. The last group of a forward whose backward comes next stays on the
GPU (Megatron-Core's steady state, after its first iteration: it skips a chunk's last group
then, and keeps the first backward chunk's).

What a group holds, per local expert GEMM row (``rows``: the tokens the rank's experts
receive; ``width``: an expert's inner width on the rank, twice that gated):

- ``expert_fc1``: the experts' input, in its kept precision (one byte in FP8);
- ``moe_act``: FC1's output (16-bit), the activation's input;
- ``fused_group_mlp``: Transformer Engine's fused grouped MLP (``fused_grouped_mlp``) whole:
  FC1's FP8 input, its 16-bit output and FC2's FP8 input, which ``moe_act`` recomputation
  leaves out (the activation's backward rebuilds it).

The copies run on the stage's host-copy resource at the device's host-link rate
(:attr:`flowsim.compute.Device.host_gbps`), both ways on one queue, so where they cannot
hide the stalls are an upper bound of Megatron-Core's two streams'. Each copy starts when
the experts' whole pass is done (``expert_fc1``'s group closes after FC1 in Megatron-Core),
and each copy back is waited for before the experts' whole backward.
"""

from __future__ import annotations

import re

from ..kernels import HostCopy
from .transformer_kernels import LayerKernels
from .transformer_overlap import Frontier
from .transformer_shapes import ACT
from .transformer_spec import TransformerSpec
from .transformer_stream import OpStream

#: a pass's micro-batch and model chunk, the start of its op names
_TAG = re.compile(r"^(mb\d+(?:\.chunk\d+)?)\.")


def offloaded_bytes(spec: TransformerSpec, k: LayerKernels, layer: int) -> float:
    """Bytes one call of ``layer``'s experts copies to the host (0 for other layers)."""
    modules = spec.offload_modules
    if not modules or not spec.has_mlp(layer) or not spec.is_moe(layer):
        return 0.0
    e = k.of_layer(layer)
    rows = e.expert_rows * (spec.experts // spec.ep)
    width = e.expert_width
    low = 1 if spec.dtype == "fp8" else ACT   # an FP8 GEMM's saved input: one byte
    tensors: list[tuple[float, float]] = []   # (elements, bytes per element)
    if "expert_fc1" in modules or "fused_group_mlp" in modules:
        tensors.append((rows * e.expert_dim, low))
    if "moe_act" in modules or "fused_group_mlp" in modules:
        tensors.append((rows * width * (2 if spec.gated_mlp else 1), ACT))
    if "fused_group_mlp" in modules and "moe_act" not in spec.recomputed_modules:
        tensors.append((rows * width, low))
    return float(sum(n * size for n, size in tensors if n >= spec.offload_min_elements))


class ModuleOffload:
    """Adds one stage's group copies to its ops (nothing without ``offload_modules``)."""

    def __init__(self, spec: TransformerSpec, b: OpStream, k: LayerKernels) -> None:
        self.spec, self.b, self.k = spec, b, k
        #: per pass (tag): the layers whose groups it copies
        self._offloaded: dict[str, frozenset[int]] = {}
        #: per pass: its copies to the host not yet brought back, in forward order
        self._copies: dict[str, list[tuple[int, int]]] = {}
        self._reloads: dict[tuple[str, int], int] = {}   # copies back issued, not waited for
        self._in_flight: list[int] = []   # copies the compute has not waited for

    def begin_forward(self, tag: str, layers: list[int], *, keep_last: bool) -> None:
        """A forward pass ``tag`` runs ``layers`` (its chunk's, then its depths); its last
        group stays on the GPU with ``keep_last``."""
        calls = [i for i in layers if offloaded_bytes(self.spec, self.k, i)]
        self._offloaded[tag] = frozenset(calls[:-1] if keep_last else calls)
        self._copies[tag] = []

    def after_forward(self, name: str, layer: int, x: Frontier) -> Frontier:
        """After the experts' forward ``x`` (op ``name``'s layer): the group's copy to the
        host, and the copies the compute then waits for."""
        tag = _tag(name)
        if tag not in self._offloaded or layer not in self._offloaded[tag] or \
                ".recompute." in name:
            return x
        copy = self._copy(f"{name}.offload", layer, "fwd", x)
        self._copies[tag].append((layer, copy))
        limit = self.spec.offload_max_inflight
        if limit is None:
            return x
        self._in_flight.append(copy)
        waited = self._in_flight[:max(0, len(self._in_flight) - limit)]
        del self._in_flight[:len(waited)]
        return (*x, *waited)

    def before_backward(self, name: str, layer: int, g: Frontier) -> Frontier:
        """The experts' backward input: its group back on the GPU (brought now if no later
        group's backward brought it)."""
        tag = _tag(name)
        copies = self._copies.get(tag, [])
        if copies and copies[-1][0] == layer:   # not brought back ahead: now
            self._reload(tag, *copies.pop())
        reload = self._reloads.pop((tag, layer), None)
        return g if reload is None else (*g, reload)

    def after_backward(self, name: str, layer: int) -> None:
        """The experts' backward is issued: the group before it comes back."""
        tag = _tag(name)
        copies = self._copies.get(tag, [])
        if copies and copies[-1][0] < layer:
            self._reload(tag, *copies.pop())

    def _reload(self, tag: str, layer: int, copy: int) -> None:
        after = (copy,) if self.b.last is None else (copy, self.b.last)
        self._reloads[tag, layer] = self._copy(f"{tag}.layer{layer}.reload", layer, "ig",
                                               after)

    def _copy(self, name: str, layer: int, pass_: str, deps: Frontier) -> int:
        nbytes = offloaded_bytes(self.spec, self.k, layer)
        return self.b.add(kind="compute", name=name, kernels=(HostCopy(nbytes),), host=True,
                          deps=tuple(dict.fromkeys(d for d in deps if d >= 0)), layer=layer,
                          pass_=pass_)


def _tag(name: str) -> str:
    match = _TAG.match(name)
    return match.group(1) if match else ""
