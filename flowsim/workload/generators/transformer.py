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

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ...errors import ConfigError, config_error, unknown_key_error
from ..graph import Op, Program, Workload
from ..roofline import Roofline, parse_roofline
from ._common import check_keys, positive_integer

SCHEDULES = ("1f1b", "gpipe")
#: The parallelisms in the order the default mapping gives them dims, innermost first.
PARALLELISMS = ("tp", "dp", "pp")
#: An A100-like NPU: 312 TFLOP/s (16-bit tensor cores), 2039 GB/s HBM2e, at half of peak.
A100_ROOFLINE = Roofline(312e12, 2039e9, 0.5)
#: Largest graph a generator builds (ops over all programs), before anything is allocated.
MAX_OPS = 5_000_000
#: Head dimension assumed for the activation memory when ``heads`` is not given.
HEAD_DIM = 128
_REQUIRED = ("layers", "hidden", "sequence", "micro_batch", "micro_batches")


@dataclass(frozen=True, kw_only=True)
class TransformerSpec:
    """Validated arguments of :func:`transformer` (hashable); see its docstring."""

    layers: int
    hidden: int
    sequence: int
    micro_batch: int
    micro_batches: int
    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: bool = False
    schedule: str = "1f1b"
    zero: bool = False
    heads: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    dtype_bytes: int = 2
    roofline: Roofline = A100_ROOFLINE
    #: ``((parallelism, dims), ...)`` in :data:`PARALLELISMS` order, or None for the default
    dims: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    source: str = field(default="argument", compare=False)


KEYS = tuple(f.name for f in fields(TransformerSpec) if f.name != "source")


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


def pipeline_schedule(schedule: str, stages: int, stage: int,
                      micro_batches: int) -> list[tuple[str, int]]:
    """Order of the forward (``"fwd"``) and backward (``"bwd"``) passes of one stage.

    ``"1f1b"``: ``min(stages - stage - 1, micro_batches)`` warm-up forwards, then a forward
    and a backward alternately, then the remaining backwards. ``"gpipe"``: every forward,
    then every backward, both in micro-batch order.

    Returns
    -------
    list of (str, int)
        ``(pass, micro_batch)`` in execution order.
    """
    if schedule not in SCHEDULES:
        raise config_error("argument", "schedule", "one of " + ", ".join(SCHEDULES), schedule)
    if schedule == "gpipe":
        return [("fwd", m) for m in range(micro_batches)] + \
               [("bwd", m) for m in range(micro_batches)]
    warmup = min(stages - stage - 1, micro_batches)
    order = [("fwd", m) for m in range(warmup)]
    for m in range(micro_batches - warmup):
        order += [("fwd", warmup + m), ("bwd", m)]
    return order + [("bwd", m) for m in range(micro_batches - warmup, micro_batches)]


# ---------------------------------------------------------------------------- validation
def parse_transformer(values: Mapping[str, Any], source: str) -> TransformerSpec:
    """Validate transformer arguments (keys :data:`KEYS`) from ``source``.

    Raises
    ------
    ConfigError
        Naming ``source``, the key, what was expected and what was found.
    """
    check_keys(values, source, KEYS)
    for key in _REQUIRED:
        if key not in values:
            raise config_error(source, key, "an integer >= 1", ...)
    v = {key: positive_integer(values[key], source, key) for key in _REQUIRED}
    for key in ("dp", "tp", "pp", "dtype_bytes"):
        v[key] = positive_integer(values.get(key, 1 if key != "dtype_bytes" else 2), source, key)
    for key in ("heads", "ffn", "vocab"):
        value = values.get(key)
        v[key] = None if value is None else positive_integer(value, source, key)
    for key in ("sp", "zero"):
        value = values.get(key, False)
        if not isinstance(value, (bool, np.bool_)):
            raise config_error(source, key, "true or false", value)
        v[key] = bool(value)
    schedule = values.get("schedule", "1f1b")
    if not isinstance(schedule, str) or schedule.lower() not in SCHEDULES:
        raise config_error(source, "schedule", "one of " + ", ".join(SCHEDULES), schedule)
    v["schedule"] = schedule.lower()
    v["roofline"] = parse_roofline(values.get("roofline", A100_ROOFLINE), source,
                                   default=A100_ROOFLINE)
    v["dims"] = _parse_dims(values.get("dims"), source)
    spec = TransformerSpec(**v, source=source)
    _check_consistent(spec)
    return spec


def _parse_dims(value: Any, source: str) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise config_error(source, "dims", "a mapping of tp, dp, pp to lists of network dims, "
                                           "e.g. {tp: [0], dp: [1, 2], pp: [3]}", value)
    used: dict[int, str] = {}
    out = []
    for key in value:
        if key not in PARALLELISMS:
            raise unknown_key_error(source, f"dims.{key}", [f"dims.{p}" for p in PARALLELISMS])
    for name in PARALLELISMS:
        raw = value.get(name, [])
        items = [raw] if isinstance(raw, (int, np.integer)) and not isinstance(raw, bool) \
            else raw
        ok = isinstance(items, (list, tuple)) and all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
            for d in items)
        if not ok:
            raise config_error(source, f"dims.{name}", "a list of network dim indices >= 0",
                               raw)
        for d in items:
            if int(d) in used:
                raise config_error(source, f"dims.{name}",
                                   f"dims not given to another parallelism (dim {d} is "
                                   f"already in dims.{used[int(d)]})", raw)
            used[int(d)] = name
        out.append((name, tuple(sorted(int(d) for d in items))))
    return tuple(out)


def _check_consistent(spec: TransformerSpec) -> None:
    """Divisibility rules between the arguments (Megatron-LM's own requirements)."""
    src = spec.source
    if spec.layers % spec.pp:
        raise config_error(src, "layers", f"a multiple of pp={spec.pp} (every pipeline stage "
                                          f"holds the same number of layers)", spec.layers)
    if spec.hidden % spec.tp:
        raise config_error(src, "hidden", f"a multiple of tp={spec.tp}", spec.hidden)
    if spec.ffn is not None and spec.ffn % spec.tp:
        raise config_error(src, "ffn", f"a multiple of tp={spec.tp}", spec.ffn)
    if spec.heads is not None and (spec.hidden % spec.heads or spec.heads % spec.tp):
        raise config_error(src, "heads", f"a divisor of hidden={spec.hidden} and a multiple "
                                         f"of tp={spec.tp}", spec.heads)
    if spec.sp and spec.sequence % spec.tp:
        raise config_error(src, "sequence", f"a multiple of tp={spec.tp} with sequence "
                                            f"parallelism (sp)", spec.sequence)
    collectives = (8 if spec.sp else 4) if spec.tp > 1 else 0
    ops = spec.micro_batches * (spec.layers * (6 + collectives) + 4 * spec.pp)
    if ops > MAX_OPS:
        raise ConfigError(f"{_where(src)}layers={spec.layers} and micro_batches="
                          f"{spec.micro_batches} make a graph of about {ops} ops, more than "
                          f"{MAX_OPS}")


def _where(source: str) -> str:
    """Message prefix naming the source of a value (none for Python arguments)."""
    return "" if source == "argument" else f"{source}: "


# ---------------------------------------------------------------------------- mapping
def parallel_dims(network: Any, spec: TransformerSpec) -> dict[str, tuple[int, ...]]:
    """The network dims of each parallelism (``()`` for a degree of 1).

    Raises
    ------
    ConfigError
        ``tp * dp * pp`` differs from the network's NPUs, or a degree is not the product of
        whole (by default: consecutive) dims; the message suggests a network shape.
    """
    sizes = tuple(int(p) for p in network.dims)
    degree = {"tp": spec.tp, "dp": spec.dp, "pp": spec.pp}
    shape = [degree[p] for p in PARALLELISMS if degree[p] > 1] or [1]
    if spec.tp * spec.dp * spec.pp != network.npus:
        raise ConfigError(
            f"{_where(spec.source)}tp * dp * pp = {spec.tp} * {spec.dp} * {spec.pp} = "
            f"{spec.tp * spec.dp * spec.pp} NPUs, but the network has {network.npus} "
            f"(npus_count: {list(sizes)})")
    if spec.dims is not None:
        for name, dims in spec.dims:
            bad = [d for d in dims if d >= len(sizes)]
            if bad:
                raise config_error(spec.source, f"dims.{name}",
                                   f"network dim indices 0..{len(sizes) - 1}", list(dims))
            got = math.prod(sizes[d] for d in dims)
            if got != degree[name]:
                raise config_error(spec.source, f"dims.{name}",
                                   f"dims whose sizes multiply to {name}={degree[name]} "
                                   f"(the network's dims are {list(sizes)}; these multiply "
                                   f"to {got})", list(dims))
        return dict(spec.dims)
    out: dict[str, tuple[int, ...]] = {}
    d = 0
    for name in PARALLELISMS:
        start, got = d, 1
        while got < degree[name] and d < len(sizes):
            got *= sizes[d]
            d += 1
        if got != degree[name]:
            explicit = _some_assignment(sizes, degree)
            hint = "" if explicit is None else ", or give the dims explicitly: dims: {" + \
                ", ".join(f"{p}: {list(explicit[p])}" for p in PARALLELISMS if explicit[p]) \
                + "}"
            raise config_error(
                spec.source, name,
                f"a product of whole consecutive network dims from dim {start} on "
                f"(tensor parallelism takes the innermost dims of npus_count {list(sizes)}, "
                f"then data parallelism, then pipeline parallelism); use a network shaped "
                f"like npus_count: {shape}{hint}", degree[name])
        out[name] = tuple(range(start, d))
    return out


def _some_assignment(sizes: tuple[int, ...], degree: dict[str, int]
                     ) -> dict[str, tuple[int, ...]] | None:
    """Whole dims for every parallelism whose sizes multiply to its degree, if any (tried
    for networks of at most 8 dims)."""
    if len(sizes) > 8:
        return None
    for owners in itertools.product(PARALLELISMS, repeat=len(sizes)):
        dims = {p: tuple(d for d, o in enumerate(owners) if o == p) for p in PARALLELISMS}
        if all(math.prod(sizes[d] for d in dims[p]) == degree[p] for p in PARALLELISMS):
            return dims
    return None


def _stages(network: Any, pp_dims: tuple[int, ...], pp: int
            ) -> tuple[list[np.ndarray], list[int]]:
    """NPUs of every stage, and the id offset from each stage to the next."""
    coords = network.coords(np.arange(network.npus, dtype=np.int64))
    stage = np.zeros(network.npus, np.int64)
    scale = 1
    for d in pp_dims:
        stage += coords[:, d] * scale
        scale *= int(network.dims[d])
    npus = [np.flatnonzero(stage == s) for s in range(pp)]
    # The lowest id of a stage has every other coordinate 0, so the difference of the lowest
    # ids is the offset of every NPU of the stage (ids are linear in the coordinates).
    offsets = [int(npus[s + 1][0] - npus[s][0]) for s in range(pp - 1)]
    return npus, offsets


# ---------------------------------------------------------------------------- graph
@dataclass(frozen=True)
class _Block:
    """Per-micro-batch, per-NPU quantities of one block (attention, MLP or logits)."""

    name: str
    flops: float         # forward FLOPs (= ig = wg)
    mem_bytes: float     # weights + stored activations, touched by every pass
    has_g: bool          # ends with Megatron's g operator (all-reduce forward)


def _blocks(spec: TransformerSpec) -> dict[str, _Block]:
    b, s, h, t, d = spec.micro_batch, spec.sequence, spec.hidden, spec.tp, spec.dtype_bytes
    f = spec.ffn if spec.ffn is not None else 4 * h
    a = spec.heads if spec.heads is not None else h / HEAD_DIM
    r = 1 / t if spec.sp else 1.0       # replicated activations are sharded by sp
    scale = d / 2                       # Korthikanti et al. count bytes at 16 bits
    blocks = {
        "attn": _Block("attn", (8 * b * s * h * h + 4 * b * s * s * h) / t,
                       4 * h * h * d / t + scale * (5 * b * s * h * r
                                                    + (8 * b * s * h + 5 * a * s * s * b) / t),
                       True),
        "mlp": _Block("mlp", 4 * b * s * h * f / t,
                      2 * h * f * d / t + scale * (5 * b * s * h * r + 4 * b * s * f / t),
                      True),
    }
    if spec.vocab is not None:
        v = spec.vocab
        blocks["logits"] = _Block("logits", 2 * b * s * h * v / t,
                                  h * v * d / t + d * (b * s * h * r + b * s * v / t), False)
    return blocks


def layer_parameter_bytes(spec: TransformerSpec) -> int:
    """Gradient bytes of one transformer layer on one NPU: ``(4h² + 2hf) d / t``."""
    h = spec.hidden
    f = spec.ffn if spec.ffn is not None else 4 * h
    return (4 * h * h + 2 * h * f) * spec.dtype_bytes // spec.tp


class _StageGraph:
    """Ops of one stage in schedule order: compute ops chained by control dependencies."""

    def __init__(self, spec: TransformerSpec, tp_dims: tuple[int, ...],
                 dp_dims: tuple[int, ...]) -> None:
        self.spec = spec
        self.ops: list[Op] = []
        self.last_compute: int | None = None
        self.tp_dims = tp_dims
        self.dp_dims = dp_dims
        self.act = spec.micro_batch * spec.sequence * spec.hidden * spec.dtype_bytes

    def _add(self, **fields: Any) -> int:
        op_id = len(self.ops)
        self.ops.append(Op(id=op_id, **fields))
        return op_id

    def compute(self, name: str, block: _Block, layer: int, pass_: str,
                needs: int | None) -> int:
        """A compute op after the previous one; ``needs`` (a collective or recv) is a data
        dependency unless it is that previous compute op."""
        deps = () if needs is None or needs == self.last_compute else (needs,)
        ctrl = () if self.last_compute is None else (self.last_compute,)
        self.last_compute = self._add(
            kind="compute", name=name, flops=block.flops, mem_bytes=block.mem_bytes,
            duration_ns=self.spec.roofline.time_ns(block.flops, block.mem_bytes),
            deps=deps, ctrl_deps=ctrl, layer=layer, pass_=pass_)
        return self.last_compute

    def collective(self, name: str, collective: str, size: int, dims: tuple[int, ...],
                   layer: int, pass_: str, needs: int | None) -> int:
        return self._add(kind="collective", name=name, collective=collective, size=int(size),
                         dims=dims, deps=() if needs is None else (needs,), layer=layer,
                         pass_=pass_)

    def p2p(self, kind: str, name: str, offset: int, tag: int, layer: int, pass_: str,
            needs: int | None = None) -> int:
        size = self.act // self.spec.tp if self.spec.sp else self.act
        return self._add(kind=kind, name=name, size=int(size), peer_offset=offset, tag=tag,
                         deps=() if needs is None else (needs,), layer=layer, pass_=pass_)

    # -------------------------------------------------------------- one block, one pass
    def forward(self, block: _Block, layer: int, m: int, x: int | None) -> int:
        """Forward of a block on micro-batch ``m`` whose input comes from op ``x``; returns
        the op its output comes from."""
        name = f"{_block_name(block, layer, m)}.fwd"
        tp = self.spec.tp > 1
        if tp and self.spec.sp:     # f: all-gather of the sequence-sharded input
            x = self.collective(f"{name}.all_gather", "all_gather", self.act // self.spec.tp,
                                self.tp_dims, layer, "fwd", x)
        x = self.compute(name, block, layer, "fwd", x)
        if tp and block.has_g:      # g: all-reduce (reduce-scatter with sp) of the output
            kind = "reduce_scatter" if self.spec.sp else "all_reduce"
            x = self.collective(f"{name}.{kind}", kind, self.act, self.tp_dims, layer, "fwd", x)
        return x

    def backward(self, block: _Block, layer: int, m: int, g: int | None) -> tuple[int, int]:
        """Input- and weight-gradient of a block; returns (op the input gradient comes from,
        the weight-gradient op)."""
        name = _block_name(block, layer, m)
        tp = self.spec.tp > 1
        if tp and self.spec.sp and block.has_g:     # g backward: all-gather
            g = self.collective(f"{name}.ig.all_gather", "all_gather",
                                self.act // self.spec.tp, self.tp_dims, layer, "ig", g)
        g = ig = self.compute(f"{name}.ig", block, layer, "ig", g)
        if tp:                                      # f backward: all-reduce / reduce-scatter
            kind = "reduce_scatter" if self.spec.sp else "all_reduce"
            g = self.collective(f"{name}.ig.{kind}", kind, self.act, self.tp_dims, layer,
                                "ig", ig)
        wg = self.compute(f"{name}.wg", block, layer, "wg", None)
        return g, wg

    def gradient_sync(self, layer: int, size: int, after: int) -> None:
        """Data-parallel gradient collectives of a layer after its last weight gradient."""
        if self.spec.dp == 1:
            return
        name = _layer_name(self.spec, layer)
        if not self.spec.zero:
            self.collective(f"{name}.grad.all_reduce", "all_reduce", size, self.dp_dims,
                            layer, "wg", after)
            return
        rs = self.collective(f"{name}.grad.reduce_scatter", "reduce_scatter", size,
                             self.dp_dims, layer, "wg", after)
        self.collective(f"{name}.param.all_gather", "all_gather", -(-size // self.spec.dp),
                        self.dp_dims, layer, "wg", rs)


def _block_name(block: _Block, layer: int, m: int) -> str:
    return f"mb{m}.logits" if block.name == "logits" else f"mb{m}.layer{layer}.{block.name}"


def _layer_name(spec: TransformerSpec, layer: int) -> str:
    return "logits" if layer == spec.layers else f"layer{layer}"


def _stage_ops(spec: TransformerSpec, stage: int, offsets: list[int],
               dims: dict[str, tuple[int, ...]]) -> list[Op]:
    g = _StageGraph(spec, dims["tp"], dims["dp"])
    blocks = _blocks(spec)
    per_stage = spec.layers // spec.pp
    own = range(stage * per_stage, (stage + 1) * per_stage)
    last = stage == spec.pp - 1
    logits = "logits" in blocks and last
    top = spec.layers if logits else own[-1]          # the stage's last layer index
    layer_bytes = layer_parameter_bytes(spec)
    logits_bytes = (-(-spec.vocab // spec.tp) * spec.hidden * spec.dtype_bytes
                    if logits else 0)
    order = pipeline_schedule(spec.schedule, spec.pp, stage, spec.micro_batches)
    final = max(i for i, (kind, _) in enumerate(order) if kind == "bwd")
    for i, (kind, m) in enumerate(order):
        if kind == "fwd":
            x = None
            if stage > 0:
                x = g.p2p("recv", f"mb{m}.recv_activation", -offsets[stage - 1], 2 * m,
                          own[0], "fwd")
            for layer in own:
                x = g.forward(blocks["attn"], layer, m, x)
                x = g.forward(blocks["mlp"], layer, m, x)
            if logits:
                x = g.forward(blocks["logits"], spec.layers, m, x)
            if not last:
                g.p2p("send", f"mb{m}.send_activation", offsets[stage], 2 * m, top, "fwd", x)
            continue
        x = None
        if not last:
            x = g.p2p("recv", f"mb{m}.recv_gradient", offsets[stage], 2 * m + 1, top, "ig")
        if logits:
            x, wg = g.backward(blocks["logits"], spec.layers, m, x)
            if i == final:
                g.gradient_sync(spec.layers, logits_bytes, wg)
        for layer in reversed(own):
            x, _ = g.backward(blocks["mlp"], layer, m, x)
            x, wg = g.backward(blocks["attn"], layer, m, x)
            if i == final:
                g.gradient_sync(layer, layer_bytes, wg)
        if stage > 0:
            g.p2p("send", f"mb{m}.send_gradient", -offsets[stage - 1], 2 * m + 1, own[0],
                  "ig", x)
    return g.ops


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
