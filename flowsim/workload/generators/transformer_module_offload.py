"""Megatron-Core's fine-grained activation offloading (``offload_modules``: its
``--fine-grained-activation-offloading`` with ``--offload-modules``; ``megatron/core/
pipeline_parallel/fine_grained_activation_offload.py``, Megatron-LM 24bad8e67).

A named module's call is a *group*: the tensors autograd saves inside it, those of at least
``offload_min_elements`` elements each, are copied to host memory on a copy stream once the
module's forward is done, and freed on the GPU when the copy ends. The compute never waits
for a copy unless ``offload_max_inflight`` is set: then, after issuing a copy, it waits for
the oldest ones of its kind in the pass until at most that many are in flight (0: for this
one). In the backward the groups come back one ahead: when a named module's backward is
done, the copy back of the group before it (in forward order) starts, after the compute
issued so far, and that group's backward waits for it; when the pass has none left, the last
group of the next backward pass comes back. The last group of each kind stays on the GPU in
a forward whose backward comes next (or runs beside it: combined 1F1B) and in the first
backward's forward (Megatron-Core's steady state, after its first iteration).

What a group holds (``n`` tokens of the rank, ``n_sp`` in sequence-parallel regions; a
linear layer's saved input as :mod:`.transformer_saved` sizes it, one byte in FP8):

- ``attn_norm``: a separate attention norm's input (latent attention's; the others' norm is
  fused into the QKV layer, an identity module that offloads nothing);
- ``qkv_linear``: the QKV layer's saved inputs (the fused norm's 16-bit input and its output;
  latent attention's hidden input and latents);
- ``core_attn``: the fused attention's queries, keys, values and output (16-bit); nothing
  when ``recompute_modules`` checkpoints it (Megatron-Core's checkpointed branch has no
  offloading context);
- ``attn_proj``: the output projection's input (the attention's output, already counted
  beside ``core_attn``, but for its own quantized copy under delayed scaling);
- ``mlp_norm``: a mixture of experts' pre-MLP norm input (a dense MLP's norm is fused);
- ``expert_fc1``: the experts' input, one tensor per local expert (Transformer Engine's
  grouped linear saves them apart: each compared with the size limit);
  ``moe_act``: FC1's output (16-bit: its checkpoint keeps no FP8 copy);
- ``fused_group_mlp``: Transformer Engine's fused grouped MLP (``fused_grouped_mlp``) whole:
  FC1's input, its 16-bit output and FC2's input, which ``moe_act`` recomputation leaves out
  (the activation's backward rebuilds it).

The attention's modules make one group per layer, as do the experts': each copy starts when
the block's forward is done, and each copy back is waited for before the block's backward.
A norm's group closes after its block's residual add (Megatron-Core commits it there), so a
pre-MLP norm's copy starts after the mixture of experts' forward and is waited for before
its backward. The copies run on the stage's
host-copy resource at the device's host-link rate (:attr:`flowsim.compute.Device.host_gbps`),
both ways on one queue, so where they cannot hide the stalls are an upper bound of
Megatron-Core's two streams'. Mamba mixers offload nothing (Megatron-Core's have no hooks).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from .transformer_choices import OFFLOAD_GROUPS
from .transformer_kernels import LayerKernels
from .transformer_mla import LatentKernels
from .transformer_overlap import Frontier
from .transformer_saved import Saved, saved_inputs
from .transformer_schedule import pass_tag
from .transformer_shapes import ACT, expert_activation_input_bytes
from .transformer_spec import TransformerSpec
from .transformer_stream import OpStream

#: the kinds of group in a layer, in the order Megatron-Core closes them
ATTENTION, EXPERTS, MLP_NORM = KINDS = tuple(OFFLOAD_GROUPS)
#: a pass's micro-batch and model chunk, the start of its op names
_TAG = re.compile(r"^(mb\d+(?:\.chunk\d+)?)\.")


def offloaded_bytes(spec: TransformerSpec, k: LayerKernels, layer: int, kind: str) -> float:
    """Bytes one group of ``kind`` of ``layer`` copies to the host (0: none)."""
    modules = spec.offload_modules
    if not modules:
        return 0.0
    e = k.of_layer(layer)
    saved = saved_inputs(e.spec)   # what each linear layer keeps, as the memory counts it
    tensors: list[tuple[float, float]] = []   # (elements, bytes per element)
    if kind == ATTENTION and spec.mixer(layer) == "attention":
        tensors = _attention_tensors(spec, e, saved)
    elif kind == MLP_NORM and _named(spec, layer, kind):
        tensors = [(e.n_sp * spec.hidden, ACT)]
    elif kind == EXPERTS and _named(spec, layer, kind):
        local = spec.experts // spec.ep
        rows, width = e.expert_rows * local, e.expert_width
        if "fused_group_mlp" in modules:   # one grouped tensor
            tensors.append((rows * e.expert_dim, saved.experts_fc1))
        if "expert_fc1" in modules:   # one per local expert
            tensors += [(e.expert_rows * e.expert_dim, saved.experts_fc1)] * local
        if "moe_act" in modules or "fused_group_mlp" in modules:
            tensors.append((rows * width, expert_activation_input_bytes(spec)))
        if "fused_group_mlp" in modules and "moe_act" not in spec.recomputed_modules:
            tensors.append((rows * width, saved.experts_fc2))
    return float(sum(n * size for n, size in tensors if n >= spec.offload_min_elements))


def _attention_tensors(spec: TransformerSpec, k: LayerKernels, saved: Saved
                       ) -> list[tuple[float, float]]:
    """What the attention's named modules save: (elements, bytes per element) each."""
    modules, n, n_sp, h = spec.offload_modules, k.n, k.n_sp, spec.hidden
    norm: list[tuple[float, float]]
    qkv: list[tuple[float, float]]
    if isinstance(k, LatentKernels):
        qk, v = k.heads * k.head_qk, k.heads * k.m.v_head_dim
        norm, qkv = [(n_sp * h, ACT)], [(n_sp * h, ACT), (n_sp * k.latent, ACT)]
        widths = (qk, qk, v, v)
    else:   # the norm fused into the QKV layer, which keeps its input and its output
        norm, qkv, widths = [], [(n_sp * h, ACT), (n_sp * h, saved.qkv)], (k.q, k.kv, k.kv, k.q)
    tensors: list[tuple[float, float]] = norm if "attn_norm" in modules else []
    if "qkv_linear" in modules:
        tensors = tensors + qkv
    core = "core_attn" in modules and "core_attn" not in spec.recomputed_modules
    if core:   # queries, keys, values, output
        tensors = tensors + [(n * w, ACT) for w in widths]
    if "attn_proj" in modules and (not core or saved.proj != ACT):   # (the output again)
        tensors = tensors + [(n * widths[-1], saved.proj)]
    return tensors


class ModuleOffload:
    """Adds one stage's group copies to its ops (nothing without ``offload_modules``)."""

    def __init__(self, spec: TransformerSpec, b: OpStream, k: LayerKernels) -> None:
        self.spec, self.b, self.k = spec, b, k
        #: per pass (tag): the (layer, kind) groups it copies
        self._offloaded: dict[str, frozenset[tuple[int, str]]] = {}
        #: per pass: its copies to the host not yet brought back, in forward order
        self._copies: dict[str, list[tuple[tuple[int, int], int]]] = {}
        self._reloads: dict[tuple[str, int, str], int] = {}   # copies back not waited for
        #: per pass and kind: copies the compute has not waited for
        self._in_flight: dict[tuple[str, str], list[int]] = {}
        self._keep_last: set[tuple[int, int]] = set()   # forwards (chunk, m) keeping theirs
        self._next: dict[str, str] = {}   # a backward pass -> the next one
        self._backward = ""   # the backward pass being built

    def plan(self, order: Sequence[tuple[str, int, int]], paired: Collection[int]) -> None:
        """The stage's passes in order (``(pass, chunk, micro-batch)``), ``paired``: the
        indices of forwards run beside the backward after them."""
        backwards = [u[1:] for u in order if u[0] == "bwd"]
        self._keep_last = {u[1:] for i, u in enumerate(order) if u[0] == "fwd" and (
            i in paired or order[i + 1:i + 2] == [("bwd", *u[1:])])} | set(backwards[:1])
        self._next = {pass_tag(self.spec, *a): pass_tag(self.spec, *b)
                      for a, b in zip(backwards, backwards[1:])}

    def begin_forward(self, chunk: int, m: int, layers: list[int]) -> None:
        """Forward ``(chunk, m)`` runs ``layers`` (its chunk's, then its depths)."""
        tag, groups = pass_tag(self.spec, chunk, m), set[tuple[int, str]]()
        if self.spec.offload_modules:
            keep = (chunk, m) in self._keep_last
            for kind in KINDS:
                calls = [i for i in layers if offloaded_bytes(self.spec, self.k, i, kind)]
                groups.update((i, kind) for i in (calls[:-1] if keep else calls))
        self._offloaded[tag] = frozenset(groups)
        self._copies[tag] = []

    def begin_backward(self, chunk: int, m: int) -> None:
        """Backward ``(chunk, m)`` starts."""
        self._backward = pass_tag(self.spec, chunk, m)

    def after_forward(self, name: str, layer: int, x: Frontier, kind: str) -> Frontier:
        """After a group's forward ``x`` (op ``name``'s layer): its copy to the host, and
        the copies the compute then waits for."""
        if not self.spec.offload_modules:   # (the common case: no lookups per layer)
            return x
        tag = _tag(name)
        if (layer, kind) not in self._offloaded.get(tag, ()) or ".recompute." in name:
            return x
        copy = self._copy(f"{name}.{kind}.offload", layer, kind, "fwd", x)
        self._copies[tag].append(((layer, KINDS.index(kind)), copy))
        limit = self.spec.offload_max_inflight
        if limit is None:
            return x
        queue = self._in_flight.setdefault((tag, kind), [])   # (Megatron-Core's: per pass)
        queue.append(copy)
        waited = queue[:max(0, len(queue) - limit)]
        del queue[:len(waited)]
        return (*x, *waited)

    def before_backward(self, name: str, layer: int, g: Frontier, kind: str) -> Frontier:
        """A group's backward input: the group back on the GPU (brought now if no later
        group's backward brought it)."""
        if not self.spec.offload_modules:
            return g
        tag = _tag(name)
        copies = self._copies.get(tag, [])
        if copies and copies[-1][0] == (layer, KINDS.index(kind)):   # not brought ahead
            self._reload(tag, layer, kind, copies.pop()[1])
        reload = self._reloads.pop((tag, layer, kind), None)
        return g if reload is None else (*g, reload)

    def after_backward(self, name: str, layer: int, kind: str) -> None:
        """A group's backward is issued: the group before it comes back (after a named
        module's backward only: others have no hook to bring it)."""
        if not self.spec.offload_modules or not _named(self.spec, layer, kind):
            return
        tag = _tag(name)
        copies = self._copies.get(tag, [])
        if copies and copies[-1][0] < (layer, KINDS.index(kind)):
            (before, index), copy = copies.pop()
            self._reload(tag, before, KINDS[index], copy)
        elif not copies and tag == self._backward:   # none left: the next pass's last
            after = self._next.get(tag, "")
            if self._copies.get(after):
                (before, index), copy = self._copies[after].pop()
                self._reload(after, before, KINDS[index], copy)

    def _reload(self, tag: str, layer: int, kind: str, copy: int) -> None:
        after = (copy,) if self.b.last is None else (copy, self.b.last)
        self._reloads[tag, layer, kind] = self._copy(f"{tag}.layer{layer}.{kind}.reload",
                                                     layer, kind, "ig", after)

    def _copy(self, name: str, layer: int, kind: str, pass_: str, deps: Frontier) -> int:
        return self.b.host_copy(name, offloaded_bytes(self.spec, self.k, layer, kind), layer,
                                pass_, deps)


def _named(spec: TransformerSpec, layer: int, kind: str) -> bool:
    """Whether ``layer`` has a group of ``kind`` (a named module, whatever it copies)."""
    if not OFFLOAD_GROUPS[kind].intersection(spec.offload_modules):
        return False
    if kind == ATTENTION:
        return spec.mixer(layer) == "attention"
    return spec.has_mlp(layer) and spec.is_moe(layer)


def _tag(name: str) -> str:
    match = _TAG.match(name)
    return match.group(1) if match else ""
