"""The ops of one transformer layer's forward and backward pass on one pipeline stage, with
Megatron-LM's tensor-, context- and expert-parallel communication between its blocks.

A pass is a chain of compute ops (one compute stream per NPU: each op waits for the previous
one) and collectives between them. A *frontier* is the tuple of ops the next compute op needs
the data of. Forward of a layer (``sp``: sequence parallelism)::

    [residual + norm] -AG-> [QKV, attention, projection] -RS-> [residual + norm] -AG->
    [FC1, activation, FC2] -RS->                 (without sp: all-reduces instead of RS, no AG)

Backward (each block's data gradient, then its weight gradient, which overlaps with the data
gradient's collective, as Megatron-LM's asynchronous tensor-parallel communication does; with
``sp`` the column-parallel layer's input is gathered again, AG', beside its data gradient)::

    [residual'] -AG-> [FC2 dgrad, activation'] -AG'-> [FC1 dgrad] -RS-> [MLP wgrad]
    [norm' + residual'] -AG-> [projection dgrad, attention'] -AG'-> [QKV dgrad] -RS->
    [attention wgrad] [norm']

``tp_comm_overlap`` (Megatron's ``--tp-comm-overlap``) pipelines a layer's collectives with its
GEMMs as Transformer Engine's userbuffers do (:mod:`.transformer_overlap`). Context
parallelism's communication around the attention (a ring, an all-gather or all-to-alls) is
:mod:`.transformer_cp`'s. Mixture
of experts replaces the MLP by a router, a dispatch over the EP group, the local experts
and a combine (:mod:`.transformer_dispatch`: one all-to-all each, or DeepEP's two).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

from ..kernels import Kernel
from .transformer_cp import ContextParallel
from .transformer_dispatch import exchange
from .transformer_kernels import LayerKernels
from .transformer_mla import LatentKernels
from .transformer_module_offload import ATTENTION, EXPERTS, MLP_NORM, ModuleOffload
from .transformer_overlap import Block, Frontier, Userbuffers
from .transformer_shapes import has_exchange
from .transformer_spec import TransformerSpec
from .transformer_stream import OpStream


@dataclass(frozen=True)
class Groups:
    """Logical network dims of each communicator of a stage's ranks."""

    tp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    dp: tuple[int, ...]          # dense gradients: data x context (x expert) parallel
    expert_dp: tuple[int, ...]   # expert gradients
    replicate: tuple[int, ...] = ()   # FSDP's replicas (hybrid sharding): part of dp
    #: with ``dispatcher: deepep``, the EP dims inside a node and across nodes, and the nodes
    ep_intra: tuple[int, ...] = ()
    ep_inter: tuple[int, ...] = ()
    ep_nodes: int = 1


class PassBuilder(OpStream):
    """Appends the ops of layer passes to one stage's op list."""

    def __init__(self, spec: TransformerSpec, groups: Groups, kernels: LayerKernels) -> None:
        super().__init__(groups.tp)
        self.spec = spec
        self.groups = groups
        self.k = kernels
        # the helpers see the builder through a weak proxy: a cycle would keep every op it
        # built alive until the cyclic collector ran (gigabytes over a loop of large runs)
        me = weakref.proxy(self)
        #: the layers' overlapped tensor-parallel communication (``tp_comm_overlap``)
        self.ub = Userbuffers(me) if spec.tp_comm_overlap and spec.tp > 1 else None
        #: context parallelism's communication around each layer's attention
        self.cp = ContextParallel(me)
        #: the experts' saved tensors copied to the host and back (``offload_modules``)
        self.module_offload = ModuleOffload(spec, me, kernels)

    def tp_block(self, name: str, kernels: tuple[Kernel, ...], layer: int, pass_: str,
                 x: Frontier, *, gather: bool, reduce: bool, after: Frontier = (),
                 gathered: int = 0, reduced: int = 0) -> Frontier:
        """A block between tensor-parallel collectives: an all-gather of its input before it
        (sequence parallelism), an all-reduce or reduce-scatter of its output after it, each
        waited for; the reduction also waits for ``after``. ``gathered``: each NPU's bytes
        in the all-gather (default its activation shard); ``reduced``: the reduction's
        buffer (default a full activation)."""
        s, k, tp = self.spec, self.k, self.groups.tp
        if s.tp == 1:
            return (self.compute(name, kernels, layer, pass_, x),)
        before: list[int] = []
        if gather and s.sp:
            before.append(self.collective(f"{name}.all_gather", "all_gather",
                                          gathered or k.shard_bytes, tp, layer, pass_, x))
        block = self.compute(name, kernels, layer, pass_, tuple(before) or x)
        if not reduce:
            return (block,)
        return (self.collective(f"{name}.{_reduce(s)}", _reduce(s),
                                reduced or k.activation_bytes, tp, layer, pass_,
                                (block, *after)),)

    def layer_block(self, name: str, block: Block, layer: int, x: Frontier, *, gather: bool,
                    reduce: bool, gathered: int = 0) -> Frontier:
        """A forward block of a transformer layer: overlapped with its collectives under
        ``tp_comm_overlap`` (:mod:`.transformer_overlap`), else :meth:`tp_block`."""
        if self.ub is not None:
            return self.ub.forward(name, block, layer, x, gather=gather, reduce=reduce)
        return self.tp_block(name, block.kernels, layer, "fwd", x, gather=gather,
                             reduce=reduce, gathered=gathered or self._gathered(block.head))

    def _gathered(self, head: tuple[Kernel, ...]) -> int:
        """Each NPU's bytes in the all-gather into a block's ``head``: its layouts, or 16
        bits where an adapter reads the norm output the layer returns (gathered unquantized,
        then cast: ``return_layernorm_output_gathered``)."""
        return self.k.shard_bytes if has_exchange(head) else self.k.gather_both_bytes

    # ------------------------------------------------------------------ forward
    def forward(self, layer: int, tag: str, x: Frontier, carry: tuple[Kernel, ...] = ()
                ) -> Frontier:
        """One layer's forward; ``carry`` kernels (the previous layer's residual add) run
        first. Returns the frontier of its output, whose residual add is left to the next
        compute op: see :attr:`residual`."""
        k, name, mixer = self.k, f"{tag}.layer{layer}", self.spec.mixer(layer)
        norm = f"{name}.norm"
        if mixer:   # (a hybrid model's layer may be its mixer or its MLP alone)
            x = (self.compute(norm, carry + k.norm, layer, "fwd", x),)
            x = self._mamba_forward(name, layer, x) if mixer == "mamba" else \
                self.module_offload.after_forward(name, layer, self._attention_forward(
                    name, layer, x), ATTENTION)
            carry, norm = k.residual, f"{name}.norm2"
        if not self.spec.has_mlp(layer):
            return x
        x = (self.compute(norm, carry + k.norm, layer, "fwd", x),)
        if self.spec.is_moe(layer):   # (the pre-MLP norm's group closes after the block)
            return self.module_offload.after_forward(
                name, layer, self.moe_forward(name, layer, x), MLP_NORM)
        return self.mlp_forward(f"{name}.mlp", k.of_layer(layer), layer, x)

    def mlp_forward(self, name: str, k: LayerKernels, layer: int, x: Frontier) -> Frontier:
        """A dense MLP's forward (a layer's, or a mixture of experts' shared experts): FC1,
        the activation and FC2 between their tensor-parallel collectives."""
        return self.layer_block(name, Block(k.fc1, k.activation, k.fc2, "fc1", "fc2"), layer,
                                x, gather=True, reduce=True)

    @property
    def residual(self) -> tuple[Kernel, ...]:
        """The kernels a layer's output still owes (its residual add)."""
        return self.k.residual

    def _mamba_forward(self, name: str, layer: int, x: Frontier) -> Frontier:
        m = self.k.of_layer(layer).mamba
        return self.layer_block(f"{name}.mamba", Block(m.in_proj, m.core, m.out_proj,
                                                       "in_proj", "out_proj"),
                                layer, x, gather=True, reduce=True)

    def _attention_forward(self, name: str, layer: int, x: Frontier) -> Frontier:
        k, s = self.k.of_layer(layer), self.spec   # the layer's own (its window, if any)
        if isinstance(k, LatentKernels):   # the latents are projected down, then gathered
            x = (self.compute(f"{name}.attention.down", k.down, layer, "fwd", x),)
            return self.layer_block(f"{name}.attention", Block(
                k.qkv, k.rope + k.core_attention, k.projection, "qkv", "projection"), layer,
                x, gather=True, reduce=True, gathered=k.latent_gather_bytes)
        if s.cp == 1:
            return self.layer_block(f"{name}.attention", Block(
                k.qkv, k.rope + k.core_attention, k.projection, "qkv", "projection"), layer,
                x, gather=True, reduce=True)
        qkv = self.layer_block(f"{name}.qkv", Block(k.qkv, k.rope, head_name="qkv"), layer,
                               x, gather=True, reduce=False)
        return self.cp.forward(name, layer, qkv, k)

    def moe_forward(self, name: str, layer: int, x: Frontier) -> Frontier:
        k, s = self.k.of_layer(layer), self.spec
        x = (self.compute(f"{name}.router", k.router + k.latent_down + k.permute, layer, "fwd",
                          x),)
        if s.ep > 1:
            x = exchange(self, f"{name}.dispatch", True, layer, "fwd", x)
        x = self._expert_tp(f"{name}.experts", k.sort_chunks + k.experts + k.sort_chunks,
                            layer, "fwd", x)
        x = self.module_offload.after_forward(name, layer, x, EXPERTS)
        if s.ep > 1:
            x = exchange(self, f"{name}.combine", False, layer, "fwd", x)
        x = (self.compute(f"{name}.unpermute", k.unpermute + k.latent_up, layer, "fwd", x),)
        shared = k.shared_expert
        if shared is not None:   # after the combine, as Megatron-Core r0.10-r0.12 runs them
            # (without --moe-shared-expert-overlap; later releases moved them earlier)
            x = self.mlp_forward(f"{name}.shared_expert", shared, layer, x)
        return x

    # ------------------------------------------------------------------ backward
    def backward(self, layer: int, tag: str, g: Frontier, carry: tuple[Kernel, ...] = ()
                 ) -> Frontier:
        """One layer's backward (after its recomputed forward, if any); ``carry`` kernels
        (the next layer's norm backward) run first. Returns the frontier of the gradient of
        its input and leaves the norm backward owed, as :attr:`norm_backward`."""
        k, s, name = self.k, self.spec, f"{tag}.layer{layer}"
        g = (self.compute(f"{name}.residual_backward", carry + k.residual_backward, layer,
                          "ig", g),)
        if s.has_mlp(layer):
            if s.is_moe(layer):   # (the pre-MLP norm's group back before the block's)
                g = self._moe_backward(name, layer, self.module_offload.before_backward(
                    name, layer, g, MLP_NORM))
                self.module_offload.after_backward(name, layer, MLP_NORM)
            else:
                m = k.of_layer(layer)
                g = self._dgrad_wgrad(f"{name}.mlp", Block(
                    m.fc2_dgrad, m.activation_backward, m.fc1_dgrad, "fc2", "fc1"),
                    m.mlp_wgrad, layer, g, head_wgrads=m.head_wgrads("linear_fc2"),
                    layer_norm_linear="fc1")
            if not s.mixer(layer):
                return g
            g = (self.compute(f"{name}.norm2_backward", k.norm_backward + k.residual_backward,
                              layer, "ig", g),)
        if s.mixer(layer) == "mamba":
            mk = k.of_layer(layer).mamba
            return self._dgrad_wgrad(f"{name}.mamba", Block(
                mk.out_proj_dgrad, mk.core_backward, mk.in_proj_dgrad, "out_proj", "in_proj"),
                mk.wgrad, layer, g)
        # the rotary backward ends the body, before the QKV layer's backward (and its input
        # gathered again) starts; with CP after the key gradients are reduced (``between``)
        k = k.of_layer(layer)   # the layer's attention (its window, if any)
        g = self.module_offload.before_backward(name, layer, g, ATTENTION)
        g = self._attention_backward(name, layer, k, g)
        self.module_offload.after_backward(name, layer, ATTENTION)
        return g

    def _attention_backward(self, name: str, layer: int, k: LayerKernels, g: Frontier
                            ) -> Frontier:
        s = self.spec
        core = k.core_attention_backward + (k.rope if s.cp == 1 else ())
        core, later = self.cp.split_backward(core)   # what runs after the head's block
        order = None
        if "core_attn" in s.recomputed_modules:   # re-run before its backward, flash kernels
            core = k.core_attention + core   # too (Megatron-Core's checkpoint); unfused: the
            if s.attention == "unfused":     # scores, softmax, dropout, first without overlap
                order = k.core_attention + k.projection_dgrad + \
                    core[len(k.core_attention):] + k.qkv_dgrad
        dgrad = Block(k.projection_dgrad, core, k.qkv_dgrad, "projection", "qkv", order)
        between = None
        if s.cp > 1:   # the key and value gradients reduced over CP before the QKV gradient
            def between(x: Frontier) -> Frontier:
                x, reduced = self.cp.backward(name, layer, g, x, later, k)
                if not k.rope:
                    return (reduced,)
                return (self.compute(f"{name}.rope_backward", k.rope, layer, "ig",
                                     (*x, reduced)),)
        if not isinstance(k, LatentKernels):
            return self._dgrad_wgrad(f"{name}.attention", dgrad, k.attention_wgrad, layer, g,
                                     between, head_wgrads=k.head_wgrads("linear_proj"),
                                     layer_norm_linear="qkv")
        # latent attention: the latents' gradients reduced, then the down projections'
        g = self._dgrad_wgrad(f"{name}.attention", dgrad, k.attention_wgrad, layer, g,
                              reduced=k.latent_bytes, regathered=k.latent_gather_bytes,
                              layer_norm_linear="qkv")
        g = (self.compute(f"{name}.attention.down.dgrad", k.down_dgrad, layer, "ig", g),)
        self.compute(f"{name}.attention.down.wgrad", k.down_wgrad, layer, "wg")
        return g

    @property
    def norm_backward(self) -> tuple[Kernel, ...]:
        return self.k.norm_backward

    def _dgrad_wgrad(self, name: str, dgrad: Block, wgrad: tuple[Kernel, ...],
                     layer: int, g: Frontier,
                     between: Callable[[Frontier], Frontier] | None = None, *,
                     reduced: int = 0, regathered: int = 0, head_wgrads: int = 1,
                     layer_norm_linear: str = "") -> Frontier:
        """A block's data gradient between tensor-parallel collectives, then its weight
        gradients, which run while the data gradient's collective does. ``between`` adds
        what the tail (the column-parallel layer) also waits for, given the frontier before
        it. The tail's backward starts with its input gathered again (sequence
        parallelism), beside its data gradient; under ``tp_comm_overlap`` the head's weight
        gradient (the first ``head_wgrads`` kernels of ``wgrad``) runs right after the head,
        and the tail's collectives are overlapped (the tail's reduce-scatter pipelined with
        its data gradient if it is a layer-norm column-parallel layer, ``layer_norm_linear``
        ``qkv`` or ``fc1``, and ``tp_comm_overlap_rs_dgrad`` says so)."""
        ub, s = self.ub, self.spec
        if ub is None and between is None and not (s.sp and s.tp > 1):
            # nothing starts inside the block: one op
            out = self.tp_block(f"{name}.dgrad", dgrad.kernels, layer, "ig", g, gather=True,
                                reduce=True, reduced=reduced)
            self.compute(f"{name}.wgrad", wgrad, layer, "wg")
            return out
        if ub is not None:
            x = ub.head_backward(f"{name}.dgrad", dgrad, wgrad[:head_wgrads], layer, g)
        else:
            x = self.tp_block(f"{name}.dgrad", dgrad.kernels[:-len(dgrad.tail)], layer, "ig",
                              g, gather=True, reduce=False, gathered=self.k.gather_both_bytes)
        if between is not None:
            x = (*x, *between(x))
        tail = f"{name}.dgrad.{dgrad.tail_name}"
        if ub is not None:
            return ub.bulk(tail, dgrad.tail, wgrad[head_wgrads:], layer, x, layer_norm_linear)
        regather = self.regather(tail, layer, x, regathered)
        out = self.tp_block(tail, dgrad.tail, layer, "ig", x, gather=False, reduce=True,
                            after=regather, reduced=reduced)
        self.compute(f"{name}.wgrad", wgrad, layer, "wg", regather)
        return out

    def output_backward(self, name: str, row: int, g: Frontier) -> Frontier:
        """The output layer's data gradient, reduced over TP (the layer is column-parallel:
        its 16-bit input gathered again with sequence parallelism), and beside it its weight
        gradient; the frontier of the gradient of its input."""
        k = self.k
        regather = self.regather(f"{name}.dgrad", row, g, k.shard_bytes)
        out = self.tp_block(f"{name}.dgrad", k.logits_dgrad, row, "ig", g, gather=False,
                            reduce=True, after=regather)
        self.compute(f"{name}.wgrad", k.logits_wgrad, row, "wg", regather)
        return out

    def embedding_backward(self, name: str, row: int, g: Frontier,
                           carry: tuple[Kernel, ...] = ()) -> None:
        """The embedding's weight gradient (after ``carry`` kernels), from the gradient of
        its output all-gathered over TP with sequence parallelism."""
        if self.spec.tp > 1 and self.spec.sp and not self.spec.frozen:
            g = (self.collective(f"{name}.all_gather", "all_gather", self.k.shard_bytes,
                                 self.groups.tp, row, "ig", g),)
        self.compute(f"{name}.backward", carry + self.k.embedding_backward, row, "wg", g)

    def regather(self, name: str, layer: int, g: Frontier, nbytes: int = 0) -> Frontier:
        """With sequence parallelism a column-parallel layer keeps its input sharded and
        gathers it again for its weight gradient, beside its data gradient (Megatron-LM's
        ``LinearWithGradAccumulationAndAsyncCommunication``; the data gradient's
        reduce-scatter waits for it). ``nbytes``: each NPU's shard (default a transformer
        layer's, FP8 in FP8 training)."""
        if self.spec.tp == 1 or not self.spec.sp or self.spec.frozen:
            return ()   # (a frozen layer has no weight gradient to gather it for)
        return (self.collective(f"{name}.input.all_gather", "all_gather",
                                nbytes or self.k.gather_bytes, self.groups.tp, layer, "ig", g),)

    def _moe_backward(self, name: str, layer: int, g: Frontier) -> Frontier:
        k, s = self.k.of_layer(layer), self.spec
        shared: Frontier = ()
        if k.shared_expert is not None:
            # computed last forward, so its backward comes first, and the routed path's
            # communication waits for its kernels (no shared-expert overlap)
            e = k.shared_expert
            shared = self._dgrad_wgrad(f"{name}.shared_expert", Block(
                e.fc2_dgrad, e.activation_backward, e.fc1_dgrad, "fc2", "fc1"), e.mlp_wgrad,
                layer, g)
            g = (*g, *shared, *(() if self.last is None else (self.last,)))
        # the up projection's data gradient first (the down projection's GEMM shape)
        g = (self.compute(f"{name}.unpermute_backward", k.latent_dgrads[0] + k.unpermute, layer,
                          "ig", g),)
        if s.ep > 1:
            g = exchange(self, f"{name}.combine_backward", True, layer, "ig", g)
        g = self._expert_tp(f"{name}.experts.dgrad",
                            k.sort_chunks + k.experts_dgrad + k.sort_chunks, layer, "ig",
                            self.module_offload.before_backward(name, layer, g, EXPERTS))
        self.module_offload.after_backward(name, layer, EXPERTS)
        if s.ep > 1:
            g = exchange(self, f"{name}.dispatch_backward", False, layer, "ig", g)
        g = (self.compute(f"{name}.permute_backward", k.permute + k.latent_dgrads[1], layer, "ig",
                          g),)
        self.compute(f"{name}.experts.wgrad", k.experts_wgrad, layer, "wg")
        return (*g, *shared)

    def _expert_tp(self, name: str, kernels: tuple[Kernel, ...], layer: int, pass_: str,
                   x: Frontier) -> Frontier:
        """The local experts' pass; split over the tensor-parallel ranks (``expert_tp > 1``)
        it works on the TP group's tokens: an all-gather of the received ones before it, a
        reduce-scatter of its output after it (backward: the same two, as the gradients of
        the forward's reduce-scatter and all-gather)."""
        k, etp = self.k, self.spec.expert_tp
        if etp > 1:
            x = (self.collective(f"{name}.all_gather", "all_gather", k.dispatch_bytes,
                                 self.groups.tp, layer, pass_, x),)
        x = (self.compute(name, kernels, layer, pass_, x),)
        if etp > 1:
            x = (self.collective(f"{name}.reduce_scatter", "reduce_scatter",
                                 k.dispatch_bytes * etp, self.groups.tp, layer, pass_, x),)
        return x


def _reduce(spec: TransformerSpec) -> str:
    """Megatron's ``g`` operator forward (and ``f`` backward): reduce-scatter with sequence
    parallelism, else all-reduce."""
    return "reduce_scatter" if spec.sp else "all_reduce"
