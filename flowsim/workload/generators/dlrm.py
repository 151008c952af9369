"""One training iteration of DLRM (Naumov et al. 2019) in hybrid parallelism, as one SPMD graph.

Embedding tables are model-parallel (spread over all NPUs, split when there are fewer tables
than NPUs); the bottom and top MLPs are data-parallel. Per NPU, with ``B = batch_per_npu``,
``S = sparse_features``, ``D = embedding_dim``, ``P = pooling``, ``d = dtype_bytes`` and
``N`` NPUs (global batch ``B·N``):

=====================  =========================================================  ==========
op                     size                                                       depends on
=====================  =========================================================  ==========
embedding lookup       memory bound: ``B·P·S·D·d`` bytes read (the NPU's tables,
                       for the whole global batch: ``B·N · S/N · P · D · d``),
                       ``B·P·S·D`` FLOPs (the pooling sums)
all-to-all (fwd)       ``B·S·D·d`` bytes per NPU over all NPUs: pooled embeddings  lookup
bottom MLP forward     ``2·B·in·out`` FLOPs per layer                              (overlaps
                                                                                   the a2a)
interaction forward    ``2·B·F²·D`` FLOPs, ``F = S + 1`` vectors; output width     a2a
                       ``D + F(F-1)/2`` (pairwise dots plus the bottom output)
top MLP fwd, ig, wg    ``2·B·in·out`` FLOPs each per layer
MLP all-reduces        ``(in·out + out)·d`` bytes per layer, over all NPUs,        the layer's
                       issued after the layer's weight gradient                    wg
interaction backward   ``2·B·F²·D`` FLOPs (input gradient)
all-to-all (bwd)       ``B·S·D·d`` bytes of embedding gradients                    interaction
bottom MLP ig, wg      as the top MLP; the first layer has no input gradient       (overlaps
                       (the dense features need none)                              the a2a)
embedding update       memory bound: ``2·B·P·S·D·d`` bytes (read and write every   a2a (bwd)
                       looked-up row)
=====================  =========================================================  ==========

MLP memory traffic per op is the layer's weights ``(in·out + out)·d`` plus its input and
output activations ``B·(in + out)·d``; the interaction's is ``B·(F·D + width)·d``. Times come
from the roofline. Nothing waits for the MLP all-reduces inside the iteration.

The defaults are the seed case study: 16-bit embeddings, pooling factor 60, 1600 dense and 64
sparse features, embedding dimension 64, 512 samples per NPU (global batch 65 536 on 128
NPUs), 60 TFLOP/s and 900 GB/s per NPU. Its "bottom MLP 5+2 layers of 1024" is read as 5
hidden layers of 1024 plus an input and an output layer: 1600 → 1024, five 1024 → 1024, and
1024 → 64 (the embedding dimension, which the interaction needs); ``bottom_mlp`` lists the
output widths of the layers, ``(1024,) * 6 + (64,)``. Likewise "top MLP 10+2 of 2048" is
2144 → 2048 (2144 = the interaction's width), ten 2048 → 2048 and 2048 → 1:
``top_mlp = (2048,) * 11 + (1,)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

from ..._validate import as_config, as_int, check_unknown_keys, read_int, read_list
from ...errors import config_error
from ..graph import Op, Workload, spmd
from ..roofline import Roofline, parse_roofline

#: One NPU of the seed case study: 60 TFLOP/s, 900 GB/s.
DLRM_ROOFLINE = Roofline(60e12, 900e9, 1.0)


@dataclass(frozen=True, kw_only=True)
class DLRMSpec:
    """Validated arguments of :func:`dlrm` (hashable); see its docstring."""

    batch_per_npu: int = 512
    dense_features: int = 1600
    sparse_features: int = 64
    embedding_dim: int = 64
    pooling: int = 60
    bottom_mlp: tuple[int, ...] = (1024,) * 6 + (64,)
    top_mlp: tuple[int, ...] = (2048,) * 11 + (1,)
    dtype_bytes: int = 2
    roofline: Roofline = DLRM_ROOFLINE
    source: str = field(default="argument", compare=False)

    @property
    def interaction_width(self) -> int:
        """Width of the interaction output: ``D + F(F-1)/2`` with ``F = S + 1``."""
        f = self.sparse_features + 1
        return self.embedding_dim + f * (f - 1) // 2

    @property
    def all_to_all_bytes(self) -> int:
        """Per-NPU buffer of each embedding all-to-all: ``B·S·D·d``."""
        return self.batch_per_npu * self.sparse_features * self.embedding_dim * \
            self.dtype_bytes

    def mlp_shapes(self, which: str) -> list[tuple[int, int]]:
        """``(in, out)`` of every layer of the ``"bottom"`` or ``"top"`` MLP."""
        widths = self.bottom_mlp if which == "bottom" else self.top_mlp
        first = self.dense_features if which == "bottom" else self.interaction_width
        ins = (first, *widths[:-1])
        return list(zip(ins, widths))


KEYS = tuple(f.name for f in fields(DLRMSpec) if f.name != "source")
_INTEGERS = ("batch_per_npu", "dense_features", "sparse_features", "embedding_dim", "pooling",
             "dtype_bytes")
#: Largest value of each integer key (far beyond any model; every count stays finite).
MAXIMA = {"batch_per_npu": 1 << 24, "dense_features": 1 << 24, "sparse_features": 1 << 16,
          "embedding_dim": 1 << 20, "pooling": 1 << 20, "dtype_bytes": 64}
#: Most layers of an MLP, and the widest layer.
MAX_MLP_LAYERS = 1024
MAX_WIDTH = 1 << 24


def dlrm(network: Any, *, batch_per_npu: int = 512, dense_features: int = 1600,
         sparse_features: int = 64, embedding_dim: int = 64, pooling: int = 60,
         bottom_mlp: tuple[int, ...] = (1024,) * 6 + (64,),
         top_mlp: tuple[int, ...] = (2048,) * 11 + (1,), dtype_bytes: int = 2,
         roofline: Roofline | Mapping[str, Any] = DLRM_ROOFLINE) -> Workload:
    """One DLRM training iteration on every NPU of ``network`` (sizes in the module
    docstring).

    Parameters
    ----------
    network : Network
        A built network (``flowsim.load_network``); every NPU runs the graph.
    batch_per_npu : int
        Samples per NPU (the global batch is ``batch_per_npu * network.npus``).
    dense_features, sparse_features : int
        Inputs of the bottom MLP; embedding tables (one lookup each per sample).
    embedding_dim, pooling : int
        Embedding vector width; rows pooled per lookup.
    bottom_mlp, top_mlp : sequence of int
        Output widths of the MLP layers; the bottom MLP must end in ``embedding_dim``.
    dtype_bytes : int
        Bytes per embedding, activation and gradient element.
    roofline : Roofline or mapping
        Compute model of one NPU; default 60 TFLOP/s, 900 GB/s, efficiency 1.

    Returns
    -------
    Workload
        One SPMD program; layers ``embedding, bottom0.., interaction, top0..``.
    """
    values = {"batch_per_npu": batch_per_npu, "dense_features": dense_features,
              "sparse_features": sparse_features, "embedding_dim": embedding_dim,
              "pooling": pooling, "bottom_mlp": bottom_mlp, "top_mlp": top_mlp,
              "dtype_bytes": dtype_bytes, "roofline": roofline}
    return build_dlrm(network, parse_dlrm(values, "argument"))


def parse_dlrm(values: Mapping[str, Any], source: str) -> DLRMSpec:
    """Validate DLRM arguments (keys :data:`KEYS`, all optional) from ``source``.

    Raises
    ------
    ConfigError
        Naming ``source``, the key, what was expected and what was found.
    """
    as_config(values, source=source, what="DLRM")
    check_unknown_keys(values, KEYS, source=source)
    defaults = DLRMSpec()
    v: dict[str, Any] = {key: read_int(values, key, source=source, minimum=1,
                                       default=getattr(defaults, key), maximum=MAXIMA[key])
                         for key in _INTEGERS}
    for key in ("bottom_mlp", "top_mlp"):
        v[key] = tuple(read_list(values, key, partial(as_int, minimum=1, maximum=MAX_WIDTH),
                                 source=source, default=getattr(defaults, key), min_length=1,
                                 max_length=MAX_MLP_LAYERS,
                                 what="a non-empty list of layer widths"))
    if v["bottom_mlp"][-1] != v["embedding_dim"]:
        raise config_error(source, "bottom_mlp",
                           f"widths ending in embedding_dim={v['embedding_dim']} (the "
                           f"interaction takes dot products of the bottom MLP's output with "
                           f"the embeddings)", list(v["bottom_mlp"]))
    v["roofline"] = parse_roofline(values.get("roofline", DLRM_ROOFLINE), source,
                                   default=DLRM_ROOFLINE)
    return DLRMSpec(**v, source=source)


def build_dlrm(network: Any, spec: DLRMSpec) -> Workload:
    """The workload of a validated :class:`DLRMSpec` on ``network`` (see :func:`dlrm`)."""
    if not hasattr(network, "npus"):
        raise config_error("argument", "network",
                           "a built network (flowsim.load_network(...))", network)
    bottom, top = spec.mlp_shapes("bottom"), spec.mlp_shapes("top")
    layers = (["embedding"] + [f"bottom{i}" for i in range(len(bottom))] + ["interaction"]
              + [f"top{i}" for i in range(len(top))])
    index = {name: i for i, name in enumerate(layers)}
    ops: list[Op] = []
    chain: list[int] = []       # the previous compute op, as a one-element list

    def add(**kw: Any) -> int:
        ops.append(Op(id=len(ops), **kw))
        return len(ops) - 1

    def compute(layer: str, pass_: str, flops: float, mem: float,
                needs: int | None = None) -> int:
        """A compute op after the previous one; ``needs``: a collective it waits for."""
        op = add(kind="compute", name=f"{layer}.{pass_}", flops=flops, mem_bytes=mem,
                 duration_ns=spec.roofline.time_ns(flops, mem), layer=index[layer],
                 pass_=pass_, deps=() if needs is None else (needs,), ctrl_deps=tuple(chain))
        chain[:] = [op]
        return op

    def collective(kind: str, size: int, layer: str, pass_: str, needs: int) -> int:
        return add(kind="collective", name=f"{layer}.{pass_}.{kind}", collective=kind,
                   size=int(size), dims=None, layer=index[layer], pass_=pass_, deps=(needs,))

    b, d = spec.batch_per_npu, spec.dtype_bytes
    rows = b * spec.pooling * spec.sparse_features * spec.embedding_dim
    vectors = spec.sparse_features + 1
    interaction = (2 * b * vectors * vectors * spec.embedding_dim,
                   b * (vectors * spec.embedding_dim + spec.interaction_width) * d)
    # (FLOPs, memory bytes) of every pass of every MLP layer, and its gradient bytes
    work = {f"{which}{i}": (2 * b * n_in * n_out, (n_in * n_out + n_out + b * (n_in + n_out)) * d)
            for which, shapes in (("bottom", bottom), ("top", top))
            for i, (n_in, n_out) in enumerate(shapes)}
    grads = {f"{which}{i}": (n_in * n_out + n_out) * d
             for which, shapes in (("bottom", bottom), ("top", top))
             for i, (n_in, n_out) in enumerate(shapes)}
    bottoms = [f"bottom{i}" for i in range(len(bottom))]
    tops = [f"top{i}" for i in range(len(top))]

    # forward: the bottom MLP runs while the pooled embeddings are exchanged
    lookup = compute("embedding", "fwd", rows, rows * d)
    a2a = collective("all_to_all", spec.all_to_all_bytes, "embedding", "fwd", lookup)
    for name in bottoms:
        compute(name, "fwd", *work[name])
    compute("interaction", "fwd", *interaction, needs=a2a)
    for name in tops:
        compute(name, "fwd", *work[name])
    # backward: each MLP layer's gradient all-reduce follows its weight gradient
    for name in reversed(tops):
        compute(name, "ig", *work[name])
        collective("all_reduce", grads[name], name, "wg", compute(name, "wg", *work[name]))
    back = collective("all_to_all", spec.all_to_all_bytes, "embedding", "ig",
                      compute("interaction", "ig", *interaction))
    for name in reversed(bottoms):
        if name != bottoms[0]:          # the dense features need no gradient
            compute(name, "ig", *work[name])
        collective("all_reduce", grads[name], name, "wg", compute(name, "wg", *work[name]))
    compute("embedding", "wg", rows, 2 * rows * d, needs=back)
    where = "" if spec.source == "argument" else f"{spec.source}: "
    return spmd(ops, network.npus, layers=layers, name="dlrm", source=f"{where}dlrm")
