"""One training iteration of a GPT-style transformer under Megatron-LM's 3-D parallelism.

The model: ``layers`` transformer layers of width ``h = hidden``, each an attention block and
an MLP block of inner width ``f = ffn`` (default ``4h``), trained on micro-batches of ``b``
sequences of ``s`` tokens; optionally a logits layer of ``V = vocab`` outputs on the last
pipeline stage. ``t`` and ``p`` are the tensor- and pipeline-parallel degrees and
``d = dtype_bytes``.

Compute (per micro-batch, per NPU; Narayanan et al., "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC 2021, appendix on floating-point operations,
whose forward count per layer is ``24bsh² + 4bs²h`` with ``f = 4h``)

    attention forward   (8bsh² + 4bs²h) / t     QKV and output projections, scores, values
    MLP forward         4bshf / t               two GEMMs
    logits forward      2bshV / t               (only with ``vocab``)

The backward pass costs twice the forward and is split evenly into an input-gradient (``ig``)
and a weight-gradient (``wg``) op, each equal to the forward. Activation recomputation is not
modelled. Memory traffic of every op is its block's weights plus its stored activations, which
it writes (forward) or reads (backward): weights ``4h²d/t`` (attention), ``2hf d/t`` (MLP),
``hV d/t`` (logits); activations from Korthikanti et al., "Reducing Activation Recomputation
in Large Transformer Models" (2022), §4.1, in bytes at 16 bits scaled by ``d / 2``: attention
``5bsh·r + (8bsh + 5a s² b)/t``, MLP ``5bsh·r + 4bsf/t`` (layer norms included), with ``a``
heads (``h/128`` when not given) and ``r = 1/t`` with sequence parallelism, else 1; logits
``d(bsh·r + bsV/t)``. The op time is the roofline time of its FLOPs and bytes.

Communication (Megatron-LM, Shoeybi et al. 2019, and Korthikanti et al. 2022)

* **Tensor parallel** (over the TP dims, when ``t > 1``): each block is bracketed by Megatron's
  ``f`` (identity forward, all-reduce backward) and ``g`` (all-reduce forward, identity
  backward) operators, so a layer has 2 all-reduces of ``bshd`` bytes forward and 2 backward.
  With ``sp=True`` (sequence parallelism) ``g`` is a reduce-scatter forward and an all-gather
  backward and ``f`` the reverse: 2 all-gathers of ``bshd/t`` bytes (each NPU's input) and 2
  reduce-scatters of ``bshd`` bytes forward, and the same backward. The logits layer has
  only ``f``. The backward collective after a block's ``ig`` overlaps with its ``wg``.
* **Pipeline parallel**: one program per stage of ``layers/p`` consecutive layers. A stage
  receives its input activation (``bshd`` bytes; ``bshd/t`` with ``sp``, the tensor being
  sequence-sharded) from the previous stage and sends its output to the next; the backward
  pass sends the gradients the other way, with ``peer_offset`` = ± the id distance between
  stages (the stride of the PP dims). Messages pair by ``tag = 2·micro_batch +
  (0 forward, 1 backward)``. Megatron's scatter/gather optimisation of the messages is not
  modelled. Per-stage order: ``1f1b`` (PipeDream-Flush: ``p - stage - 1`` warm-up forwards,
  then one forward and one backward alternately, then the remaining backwards) or ``gpipe``
  (every forward, then every backward in the same micro-batch order).
* **Data parallel** (over the DP dims, when ``dp > 1``): per layer, one all-reduce of the
  layer's gradients (``(4h² + 2hf) d / t`` = ``12h²d/t`` bytes for ``f = 4h``; ``hVd/t`` for
  the logits, with ``V`` rounded up to a multiple of ``t``), issued as soon as the layer's last
  weight-gradient op of the iteration ends — per layer, without bucketing. With ``zero=True``
  (ZeRO stage 2: gradients and optimizer states partitioned, parameters replicated) the
  all-reduce becomes a reduce-scatter of the gradients and, after it, an all-gather of the
  updated parameter shards (``ceil(bytes/dp)`` per NPU); the optimizer step between them is
  not modelled. Nothing in the iteration waits for these collectives: the next iteration
  would, and the engine waits for every collective at the end.

Biases, layer norms, the embedding lookup and its gradient all-reduce between the first and
last stage, the loss and the vocabulary-parallel cross-entropy all-reduces are left out.

Mapping onto the network: NPU ids are mixed-radix coordinates over the network dims, dim 0
fastest. By default TP takes the innermost whole dims, DP the next ones and PP the outermost;
each degree must be the product of whole consecutive dims. ``dims={"tp": [0], "dp": [1, 2],
"pp": [3]}`` assigns them explicitly (any whole dims; their sizes must multiply to the degree).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import config_error
from ..graph import Program, Workload
from ..roofline import Roofline
from .transformer_graph import _stage_ops, layer_parameter_bytes, pipeline_schedule
from .transformer_mapping import _stages, parallel_dims
from .transformer_spec import (
    A100_ROOFLINE,
    KEYS,
    MAX_OPS,
    PARALLELISMS,
    SCHEDULES,
    TransformerSpec,
    _where,
    parse_transformer,
)

__all__ = ["A100_ROOFLINE", "KEYS", "MAX_OPS", "PARALLELISMS", "SCHEDULES", "TransformerSpec",
           "build_transformer", "layer_parameter_bytes", "parallel_dims", "parse_transformer",
           "pipeline_schedule", "transformer"]


def transformer(network: Any, *, layers: int, hidden: int, sequence: int, micro_batch: int,
                micro_batches: int, dp: int = 1, tp: int = 1, pp: int = 1, sp: bool = False,
                schedule: str = "1f1b", zero: bool = False, heads: int | None = None,
                ffn: int | None = None, vocab: int | None = None, dtype_bytes: int = 2,
                roofline: Roofline | Mapping[str, Any] = A100_ROOFLINE,
                dims: Mapping[str, Any] | None = None) -> Workload:
    """One training iteration of a transformer with tensor, data, pipeline and sequence
    parallelism (the formulas and the mapping are in the module docstring).

    Parameters
    ----------
    network : Network
        A built network (``flowsim.load_network``); ``tp * dp * pp`` must equal its NPUs.
    layers, hidden, sequence : int
        Transformer layers (a multiple of ``pp``), hidden size, tokens per sequence.
    micro_batch, micro_batches : int
        Sequences per micro-batch and micro-batches per iteration (per pipeline).
    dp, tp, pp : int
        Data-, tensor- and pipeline-parallel degrees.
    sp : bool
        Sequence parallelism: reduce-scatter + all-gather instead of all-reduce
        (``sequence`` must be a multiple of ``tp``).
    schedule : {"1f1b", "gpipe"}
        Pipeline schedule.
    zero : bool
        ZeRO stage 2: reduce-scatter gradients and all-gather parameters instead of
        all-reducing gradients.
    heads : int, optional
        Attention heads (divides ``hidden``, multiple of ``tp``); only the activation memory
        depends on it. Default ``hidden / 128``.
    ffn : int, optional
        MLP inner width (multiple of ``tp``); default ``4 * hidden``.
    vocab : int, optional
        Vocabulary size: adds a logits layer (named ``"logits"``) to the last stage.
    dtype_bytes : int
        Bytes per activation, weight and gradient element.
    roofline : Roofline or mapping
        Compute model of one NPU (mapping keys as in :func:`~flowsim.workload.roofline.
        parse_roofline`); default A100-like, 312 TFLOP/s, 2039 GB/s, efficiency 0.5.
    dims : mapping, optional
        Network dims of each parallelism, e.g. ``{"tp": [0], "dp": [1, 2], "pp": [3]}``.

    Returns
    -------
    Workload
        One program per pipeline stage; layers ``layer0, layer1, ...`` (and ``logits``).

    Raises
    ------
    ConfigError
        A bad value, or degrees that do not fit the network (the message suggests a shape).
    """
    values = {"layers": layers, "hidden": hidden, "sequence": sequence,
              "micro_batch": micro_batch, "micro_batches": micro_batches, "dp": dp, "tp": tp,
              "pp": pp, "sp": sp, "schedule": schedule, "zero": zero, "heads": heads,
              "ffn": ffn, "vocab": vocab, "dtype_bytes": dtype_bytes, "roofline": roofline,
              "dims": dims}
    return build_transformer(network, parse_transformer(values, "argument"))


def build_transformer(network: Any, spec: TransformerSpec) -> Workload:
    """The workload of a validated :class:`TransformerSpec` on ``network`` (see
    :func:`transformer`)."""
    if not all(hasattr(network, a) for a in ("dims", "npus", "coords")):
        raise config_error("argument", "network",
                           "a built network (flowsim.load_network(...))", network)
    dims = parallel_dims(network, spec)
    stage_npus, offsets = _stages(network, dims["pp"], spec.pp)
    programs = [Program(_stage_ops(spec, s, offsets, dims), stage_npus[s],
                        f"{_where(spec.source)}transformer stage {s}") for s in range(spec.pp)]
    layers = [f"layer{i}" for i in range(spec.layers)]
    if spec.vocab is not None:
        layers.append("logits")
    return Workload(programs, layers, "transformer")
