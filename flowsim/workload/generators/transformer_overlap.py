"""Tensor-parallel communication overlapped with the GEMMs of a transformer layer, as
Transformer Engine's userbuffers run it (Megatron's ``--tp-comm-overlap``, NeMo's
``ub_tp_comm_overlap``; TransformerEngine v1.11 ``csrc/comm_gemm_overlap.h``).

Every tensor-parallel collective of a layer's linear layers is split and pipelined with the
GEMM that needs or makes its data, so only part of it can hide:

* **ring exchange** (the all-gather before QKV and FC1 forward, and before the projection's
  and FC2's data gradients): the GEMM runs in ``tp`` chunks of tokens, the local one first;
  each step sends the chunk just used to the next rank (copy engine, no SMs) while the GEMM
  works on it. With ``g`` a chunk's GEMM and ``c`` one transfer, the block takes
  ``(tp - 1) max(g, c) + g``: the all-gather beside the first ``tp - 1`` chunks, the last
  chunk after it (two compute ops and one collective give exactly that).
* **pipeline** (the reduce-scatter after the projection and FC2 forward): the GEMM runs in
  :data:`RS_SPLITS` chunks of its output features, on the SMs the reduce-scatter kernel does
  not hold (NeMo's configs set ``set_sm_margin``), and each chunk's reduce-scatter runs
  beside the next chunk: ``g + (s - 1) max(g, r) + r`` (the first chunk, then the other
  chunks beside the first ``s - 1`` reduce-scatters, then the last one).
* **bulk** (backward of QKV and FC1): the layer's input, saved sharded, is all-gathered again
  for the weight gradient beside the data-gradient GEMM; the data gradient is reduce-
  scattered beside the weight-gradient GEMM. Their SM contention is not priced (the bulk
  kernels hold 2-4 SMs, 24 beside the QKV weight gradient).

In FP8 training the all-gathers move FP8 (one byte per element); the bulk reduce-scatter
stays 16-bit. Two sets of settings (``tp_comm_overlap_cfg``, :data:`UB_SETTINGS`) differ in
the pipelined reduce-scatters:

* ``nemo`` (the default): NeMo's H100 userbuffers configs for a hidden size of 8,192
  (``ub_cfg_h100_h8192_tp4_mbs1_seqlen8192.yaml``, also the DGX Cloud Llama 3.1 70B recipe)
  hold SMs beside the pipelined GEMMs (``set_sm_margin``) and, in FP8, reduce-scatter FP8
  (``fp8_buf``);
* ``te_default``: Transformer Engine's own defaults (``initialize_ub`` in v1.11's
  ``module/base.py``), what Megatron-LM runs without ``--tp-comm-overlap-cfg``: no SM
  margin (the GEMMs run on every SM, beside the reduce-scatter kernel's) and 16-bit
  buffers for the reduce-scatters (``fp8_buf`` only on the all-gathers).

The output layer and the embedding are plain Megatron layers and keep their synchronous
collectives.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..kernels import Gemm, Kernel
from .transformer_kernels import LayerKernels
from .transformer_shapes import Exchange, has_exchange
from .transformer_spec import TransformerSpec

#: the ops whose data the next op needs
Frontier = tuple[int, ...]


class Builder(Protocol):
    """What the overlap needs of :class:`~.transformer_passes.PassBuilder`."""

    spec: TransformerSpec
    k: LayerKernels
    groups: Any

    def compute(self, name: str, kernels: tuple[Kernel, ...], layer: int, pass_: str,
                deps: Frontier = ()) -> int: ...

    def collective(self, name: str, collective: str, size: int, dims: tuple[int, ...],
                   layer: int, pass_: str, deps: Frontier) -> int: ...

    def layer_block(self, name: str, block: Block, layer: int, x: Frontier, *, gather: bool,
                    reduce: bool, gathered: int = 0) -> Frontier: ...


#: chunks of a pipelined reduce-scatter (``num_splits``, the same in both settings)
RS_SPLITS = 4


@dataclass(frozen=True)
class UbSettings:
    """What differs between userbuffers settings (see the module docstring).

    Attributes
    ----------
    rs_sms : dict
        SMs held beside the projection's and FC2's pipelined GEMMs (``set_sm_margin``).
    rs_fp8 : bool
        The pipelined reduce-scatters move FP8 in FP8 training (``fp8_buf``).
    """

    rs_sms: dict[str, int]
    rs_fp8: bool


#: settings by ``tp_comm_overlap_cfg``
UB_SETTINGS = {"nemo": UbSettings({"projection": 24, "fc2": 16}, rs_fp8=True),
               "te_default": UbSettings({"projection": 0, "fc2": 0}, rs_fp8=False)}


@dataclass(frozen=True)
class Block:
    """A block between tensor-parallel collectives: the linear layer fed by the all-gather
    (``head``, a row-parallel layer's data gradient in backward), what follows it, and the
    linear layer whose output is reduce-scattered (``tail``). ``order``, when given, is the
    block's kernels in the order they are priced without overlap (default: the three parts
    in order)."""

    head: tuple[Kernel, ...] = ()
    body: tuple[Kernel, ...] = ()
    tail: tuple[Kernel, ...] = ()
    head_name: str = "head"
    tail_name: str = "tail"
    order: tuple[Kernel, ...] | None = None

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return self.order if self.order is not None else self.head + self.body + self.tail


def _split(kernels: tuple[Kernel, ...], *, rows: int = 1, cols: int = 1, margin: int = 0
           ) -> tuple[tuple[Kernel, ...], Gemm, Gemm, tuple[Kernel, ...]]:
    """The other kernels of a linear layer (its FP8 casts), one chunk of its GEMM (``rows``
    chunks of tokens or ``cols`` chunks of output features), the other chunks as one GEMM,
    ``margin`` SMs held, and what follows the layer outside the overlap (a LoRA adapter:
    from its first GEMM or exchange on). The other chunks run on Transformer Engine's
    several GEMM streams, so their tiles fill each other's waves: one GEMM of their rows (or
    columns) prices that; the lone chunk pays its own wave quantization."""
    assert rows > 1 or cols > 1, "a split into one chunk"
    first = next((i for i, k in enumerate(kernels) if isinstance(k, Gemm)), None)
    if first is None:
        raise ValueError(f"a linear layer has a GEMM, got {kernels!r}")
    end = next((i for i in range(first + 1, len(kernels))
                if isinstance(kernels[i], Gemm | Exchange)), len(kernels))
    g = kernels[first]
    assert isinstance(g, Gemm)
    m, n = max(1, g.m // rows), max(1, g.n // cols)
    one = replace(g, m=m, n=n, sm_margin=margin)
    others = replace(g, m=max(1, g.m - m) if rows > 1 else g.m,
                     n=max(1, g.n - n) if cols > 1 else g.n, sm_margin=margin)
    return kernels[:first] + kernels[first + 1:end], one, others, kernels[end:]


class Userbuffers:
    """Appends a layer's blocks with userbuffers overlap to a pass builder."""

    def __init__(self, builder: Builder) -> None:
        self.b = builder
        self.settings = UB_SETTINGS[builder.spec.tp_comm_overlap_cfg]

    def rs_dgrad(self, layer_norm_linear: str) -> bool:
        """Whether a column-parallel layer reduce-scatters its data gradient pipelined with
        it (``tp_comm_overlap_rs_dgrad``). Megatron-Core sets it on its layer-norm
        column-parallel layers, which the caller names (``qkv``, ``fc1``; empty for any other
        layer, a shared expert's FC1 among them), unless the userbuffers leave the layer's
        collectives to NCCL."""
        s = self.b.spec
        return bool(layer_norm_linear) and s.tp_comm_overlap_rs_dgrad and \
            not s.nccl_gathers(layer_norm_linear)

    def gather(self, name: str, head: tuple[Kernel, ...], layer: int, pass_: str,
               x: Frontier) -> Frontier:
        """Ring exchange: the all-gather of ``x``'s shards beside the first ``tp - 1`` chunks
        of ``head``'s GEMM, the last chunk after it."""
        b, tp = self.b, self.b.spec.tp
        ag = b.collective(f"{name}.all_gather", "all_gather", b.k.gather_bytes, b.groups.tp,
                          layer, pass_, x)
        casts, last, others, after = _split(head, rows=tp)
        b.compute(f"{name}.chunks", casts + (others,), layer, pass_, x)
        return (b.compute(f"{name}.last_chunk", (last, *after), layer, pass_, (ag,)),)

    def scatter(self, name: str, tail: tuple[Kernel, ...], sms: int, layer: int,
                x: Frontier, *, pass_: str = "fwd", splits: int = RS_SPLITS,
                fp8: bool | None = None) -> Frontier:
        """Pipeline: ``tail``'s GEMM in ``splits`` chunks on the SMs left, each chunk's
        reduce-scatter beside the next chunk (``fp8``: FP8 buffers; default the
        settings'). An adapter's kernels in ``tail`` run after the reduce-scatter forward
        (its output is added to the layer's), before the GEMM backward (Transformer Engine's
        backward takes the gradient of the norm output the adapter read with the layer's)."""
        b = self.b
        casts, chunk, others, after = _split(tail, cols=splits, margin=sms)
        if after and pass_ != "fwd":
            x, after = (b.compute(f"{name}.adapter", after, layer, pass_, x),), ()
        if fp8 is None:   # FP8 buffers (``fp8_buf``)
            fp8 = b.spec.dtype == "fp8" and self.settings.rs_fp8
        nbytes = b.k.activation_bytes // (2 if fp8 else 1)
        first = b.compute(f"{name}.chunk", casts + (chunk,), layer, pass_, x)
        early = b.collective(f"{name}.reduce_scatter", "reduce_scatter",
                             nbytes * (splits - 1) // splits, b.groups.tp, layer, pass_,
                             (first,))
        rest = b.compute(f"{name}.chunks", (others,), layer, pass_)
        out = b.collective(f"{name}.reduce_scatter_last", "reduce_scatter", nbytes // splits,
                           b.groups.tp, layer, pass_, (rest, early))
        if not after:
            return (out,)
        # an adapter's output is added to the layer's, once it is reduce-scattered
        return (b.compute(f"{name}.adapter", after, layer, pass_, (out,)),)

    def forward(self, name: str, block: Block, layer: int, x: Frontier, *, gather: bool,
                reduce: bool) -> Frontier:
        """A forward block: ring exchange into its head, pipeline out of its tail."""
        b = self.b
        body = block.body
        adapted, nccl = has_exchange(block.head), b.spec.nccl_gathers(block.head_name)
        if gather and not adapted and not nccl:
            x = self.gather(f"{name}.{block.head_name}", block.head, layer, "fwd", x)
        elif gather:   # an adapted layer returns its norm output: Transformer Engine then
            # gathers the input with NCCL, not overlapped (``ub_overlap_ag_fprop`` off), as
            # it does a layer the userbuffers leave to NCCL; an adapter that reads the
            # gathered norm output (``return_layernorm_output_gathered``) has it in 16 bits
            size = b.k.shard_bytes if adapted and nccl else \
                b.k.gather_bytes if adapted else b.k.gather_both_bytes
            x = (b.collective(f"{name}.{block.head_name}.all_gather", "all_gather", size,
                              b.groups.tp, layer, "fwd", x),)
            body = block.head + body
        else:
            body = block.head + body
        if not reduce:
            body += block.tail
        if body:
            x = (b.compute(name, body, layer, "fwd", x),)
        if not reduce:
            return x
        return self.scatter(f"{name}.{block.tail_name}", block.tail,
                            self.settings.rs_sms[block.tail_name], layer, x)

    def head_backward(self, name: str, block: Block, wgrad: tuple[Kernel, ...], layer: int,
                      g: Frontier) -> Frontier:
        """A data-gradient block up to its tail: ring exchange into the head (the row-parallel
        layer's data gradient), the head's weight gradient ``wgrad`` right after it (as
        Transformer Engine runs each linear layer's backward whole), then the body. The tail
        follows with :meth:`bulk`."""
        b = self.b
        g = self.gather(f"{name}.{block.head_name}", block.head, layer, "ig", g)
        if wgrad:   # none for a frozen layer without an adapter
            b.compute(f"{name}.{block.head_name}.wgrad", wgrad, layer, "wg")
        if block.body:
            g = (b.compute(name, block.body, layer, "ig", g),)
        return g

    def bulk(self, name: str, tail: tuple[Kernel, ...], wgrad: tuple[Kernel, ...],
             layer: int, g: Frontier, layer_norm_linear: str = "") -> Frontier:
        """A column-parallel layer's backward with bulk overlap: its input (saved sharded)
        all-gathered again beside its data-gradient GEMM, which is reduce-scattered beside
        its weight gradient, or pipelined with it (:meth:`rs_dgrad` of
        ``layer_norm_linear``)."""
        b, tp, k = self.b, self.b.groups.tp, self.b.k
        # a frozen layer (LoRA) gathers no input: it has no weight gradient
        regather = () if b.spec.frozen else (b.collective(
            f"{name}.input.all_gather", "all_gather", k.gather_bytes, tp, layer, "ig", g),)
        if self.rs_dgrad(layer_norm_linear):   # reduce-scatter pipelined with the dgrad
            out = self.scatter(name, tail, 0, layer, g, pass_="ig", splits=b.spec.tp,
                               fp8=False)
            if wgrad:
                b.compute(f"{name}.wgrad", wgrad, layer, "wg", regather)
            return out
        dgrad = b.compute(name, tail, layer, "ig", g)
        # TE waits for the bulk all-gather after the GEMM, then launches the reduce-scatter
        rs = b.collective(f"{name}.reduce_scatter", "reduce_scatter", k.activation_bytes, tp,
                          layer, "ig", (dgrad, *regather))
        if wgrad:   # none for a frozen layer without an adapter
            b.compute(f"{name}.wgrad", wgrad, layer, "wg", regather)
        return (rs,)
