"""The shapes one transformer layer has on one rank for one micro-batch, and the sizes of its
communication: the base of :class:`~.transformer_kernels.LayerKernels`.

Everything here is per rank: ``n = b s / cp`` tokens of the rank's sequence shard, ``n / t``
of them in the sequence-parallel regions (norms, dropout, residual adds) when ``sp``; weights
split ``t`` ways by tensor parallelism. Activations are 16-bit (also in FP8 training, whose
GEMMs alone run in FP8; FP8's casts are described in :mod:`.transformer_kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from ..kernels import BLOCK_SCALED_RECIPES, Attention, Elementwise, Gemm, Kernel, Quantize, Work
from .transformer_precision import precision_of
from .transformer_spec import TransformerSpec
from .transformer_values import gathered_bytes

#: bytes of an activation element (16-bit)
ACT = 2
class CrossEntropyCost(NamedTuple):
    """Bytes per logit of a rank's vocabulary shard, of one cross entropy."""

    forward: int
    backward: int
    #: kept from the forward for the backward: the FP32 logits Megatron-Core's own steps
    #: work on, else the 16-bit ones
    kept: int


#: bytes the vocabulary-parallel cross entropy moves per logit of a shard, and keeps, by
#: :attr:`~.transformer_spec.TransformerSpec.cross_entropy`: unfused and
#: Megatron-Core's fused one (``cross_entropy.py`` and ``fusions/fused_cross_entropy.py``,
#: core_r0.8 / r0.9), and Transformer Engine's (``pytorch/triton/cross_entropy.py``, v2.8).
#: Unfused, forward: cast the 16-bit logits to FP32 (read 2, write 4), the maximum (read
#: 4), subtract it in place (8), exp in place (8), the sum (4), divide by it in place (8);
#: backward: scale the softmax by the loss gradient in place (8), cast back to 16 bits
#: (read 4, write 2). Native fused, each step's elementwise work in one kernel: cast with
#: the maximum (6), subtract, exp and sum (8), divide (8); backward: scale and cast (6).
#: Transformer Engine's, on the 16-bit logits themselves: an online softmax (read 2), then
#: the loss with the gradient written over the logits (read 2, write 2); backward: that
#: gradient scaled in place by the loss gradient (4). flash-attn's (``flash_attn/losses/
#: cross_entropy.py``; LLM Foundry's ``fused_crossentropy``): one kernel reads a row of 16-bit
#: logits for the loss (2; flash-attn 1.x's CUDA kernel read it twice, the second time
#: from L2), one reads it again and writes its gradient backward (4). PyTorch's
#: ``cross_entropy`` of the logits cast to FP32, compiled (torchtitan's loss under
#: ``torch.compile``): the cast, the log-softmax and the loss fused into one reduction over
#: the 16-bit logits (2), backward one pass reading them and writing the 16-bit gradient (4).
#: PyTorch's eager ``F.cross_entropy`` on the 16-bit logits (``torch``): the log-softmax read
#: and written (4, its output kept); backward, the loss's gradient written dense over the
#: logits (2), then the log-softmax's backward reading it and the kept output and writing the
#: gradient (6).
CROSS_ENTROPY = {"unfused": CrossEntropyCost(38, 14, 4), "native": CrossEntropyCost(22, 6, 4),
                 "te": CrossEntropyCost(6, 4, 2), "flash_attn": CrossEntropyCost(2, 4, 2),
                 "compiled": CrossEntropyCost(2, 4, 2), "torch": CrossEntropyCost(4, 8, 2)}
#: bytes per logit of one cross entropy computed for a training metric, PyTorch's under
#: autocast (``torch.nn.CrossEntropyLoss``, as Composer's language metrics call it): the
#: 16-bit logits cast to FP32 (read 2, write 4), then a log-softmax over each row (its
#: maximum, its sum of exponentials and its output: read 4 three times, write 4)
METRIC_BYTES = 6 + 16


def elementwise(nbytes: float, name: str) -> Elementwise:
    """A memory-bound kernel moving ``nbytes``."""
    return Elementwise(float(nbytes), name=name)


def activation_input_bytes(spec: TransformerSpec) -> float:
    """Bytes the MLP activation keeps of its input (FC1's output) per element of the MLP's
    width: 16-bit, SwiGLU's twice as wide; one byte per element with
    ``activation_func_fp8_input_store``."""
    return (1 if spec.activation_func_fp8_input_store else ACT) * (2 if spec.gated_mlp else 1)


def expert_activation_input_bytes(spec: TransformerSpec) -> float:
    """:func:`activation_input_bytes` for the routed experts: 16-bit where their activation
    keeps no FP8 copy, when ``moe_act`` recomputation checkpoints it (its FC1 output is what
    the checkpoint keeps; the copy lives only through the re-run) or Transformer Engine's
    fused grouped MLP runs it (its ``ScaledSwiGLU`` takes no FP8 store)."""
    if spec.fused_grouped_mlp or "moe_act" in spec.recomputed_modules:
        return ACT * (2 if spec.gated_mlp else 1)
    return activation_input_bytes(spec)


def fp8_input_store(spec: TransformerSpec, elements: float, *, backward: bool
                    ) -> tuple[Kernel, ...]:
    """With ``activation_func_fp8_input_store``, the cast of the activation's ``elements``
    input elements to FP8 after the forward (2 bytes read, 1 written), or back to 16 bits
    before the backward (1 read, 2 written): Megatron-Core's ``BiasSwiGLUFunction`` runs
    ``input.to(torch.float8_e4m3fn)`` and ``.to(ori_input_dtype)`` as kernels of their own
    (``megatron/core/fusions/fused_bias_swiglu.py``); nothing without it."""
    if not spec.activation_func_fp8_input_store:
        return ()
    name = "activation_input_from_fp8" if backward else "activation_input_to_fp8"
    return (elementwise((ACT + 1) * elements, name),)


@dataclass(frozen=True)
class Exchange(Work):
    """A tensor-parallel collective inside a kernel sequence (a LoRA adapter's): the
    kernels after it wait for it. ``size``: each NPU's bytes, as
    :meth:`~.transformer_stream.OpStream.collective` takes them. No kernel: the op stream
    splits a sequence at its exchanges (:mod:`.transformer_stream`), so no compute model
    prices one."""

    collective: str = "all_reduce"
    size: int = 0
    name: str = "exchange"


def has_exchange(kernels: tuple[Kernel, ...]) -> bool:
    """Whether a kernel sequence holds an :class:`Exchange` (an adapted layer's, under
    LoRA with TP)."""
    return any(isinstance(k, Exchange) for k in kernels)


def tp_exchange(collective: str, nbytes: float, name: str) -> Exchange:
    """A ``collective`` of ``nbytes`` per NPU over the tensor-parallel group."""
    return Exchange(0.0, 0.0, collective, int(nbytes), name)


@dataclass(frozen=True)
class LayerShapes:
    """A layer's token counts and widths on one rank, its GEMM and cast constructors and its
    communication sizes."""

    spec: TransformerSpec

    # ------------------------------------------------------------------ shapes
    @property
    def n(self) -> int:
        """Tokens of the rank's sequence shard."""
        return self.spec.micro_batch * self.spec.sequence // self.spec.cp

    @property
    def n_sp(self) -> int:
        """Tokens in the sequence-parallel regions."""
        return self.n // self.spec.tp if self.spec.sp else self.n

    @property
    def q(self) -> int:
        """Query (and output projection) width of the rank."""
        return self.spec.heads * self.spec.head_dim // self.spec.tp

    @property
    def kv(self) -> int:
        """Key (= value) width of the rank: its key/value heads, at least one."""
        return max(1, self.spec.kv_heads // self.spec.tp) * self.spec.head_dim

    @property
    def f(self) -> int:
        """MLP inner width of the rank."""
        return self.spec.ffn // self.spec.tp

    @property
    def fc1_out(self) -> int:
        return (2 if self.spec.gated_mlp else 1) * self.f

    def _gemm(self, m: int, n: int, k: int, batch: int = 1, module: str = "") -> Gemm:
        """A GEMM of a transformer layer's linear layers (FP8 in FP8 training, FP4 in NVFP4),
        in ``module``'s precision (:func:`.transformer_precision.precision_of`)."""
        dtype, recipe = precision_of(self.spec, module)
        dtype = "bf16" if dtype == "fp16" else dtype
        if dtype == "fp8" and recipe == "nvfp4":
            dtype = "fp4"
        return Gemm(int(m), int(n), int(k), int(batch), dtype)

    def _linear(self, width: int, k: int, tokens: int = 0, module: str = ""
                ) -> tuple[Kernel, ...]:
        """A Transformer Engine linear layer's GEMM (a forward, or a data gradient) with its
        input's FP8 cast: ``k`` in, ``width`` out, on ``tokens`` (default the rank's)."""
        tokens = tokens or self.n
        return (*self._cast(tokens * k, module=module),
                self._gemm(tokens, width, k, module=module))

    def _gemm16(self, m: int, n: int, k: int, batch: int = 1) -> Gemm:
        """A GEMM that stays 16-bit in FP8 training (output layer, router)."""
        return Gemm(int(m), int(n), int(k), int(batch), "bf16")

    def _cast(self, elements: int, layouts: int | None = None, module: str = ""
              ) -> tuple[Kernel, ...]:
        """FP8 training's cast of one GEMM operand of ``elements`` under ``module``'s recipe
        (none in 16 bits), in ``layouts`` layouts; by default a linear layer's: both, or
        under LoRA (frozen: no weight gradient) the one its data GEMM reads."""
        dtype, recipe = precision_of(self.spec, module)
        if dtype != "fp8":
            return ()
        if layouts is None:
            layouts = 1 if self.spec.frozen else 2
        return (Quantize(elements, recipe, layouts),)

    @property
    def attention_io(self) -> tuple[int, int]:
        """Elements of the rank's attention inputs (queries, keys, values) and output."""
        return self.n * (self.q + 2 * self.kv), self.n * self.q

    def _attention_casts(self, *, backward: bool) -> tuple[Kernel, ...]:
        """FP8 attention's casts: of its inputs after the QKV projection, of its output's
        gradient after the projection's data gradient (none without ``fp8_attention``)."""
        if not self.spec.fp8_attention:
            return ()
        inputs, output = self.attention_io
        return self._cast(output if backward else inputs, layouts=2)

    def _in_precision(self, kernels: tuple[Attention, ...]) -> tuple[Attention, ...]:
        """The attention kernels in FP8 under the run's recipe with ``fp8_attention``."""
        if not self.spec.fp8_attention:
            return kernels
        return tuple(replace(a, dtype="fp8", recipe=self.spec.fp8_recipe) for a in kernels)

    # ------------------------------------------------------------------ communication
    @property
    def activation_bytes(self) -> int:
        """A full ``n x h`` activation (the buffer of a tensor-parallel all-reduce or
        reduce-scatter)."""
        return self.n * self.spec.hidden * ACT

    @property
    def shard_bytes(self) -> int:
        """A sequence-parallel shard of it (each NPU's input of the all-gather)."""
        return self.activation_bytes // self.spec.tp

    @property
    def gather_bytes(self) -> int:
        """Each NPU's input of a transformer layer's all-gathers (sequence parallelism): its
        shard, in FP8 training one byte per element (Transformer Engine casts before it
        gathers: the layer norm's output forward, the output gradient backward; v1.11
        ``layernorm_linear.py``, ``base.py`` ``grad_output_preprocess``); in NVFP4 training
        half a byte and its block's share of an E4M3 scale (``distributed.py``,
        ``_all_gather_nvfp4``)."""
        if self.spec.dtype != "fp8":
            return self.shard_bytes
        return int(self.shard_bytes // ACT * gathered_bytes(self.spec))

    @property
    def gather_both_bytes(self) -> int:
        """The same shard where Transformer Engine gathers both of its layouts: a
        block-scaled recipe (MXFP8, NVFP4) casts each layout from the 16-bit input, so a
        tensor two GEMMs read (the forward's input, for its GEMM and the weight gradient's
        saved copy; the output gradient, for the data and weight gradients) is gathered in
        both (``linear.py``: ``set_usage(rowwise=True, columnwise=...)``, which tensor
        scaling turns off: ``supports_only_rowwise_all_gather``); userbuffers gather one,
        and so does a frozen layer (LoRA), whose weight gradient, never computed, reads none."""
        if self.spec.dtype == "fp8" and self.spec.fp8_recipe in BLOCK_SCALED_RECIPES \
                and not self.spec.frozen:
            return 2 * self.gather_bytes
        return self.gather_bytes

    @property
    def kv_bytes(self) -> int:
        """The rank's keys and values (context parallelism exchanges them)."""
        return 2 * self.n * self.kv * ACT
