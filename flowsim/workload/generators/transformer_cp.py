"""Context parallelism's communication around a layer's attention, in the three ways the
training stacks run it (``cp_comm_type``; sequences split in ``2 cp`` chunks, two per rank,
for causal load balancing):

* ``p2p`` (Transformer Engine's ``AttnFuncWithCPAndKVP2P``, Megatron-Core's default): a ring.
  Step 0 attends the rank's own chunks (the causal block) while its keys and values go to
  the next rank; each of the ``cp - 1`` other steps attends the block the previous step's
  exchange brought while its own exchange passes it on (double-buffered: an exchange also
  waits for the step that last used its buffer). Backward, the blocks go around again and
  the key and value gradients accumulated so far follow a step behind, each rank adding its
  part: ``cp - 1`` exchanges of each, every one beside a step's attention. An exchange is
  priced as a one-step direct exchange of the rank's block over the CP group: through every
  rank's links the same bytes as the ring's shift, and on a switch the same time.
* ``all_gather`` (Llama 3's, Dubey et al. 2024 sec. 3.3.2): the group's keys and values
  all-gathered beside the local block, their gradients reduce-scattered after the attention
  backward. Megatron's unfused attention has no ring kernel and always does this.
* ``a2a`` (DeepSpeed-Ulysses, Jacobs et al. 2023; Transformer Engine's ``a2a``): an
  all-to-all trades the queries', keys' and values' sequence shards for shards of the heads,
  the attention runs over the whole sequence on ``1 / cp`` of the heads, and a second
  all-to-all trades its output back; backward, the same two in reverse order.
"""

from __future__ import annotations

from ..kernels import Kernel
from .transformer_kernels import ACT, LayerKernels
from .transformer_overlap import Block, Builder, Frontier


class ContextParallel:
    """Appends a layer's context-parallel attention to a pass builder."""

    def __init__(self, builder: Builder) -> None:
        self.b = builder
        spec = builder.spec
        fused = spec.attention != "unfused"
        self.kind = spec.cp_comm_type if spec.cp > 1 and fused else "all_gather"

    def forward(self, name: str, layer: int, qkv: Frontier, k: LayerKernels) -> Frontier:
        """The attention and its output projection after the QKV block (``qkv``)."""
        b, cp, attention = self.b, self.b.groups.cp, k.core_attention
        tail = Block(tail=k.projection, tail_name="projection")
        if self.kind == "a2a":   # sequence shards traded for head shards, and back after
            x = (b.collective(f"{name}.attention.a2a_in", "all_to_all", self._a2a_bytes(k),
                              cp, layer, "fwd", qkv),)
            x = (b.compute(f"{name}.attention_core", attention, layer, "fwd", x),)
            x = (b.collective(f"{name}.attention.a2a_out", "all_to_all",
                              self._a2a_bytes(k, out=True), cp, layer, "fwd", x),)
            return b.layer_block(f"{name}.attention_out", tail, layer, x, gather=False,
                                 reduce=True)
        if self.kind == "all_gather":
            kv = b.collective(f"{name}.kv.all_gather", "all_gather", k.kv_bytes, cp, layer,
                              "fwd", qkv)
            local = b.compute(f"{name}.attention_local", attention[:1], layer, "fwd", qkv)
            return b.layer_block(f"{name}.attention_remote", Block(
                body=attention[1:], tail=k.projection, tail_name="projection"), layer,
                (local, kv), gather=False, reduce=True)
        done: Frontier = (b.compute(f"{name}.attention_local", attention[:1], layer, "fwd",
                                    qkv),)
        exchange = self._exchange(f"{name}.kv.ring1", layer, "fwd", qkv, k)
        for i in range(1, b.spec.cp - 1):   # the last step is the projection's block below
            before = (exchange, *done)
            exchange = self._exchange(f"{name}.kv.ring{i + 1}", layer, "fwd", before, k)
            done = (b.compute(f"{name}.attention_ring{i}", attention[i:i + 1], layer, "fwd",
                              before),)
        return b.layer_block(f"{name}.attention_remote", Block(
            body=attention[-1:], tail=k.projection, tail_name="projection"), layer,
            (exchange, *done), gather=False, reduce=True)

    def split_backward(self, core: tuple[Kernel, ...]
                       ) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
        """The attention backward's kernels as what runs with the projection's data gradient
        (the local block; everything but with ``all_gather``; nothing with ``a2a``) and what
        :meth:`backward` runs after it."""
        keep = {"p2p": 1, "a2a": 0}.get(self.kind, len(core))
        return core[:keep], core[keep:]

    def backward(self, name: str, layer: int, g: Frontier, x: Frontier,
                 later: tuple[Kernel, ...], k: LayerKernels) -> tuple[Frontier, int]:
        """After the projection's data gradient block (``x``; the layer's backward started at
        ``g``): the rest of the attention backward and its communication. Returns its last
        compute's frontier and the collective that leaves the key and value gradients
        (a2a: the queries' too) where the QKV data gradient needs them."""
        b, cp = self.b, self.b.groups.cp
        if self.kind == "a2a":
            x = (b.collective(f"{name}.attention.a2a_out.dgrad", "all_to_all",
                              self._a2a_bytes(k, out=True), cp, layer, "ig", x),)
            x = (b.compute(f"{name}.attention_core.dgrad", later, layer, "ig", x),)
            return x, b.collective(f"{name}.attention.a2a_in.dgrad", "all_to_all",
                                   self._a2a_bytes(k), cp, layer, "ig", x)
        if self.kind == "all_gather":
            return x, b.collective(f"{name}.kv.reduce_scatter", "reduce_scatter",
                                   k.kv_bytes * b.spec.cp, cp, layer, "ig", x)
        # the ring: at the start of step j a rank sends on the keys and values it will not
        # need again (up to step cp - 2) and the gradients accumulated through step j - 1
        # (from step 1), then attends step j's block; the next step waits for all three
        before, done, grads = g, x, -1
        for j in range(b.spec.cp):
            sent: list[int] = []
            if j < b.spec.cp - 1:
                sent.append(self._exchange(f"{name}.kv.ring{j + 1}", layer, "ig", before, k))
            if j > 0:
                grads = self._exchange(f"{name}.kv_grad.ring{j}", layer, "ig", before, k)
                sent.append(grads)
                done = (b.compute(f"{name}.attention_ring{j}.dgrad", later[j - 1:j], layer,
                                  "ig", before),)
            before = (*sent, *done)
        return done, grads

    def _exchange(self, name: str, layer: int, pass_: str, deps: Frontier,
                  k: LayerKernels) -> int:
        """One ring step: every CP rank sends a block (``kv_bytes``) to the next, priced as
        a direct exchange of those bytes per rank (an all-to-all of ``cp / (cp - 1)``
        blocks)."""
        cp = self.b.spec.cp
        return self.b.collective(name, "all_to_all", round(k.kv_bytes * cp / (cp - 1)),
                                 self.b.groups.cp, layer, pass_, deps)

    @staticmethod
    def _a2a_bytes(k: LayerKernels, *, out: bool = False) -> int:
        """An Ulysses all-to-all's buffer on each rank: its queries, keys and values (or the
        attention's output, ``out``), of which it keeps ``1 / cp``."""
        return k.n * k.q * ACT + (0 if out else k.kv_bytes)
