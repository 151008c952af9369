"""Activation offloading to host memory: ``cpu_offload_layers``, Megatron-Core's
``--cpu-offloading-num-layers`` (``cpu_offloading_weights`` off) as Transformer Engine's
default schedule runs it (``DefaultOffloadSynchronizer``, ``transformer_engine/pytorch/
cpu_offload.py`` since TE 2.10; its CPU-offloading guide).

Of the ``L`` layers of a model, the first ``N`` copy the tensors they save for backward to
host memory on one copy stream, a layer's copy starting with its forward. At most ``L - N``
layers' activations stay on the GPU, so the forward of layer ``L - N + i`` waits until layer
``i``'s copy has finished (and its memory is freed). In the backward, layer ``i``'s copy back
starts when the backward reaches layer ``L - 1 - N + i`` (its memory freed again), after the
compute issued before it, and layer ``i``'s backward waits for it. Copies run one at a time,
each way at the device's host-link rate (:attr:`flowsim.compute.Device.host_gbps`), beside the
compute stream: a copy the compute waits for shows as idle time. A layer's copy starts with
its forward, as if every tensor it saves were ready then (Transformer Engine copies each as it
is saved): where the copies cannot hide, the stalls are a lower bound. Their bytes are the
layer's activations as :mod:`.transformer_activations` counts them (in FP8 the linear layers'
quantized inputs, as Transformer Engine saves them). Megatron-Core's hybrid stack has no
offloading.
"""

from __future__ import annotations

from collections.abc import Callable

from .transformer_passes import Frontier, PassBuilder
from .transformer_spec import TransformerSpec


class ActivationOffload:
    """Adds one stage's offload and reload copies to its ops (nothing without
    ``cpu_offload_layers``); ``layer_bytes(i)``: what layer ``i`` keeps for its backward."""

    def __init__(self, spec: TransformerSpec, b: PassBuilder,
                 layer_bytes: Callable[[int], float]) -> None:
        self.b = b
        self.offloaded = spec.cpu_offload_layers
        self.resident = spec.layers - self.offloaded   # layers whose activations stay
        self.sizes = {i: layer_bytes(i) for i in range(self.offloaded)}
        self._pending: dict[int, int] = {}   # layer -> its copy now in flight (op id)

    def before_forward(self, layer: int, tag: str, x: Frontier) -> Frontier:
        """Layer ``layer``'s forward input: waiting for the copy that frees room for it, and
        its own copy started beside it."""
        if not self.offloaded:
            return x
        freed = layer - self.resident
        if freed in self._pending:
            x = (*x, self._pending.pop(freed))
        if layer < self.offloaded:
            start = (*x, self.b.last) if self.b.last is not None else x
            self._pending[layer] = self._copy(f"{tag}.layer{layer}.offload", layer, "fwd",
                                              start)
        return x

    def before_backward(self, layer: int, tag: str, g: Frontier) -> Frontier:
        """Layer ``layer``'s backward input: the copy back its backward starts (of layer
        ``layer - L + 1 + N``), and its own activations' arrival."""
        if not self.offloaded:
            return g
        reload = layer - self.resident + 1
        if 0 <= reload < self.offloaded:
            after = () if self.b.last is None else (self.b.last,)
            self._pending[reload] = self._copy(f"{tag}.layer{reload}.reload", reload, "ig",
                                               after)
        if layer < self.offloaded:
            g = (*g, self._pending.pop(layer))
        return g

    def _copy(self, name: str, layer: int, pass_: str, deps: Frontier) -> int:
        return self.b.host_copy(name, self.sizes[layer], layer, pass_, deps)
