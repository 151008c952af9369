"""Context parallelism's communication around a layer's attention, in the three ways the
training stacks run it (``cp_comm_type``; sequences split in ``2 cp`` chunks, two per rank,
for causal load balancing):

* ``p2p`` (Transformer Engine's ``AttnFuncWithCPAndKVP2P``, Megatron-Core's default): a ring.
  Step 0 attends the rank's own chunks (the causal block) while its keys and values go to
  the next rank; each of the ``cp - 1`` other steps attends the block the previous step's
  exchange brought while its own exchange passes that block on (the exchanges wait only for
  each other: the host waits for a receive, not for the attention, before the next send).
  Backward, the blocks go around again and the key and value gradients accumulated so far
  follow a step behind in the same message: step 0 sends a block of keys and values, the
  middle steps both (one message of two blocks, as Transformer Engine packs them), the last
  step the gradients alone; each step's send waits for the previous step's attention (the
  gradients it carries) and exchange.
* ``all_gather`` (Llama 3's, Dubey et al. 2024 sec. 3.3.2): the group's keys and values
  all-gathered beside the local block, their gradients reduce-scattered after the attention
  backward. Megatron's unfused attention has no ring kernel and always does this.
* ``a2a`` (DeepSpeed-Ulysses, Jacobs et al. 2023; Transformer Engine's ``a2a``): an
  all-to-all trades the queries', keys' and values' sequence shards for shards of the heads,
  the attention runs over the whole sequence on ``1 / cp`` of the heads, and a second
  all-to-all trades its output back; backward, the same two in reverse order.

A ring exchange is priced as an all-to-all of the rank's message over the CP group (flowsim
has no neighbour-shift collective): with the ``direct`` all-to-all (the bundled ``nccl``
system) and the flow model, every rank's links carry the shift's bytes and a switch gives
the shift's time; the analytical model, blind to a link's other messages, charges each of
the ``cp - 1`` messages its own share (``1 / (cp - 1)`` of the shift's time), and a ``ring``
all-to-all ``cp / 2`` times it. At ``cp = 2`` all of them are the shift itself.
"""

from __future__ import annotations

from ..kernels import Kernel
from .transformer_checks import cp_kind
from .transformer_kernels import LayerKernels
from .transformer_overlap import Block, Builder, Frontier
from .transformer_shapes import ACT


class ContextParallel:
    """Appends a layer's context-parallel attention to a pass builder."""

    def __init__(self, builder: Builder) -> None:
        self.b = builder
        self.kind = cp_kind(builder.spec)

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
            exchange = self._exchange(f"{name}.kv.ring{i + 1}", layer, "fwd", (exchange,), k)
            done = (b.compute(f"{name}.attention_ring{i}", attention[i:i + 1], layer, "fwd",
                              before),)
        return b.layer_block(f"{name}.attention_remote", Block(
            body=attention[-1:], tail=k.projection, tail_name="projection"), layer,
            (exchange, *done), gather=False, reduce=True)

    def split_backward(self, core: tuple[Kernel, ...]
                       ) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
        """The attention backward's kernels as what runs with the projection's data gradient
        (``p2p``: the local block; ``all_gather``: everything; ``a2a``: nothing) and what
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
        # (from step 1), one message; then it attends step j's block
        last = b.spec.cp - 1
        before, done, sent = g, x, -1
        for j in range(b.spec.cp):
            blocks = (j < last) + (j > 0)
            sent = self._exchange(f"{name}.kv.ring1" if j == 0 else f"{name}.kv_grad.ring{j}",
                                  layer, "ig", before, k, blocks)
            if j > 0:
                done = (b.compute(f"{name}.attention_ring{j}.dgrad", later[j - 1:j], layer,
                                  "ig", before),)
            before = (sent, *done)
        return done, sent

    def _exchange(self, name: str, layer: int, pass_: str, deps: Frontier,
                  k: LayerKernels, blocks: int = 1) -> int:
        """One ring step: every CP rank sends ``blocks`` blocks (``kv_bytes`` each) to the
        next, priced as an all-to-all of ``cp / (cp - 1)`` times those bytes (see the module
        docstring)."""
        cp = self.b.spec.cp
        return self.b.collective(name, "all_to_all",
                                 round(blocks * k.kv_bytes * cp / (cp - 1)),
                                 self.b.groups.cp, layer, pass_, deps)

    @staticmethod
    def _a2a_bytes(k: LayerKernels, *, out: bool = False) -> int:
        """An Ulysses all-to-all's buffer on each rank: its queries, keys and values (or the
        attention's output, ``out``), of which it keeps ``1 / cp``."""
        return k.n * k.q * ACT + (0 if out else k.kv_bytes)
