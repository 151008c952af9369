"""ASTRA-sim 1.0's training loops, as graphs: a text workload and a pass count into ops.

Each loop is one NPU's state machine in ASTRA-sim (``Workload.cc``); every NPU runs the same
one, so the result is an SPMD graph. The rules (``validation/astra_sim_1/README.md``):

* every step after the first waits one cycle (1 ns) after the previous one ends;
* a collective is issued when the compute before it ends; a blocking one is waited for by the
  next step, and a collective's finish, as the loop sees it, includes the layer's update delay;
* the forward pass of layer ``i`` waits for layer ``i``'s weight-gradient collective of the
  previous pass;
* after the last pass the loop waits for layer 0's weight-gradient collective (``MICRO``: all
  its collectives); the run ends when every collective has finished.

Which dimensions a collective spans depends on the loop (data / model / hybrid policies).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from ..errors import ConfigError, FlowsimWarning
from ..topology.network_config import NetworkConfig
from .astra_text import TextLayer, TextWorkload
from .graph import Op, Workload, spmd

_TRANSITION_NS = 1.0


class _Loop:
    """Appends the steps of one NPU's loop as ops."""

    def __init__(self, layers: tuple[TextLayer, ...]) -> None:
        self.layers = layers
        self.ops: list[Op] = []
        self.last: int | None = None
        self.waits: list[int] = []

    def compute(self, i: int, pass_: str, duration: float, waits: tuple = ()) -> None:
        ctrl = () if self.last is None else (self.last,)
        deps = tuple(w for w in (*waits, *self.waits) if w is not None)
        self.waits = []
        op = Op(len(self.ops), "compute", f"{self.layers[i].name}.{pass_}" if i >= 0 else
                "end", duration_ns=duration, ctrl_deps=ctrl, deps=deps,
                gap_ns=_TRANSITION_NS if ctrl else 0.0, layer=i, pass_=pass_)
        self.ops.append(op)
        self.last = op.id

    def collective(self, i: int, pass_: str, dims: tuple[int, ...], priority: str = "default",
                   kind: str | None = None, size: int | None = None) -> int | None:
        layer = self.layers[i]
        kind = getattr(layer, f"{pass_}_type") if kind is None else kind
        size = getattr(layer, f"{pass_}_bytes") if size is None else size
        if kind is None or not dims:
            return None
        op = Op(len(self.ops), "collective", f"{layer.name}.{pass_}.{kind}", collective=kind,
                size=size, dims=dims, ctrl_deps=() if self.last is None else (self.last,),
                update_delay_ns=layer.update_delay, priority=priority, layer=i, pass_=pass_)
        self.ops.append(op)
        return op.id

    def block(self, op_id: int | None) -> None:
        """The loop stops until this collective has finished (a zero-length wait step: the
        next step then starts one transition later, as after any step)."""
        if op_id is None:
            return
        coll = self.ops[op_id]
        op = Op(len(self.ops), "compute", f"wait {coll.name}",
                ctrl_deps=() if self.last is None else (self.last,),
                deps=(op_id,), layer=coll.layer, pass_=coll.pass_)
        self.ops.append(op)
        self.last = op.id

    def finish(self, waits: list[int | None]) -> list[Op]:
        """The end-of-run wait (``check_for_sim_end``)."""
        waits = [w for w in waits if w is not None]
        if waits or self.waits:
            self.compute(-1, "wg", 0.0, tuple(waits))
            self.ops[-1].layer = 0 if self.layers else -1
        return self.ops


def _policy_dims(policy: str, ndims: int, split: int) -> dict[str, tuple[int, ...]]:
    """Dimensions of the fwd / ig / wg collectives of a layer under a parallelism policy."""
    every = tuple(range(ndims))
    table = {
        "DATA": ((), (), every),
        "ALL": (every, every, every),
        "MODEL": (every, every, ()),
        "HYBRID_DATA_MODEL": ((0,), (0,), every[1:]),
        "HYBRID_MODEL_DATA": (every[1:], every[1:], (0,)),
        "HYBRID_TRANSFORMER": (every[: split + 1], every[: split + 1], every[split + 1:]),
    }[policy]
    return dict(zip(("fwd", "ig", "wg"), table))


def model_parallel_split(config: NetworkConfig, group: int, source: str
                         ) -> tuple[NetworkConfig, int]:
    """ASTRA-sim's ``break_dimension``: the last model-parallel dimension for a group size,
    splitting a dimension in two when the group ends inside it.

    Returns the (possibly re-shaped) config and the index of the last model-parallel dimension
    (-1: none). A split Ring's logical neighbours are several hops apart: the outer ring's
    neighbours ``inner`` hops, the inner ring's wrap-around ``inner - 1``. ASTRA-sim lets the
    steps of a phase run per NPU, so a ring phase pays each crossing of the long link once on
    its critical path; the inner ring gets the per-step average latency that reproduces that
    for all-reduce, reduce-scatter and all-gather exactly.
    """
    if group <= 1:
        return config, -1
    if group > config.npus or config.npus % group:
        raise ConfigError(f"{source}: model_parallel_NPU_group {group} does not divide the "
                          f"network's {config.npus} NPUs")
    product = 1
    for d, n in enumerate(config.npus_count):
        if product * n == group:
            return config, d
        if product * n > group:
            inner = group // product
            if group % product or n % inner:
                raise ConfigError(f"{source}: model_parallel_NPU_group {group} cannot be "
                                  f"made of whole parts of dimensions {config.npus_count}")
            outer = n // inner
            latency = config.latency_ns[d]
            lat_inner = lat_outer = latency
            if config.topology[d] == "Ring":
                # the inner ring's wrap-around link spans `wrap` hops; a chain of ring steps
                # crosses it once every `inner` steps, i.e. on average this many hops a step
                wrap = min(inner - 1, n - inner + 1)
                lat_inner = latency * (inner + wrap - 2) / (inner - 1)
                lat_outer = latency * min(inner, n - inner)

            def split(values: tuple, a, b, d: int = d) -> tuple:
                return values[:d] + (a, b) + values[d + 1:]

            return NetworkConfig(
                topology=split(config.topology, config.topology[d], config.topology[d]),
                npus_count=split(config.npus_count, inner, outer),
                bandwidth_gbps=split(config.bandwidth_gbps, config.bandwidth_gbps[d],
                                     config.bandwidth_gbps[d]),
                latency_ns=split(config.latency_ns, lat_inner, lat_outer),
                in_network_reduction=split(config.in_network_reduction,
                                           config.in_network_reduction[d],
                                           config.in_network_reduction[d]),
                source=config.source), d
        product *= n
    raise AssertionError("unreachable: group divides the NPU count")


def _previous_checkpoint(checkpoints: tuple[int, ...], layer: int) -> int:
    earlier = [c for c in checkpoints if c <= layer]
    return max(earlier) if earlier else 0


def build_training_loop(text: TextWorkload, network, passes: int = 1) -> Workload:
    """The SPMD graph of ``passes`` iterations of a text workload's training loop on
    ``network``.

    ``HYBRID_TRANSFORMER`` may split a dimension of ``network`` in two, as ASTRA-sim does; the
    workload then carries the split network's config (:attr:`Workload.network`).
    """
    if passes < 1:
        raise ConfigError(f"argument 'iterations': expected an integer >= 1, found {passes}")
    kind = text.parallelism
    split = ep_split = -1
    split_config = None
    if kind.startswith("HYBRID_TRANSFORMER"):
        split_config, split, ep_split = _transformer_split(text, network)
    npus = network.npus
    ndims = len(split_config.npus_count) if split_config is not None else network.ndims
    layers = text.layers
    loop = _Loop(layers)
    L = len(layers)
    if kind == "MICRO":
        if L > 1:
            warnings.warn(f"{text.source}: MICRO runs the first layer line's weight-gradient "
                          f"collective only, as ASTRA-sim 1.0 and SimAI do; {L - 1} other "
                          f"line(s) ignored", FlowsimWarning, stacklevel=3)
        micro_dims = _policy_dims("DATA", ndims, split)["wg"]
        ids = [loop.collective(0, "wg", micro_dims) for _ in range(passes)]
        ops = loop.finish(ids)
        return _workload(ops, npus, text, split_config)

    def dims_of(i: int) -> dict[str, tuple[int, ...]]:
        if kind == "HYBRID_CUSTOMIZED":
            return _policy_dims(layers[i].policy, ndims, split)
        if kind.startswith("HYBRID_DLRM"):
            return _policy_dims("ALL" if i == 0 else "DATA", ndims, split)
        if kind == "DISTRIBUTED_INFERENCE":
            return _policy_dims("MODEL", ndims, split)
        if kind.startswith("HYBRID_TRANSFORMER"):
            return _transformer_dims(layers[i], ndims, split, ep_split)
        return _policy_dims(kind, ndims, split)

    dims = [dims_of(i) for i in range(L)]
    wg: list[int | None] = [None] * L
    ig: list[int | None] = [None] * L
    for _ in range(passes):
        if kind == "DATA":
            _data_pass(loop, layers, dims, wg)
        elif kind.startswith("HYBRID_DLRM"):
            _dlrm_pass(loop, layers, dims, wg, ig, text.last_bottom_layer,
                       enhanced=kind.endswith("ENHANCED"))
        elif kind == "DISTRIBUTED_INFERENCE":
            for i in range(L):
                loop.compute(i, "fwd", layers[i].fwd_compute)
                loop.block(loop.collective(i, "fwd", dims[i]["fwd"]))
        else:
            _model_pass(loop, layers, dims, wg, ig, kind, text)
    ops = loop.finish([wg[0]] if L else [])
    return _workload(ops, npus, text, split_config)


def _transformer_split(text: TextWorkload, network
                       ) -> tuple[NetworkConfig | None, int, int]:
    """The network of a ``HYBRID_TRANSFORMER`` (``None``: the given one, else with dimensions
    split where its groups end inside them), the last model-parallel dimension and the last
    expert-parallel one (SimAI's ``ep:`` groups of consecutive model-parallel groups)."""
    config = getattr(network, "config", None)
    if not isinstance(config, NetworkConfig):
        raise ConfigError(f"{text.source}: {text.parallelism} needs a network of Ring / "
                          "FullyConnected / Switch dimensions, not a fabric (its "
                          "model-parallel group is made of whole or split dimensions)")
    if text.all_gpus is not None and text.all_gpus != network.npus:
        warnings.warn(f"{text.source}:1: written for all_gpus: {text.all_gpus}, run on the "
                      f"network's {network.npus} NPUs (SimAI, too, simulates the network's "
                      f"GPU count)", FlowsimWarning, stacklevel=4)
    tp = text.model_parallel_group
    new_config, split = model_parallel_split(config, tp, text.source)
    ep_split = split
    if text.expert_parallel_group > 1:
        new_config, ep_split = model_parallel_split(
            new_config, tp * text.expert_parallel_group,
            f"{text.source}: ep: {text.expert_parallel_group} (an expert-parallel group of "
            f"{tp * text.expert_parallel_group} NPUs)")
    return (None if new_config is config else new_config), split, ep_split


def _transformer_dims(layer: TextLayer, ndims: int, split: int, ep_split: int
                      ) -> dict[str, tuple[int, ...]]:
    """Dimensions of a transformer layer's collectives: model parallel (TP) for fwd and ig,
    data parallel (DP: the rest) for wg, unless the token names SimAI's expert-parallel group
    (EP: the dimensions after TP up to ``ep_split``) or data parallel among expert groups
    (DP_EP: the dimensions after EP)."""
    every = tuple(range(ndims))
    groups = {"TP": every[: split + 1], "DP": every[split + 1:],
              "EP": every[split + 1: ep_split + 1], "DP_EP": every[ep_split + 1:]}
    own = {"fwd": "TP", "ig": "TP", "wg": "DP"}
    return {p: groups[getattr(layer, f"{p}_group") or own[p]] for p in own}


def _workload(ops: list[Op], npus: int, text: TextWorkload,
              network: NetworkConfig | None) -> Workload:
    out = spmd(ops, npus, layers=[x.name for x in text.layers], name=Path(text.source).name,
               source=text.source)
    out.network = network
    return out


def _data_pass(loop: _Loop, layers, dims, wg) -> None:
    L = len(layers)
    for i in range(L):
        loop.compute(i, "fwd", layers[i].fwd_compute, (wg[i],))
    for i in reversed(range(L)):
        loop.compute(i, "wg", layers[i].wg_compute)
        wg[i] = loop.collective(i, "wg", dims[i]["wg"])
        if i > 0:
            loop.compute(i, "ig", layers[i].ig_compute)


def _model_pass(loop: _Loop, layers, dims, wg, ig, kind: str, text: TextWorkload) -> None:
    """MODEL, HYBRID_DATA_MODEL / _MODEL_DATA / _CUSTOMIZED, HYBRID_TRANSFORMER[_FWD_IN_BCKWD]."""
    L = len(layers)
    transformer = kind.startswith("HYBRID_TRANSFORMER")
    for i in range(L):
        loop.compute(i, "fwd", layers[i].fwd_compute, (wg[i],))
        loop.block(loop.collective(i, "fwd", dims[i]["fwd"]))
    for i in reversed(range(L)):
        if kind.endswith("FWD_IN_BCKWD") and i in text.checkpoint_initiates:
            # activation recomputation: re-run the forward from the previous checkpoint
            for j in range(_previous_checkpoint(text.checkpoints, i), i):
                loop.compute(j, "fwd", layers[j].fwd_compute)
                loop.block(loop.collective(j, "fwd", dims[j]["fwd"]))
        loop.compute(i, "ig", layers[i].ig_compute)
        ig[i] = loop.collective(i, "ig", dims[i]["ig"], "LIFO") if (i > 0 or transformer) \
            else None
        loop.compute(i, "wg", layers[i].wg_compute)
        if kind != "MODEL":
            wg[i] = loop.collective(i, "wg", dims[i]["wg"], "FIFO")
        loop.block(ig[i])


def _dlrm_pass(loop: _Loop, layers, dims, wg, ig, bottom: int, *, enhanced: bool) -> None:
    L = len(layers)
    fwd_a2a = None
    for i in range(L):
        loop.compute(i, "fwd", layers[i].fwd_compute, (wg[i],))
        if layers[i].fwd_type == "all_to_all":
            issued = loop.collective(i, "fwd", dims[i]["fwd"], "highest")
            if i == 0:
                fwd_a2a = issued
        if i == bottom:
            loop.block(fwd_a2a)
    for i in reversed(range(L)):
        loop.compute(i, "wg", layers[i].wg_compute)
        wg[i] = loop.collective(i, "wg", dims[i]["wg"])
        if not enhanced:
            loop.block(ig[i] if i == 0 else None)
        if i == 0:
            break
        loop.compute(i, "ig", layers[i].ig_compute)
        if i == bottom + 1:
            ig[0] = loop.collective(0, "ig", dims[0]["ig"], "highest")
