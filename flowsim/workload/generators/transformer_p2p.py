"""The pipeline's point-to-point messages of one stage: activations sent forward and their
gradients backward between consecutive virtual stages, each a whole activation, or split over
the tensor-parallel ranks (sequence-parallel shards, or Megatron's scatter/gather
optimisation, which all-gathers a split message on arrival)."""

from __future__ import annotations

from .transformer_kernels import LayerKernels
from .transformer_mapping import StageContext
from .transformer_passes import Frontier, PassBuilder


class PipelineMessages:
    """Sends and receives of one pipeline rank (``b`` its op builder, ``k`` its kernels)."""

    def __init__(self, b: PassBuilder, k: LayerKernels, ctx: StageContext) -> None:
        self.b, self.k, self.ctx, self.spec = b, k, ctx, k.spec

    def tag(self, m: int, boundary: int, direction: int) -> int:
        """Tag of the message across virtual-stage boundary ``boundary`` (between virtual
        stages ``boundary`` and ``boundary + 1``) of micro-batch ``m``."""
        return 2 * (m * self.spec.pp * self.spec.vpp + boundary) + direction

    def _bytes(self) -> int:
        """An activation (or its gradient) between stages: sharded by sequence parallelism,
        or split over the tensor-parallel ranks by Megatron's scatter/gather optimisation."""
        s, k = self.spec, self.k
        split = s.tp > 1 and (s.sp or s.scatter_gather)
        return k.shard_bytes if split else k.activation_bytes

    def _gathered(self) -> bool:
        """Whether a received scatter/gather message is all-gathered over TP."""
        s = self.spec
        return s.tp > 1 and s.scatter_gather and not s.sp

    def _offset(self, peer: tuple[int, int]) -> int:
        return self.ctx.stage_base[peer[0]] - self.ctx.stage_base[self.ctx.stage]

    def receive(self, name: str, peer: tuple[int, int], tag: int, layer: int, pass_: str
                ) -> Frontier:
        """A message from ``peer`` (pipeline rank, chunk); the frontier of its data."""
        r = self.b.add(kind="recv", name=name, size=self._bytes(),
                       peer_offset=self._offset(peer), tag=tag, layer=layer, pass_=pass_)
        if not self._gathered():
            return (r,)
        return (self.b.collective(f"{name}.all_gather", "all_gather", self.k.shard_bytes,
                                  self.ctx.groups.tp, layer, pass_, (r,)),)

    def send(self, name: str, peer: tuple[int, int], tag: int, layer: int, pass_: str,
             deps: Frontier) -> None:
        """A message to ``peer`` once ``deps`` are done."""
        self.b.add(kind="send", name=name, size=self._bytes(), peer_offset=self._offset(peer),
                   tag=tag, deps=deps, layer=layer, pass_=pass_)
