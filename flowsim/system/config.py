"""System configs: ASTRA-sim 2.x system json into a frozen dataclass.

Modelled keys (ASTRA-sim spelling and units):

``preferred-dataset-splits``      chunks per collective (>= 1; default 1)
``active-chunks-per-dimension``   chunks in flight per dimension queue (>= 1; default 1)
``scheduling-policy``             ``LIFO`` or ``FIFO`` among collectives queued on a dimension
``endpoint-delay``                ns per message hand-off: a phase of ``s`` steps pays ``s+1``
``local-mem-bw``                  GB/s with GB = 1e9 B; a reduction of ``m`` bytes costs
                                  ``3 m / local-mem-bw`` (one write, two reads)
``collective-optimization``       ``baseline`` or ``localBWAware``
``all-reduce-implementation`` (and ``reduce-scatter-``, ``all-gather-``, ``all-to-all-``)
                                  one algorithm per dimension, or one flat ``one*`` algorithm
``local-reduction-delay``         ns per reduction step, only with ``model-shared-bus: 1``
                                  (as in ASTRA-sim, where only the LogGP bus model reads it)

flowsim extensions: ``step-synchronization`` (``barrier``, ASTRA-sim's, or ``per_npu``),
``broadcast-implementation`` and ``reduce-implementation`` (default: the all-reduce list),
``ring-delays`` (``per_dimension``, ASTRA-sim's, or ``flat``: see :data:`RING_DELAYS`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._validate import (
    BANDWIDTH_GBPS,
    LATENCY_NS,
    as_config,
    as_list,
    as_str,
    choices_of,
    read_bool,
    read_choice,
    read_int,
    read_number,
)
from ..collectives import ALGORITHMS, FLAT_PREFIX, canonical_algorithm
from ..errors import ConfigError, ConfigTypeError, FlowsimWarning, config_error
from .cost import reduction_ns

IMPLEMENTATION_KEYS = {
    "all_reduce": "all-reduce-implementation",
    "reduce_scatter": "reduce-scatter-implementation",
    "all_gather": "all-gather-implementation",
    "all_to_all": "all-to-all-implementation",
    "broadcast": "broadcast-implementation",
    "reduce": "reduce-implementation",
}
#: How the steps of a collective wait on each other (see the README).
Synchronization = Literal["barrier", "per_npu"]
SYNCHRONIZATIONS: tuple[Synchronization, ...] = choices_of(Synchronization)
#: ``ring-delays``: the endpoint delays of a ring reduce-scatter or all-gather over several
#: dimensions. ``per_dimension`` (ASTRA-sim): each dimension's ring pays its own ``p_d - 1``
#: steps' delays. ``flat``: NCCL's, which runs such a collective across nodes as one ring
#: through all ``p`` ranks (with several ranks per node and no SHARP, its only algorithm for
#: them: NVIDIA/nccl ``src/graph/tuning.cc``, whose PAT takes one rank per node), so it pays
#: ``p - 1`` hand-offs: every step of a dimension's ring pays one delay per pass of the flat
#: ring through that dimension, the product of the sizes of the dimensions outside it. The
#: bytes move as the per-dimension rings move them (what NCCL's rail-aligned rings carry over
#: each NIC and NVLink).
RingDelays = Literal["per_dimension", "flat"]
RING_DELAYS: tuple[RingDelays, ...] = choices_of(RingDelays)
#: ASTRA-sim's ``collective-optimization``.
Optimization = Literal["baseline", "localBWAware"]
OPTIMIZATIONS: tuple[Optimization, ...] = choices_of(Optimization)
#: ASTRA-sim's ``scheduling-policy`` among collectives queued on a dimension.
Policy = Literal["LIFO", "FIFO"]
POLICIES: tuple[Policy, ...] = choices_of(Policy)
#: Most chunks per collective (``preferred-dataset-splits``) and chunks in flight: 64 times
#: ASTRA-sim's largest examples; every chunk is scheduled through every phase.
MAX_CHUNKS = 4096

_MODELLED = {"preferred-dataset-splits", "active-chunks-per-dimension", "scheduling-policy",
             "endpoint-delay", "local-mem-bw", "collective-optimization",
             "step-synchronization", "local-reduction-delay", "model-shared-bus", "ring-delays",
             *IMPLEMENTATION_KEYS.values()}
#: Keys ASTRA-sim documents that flowsim reads but does not model, and why.
_NOT_MODELLED = {
    "boost-mode": "ASTRA-sim does not read it either",
    "intra-dimension-scheduling": "flowsim schedules dimensions in ascending order, "
                                  "ASTRA-sim's default",
    "inter-dimension-scheduling": "flowsim schedules dimensions in ascending order, "
                                  "ASTRA-sim's default",
    "L": "LogGP bus model parameters are not modelled",
    "o": "LogGP bus model parameters are not modelled",
    "g": "LogGP bus model parameters are not modelled",
    "G": "LogGP bus model parameters are not modelled",
    "replay-only": "not modelled",
    "track-local-mem": "not modelled",
}
#: Keys used by the compute model of the workload layer; accepted silently here.
_COMPUTE_KEYS = {"roofline-enabled", "peak-perf", "compute-scale", "local-mem-bw-roofline"}
#: Values of not-modelled keys that mean "off", for which no warning is needed.
_HARMLESS = {0, "0", "baseline", "ascending"}


@dataclass(frozen=True, kw_only=True)
class SystemConfig:
    """A validated system config (hashable).

    The defaults are those of ASTRA-sim's ``Ring_4chunks.json`` example (4 chunks, one active
    chunk per dimension, LIFO, 10 ns endpoint delay, 1600 GB/s local memory, localBWAware,
    ring in every dimension).

    Attributes
    ----------
    splits : int
        ``preferred-dataset-splits``: chunks per collective.
    active_chunks : int
        ``active-chunks-per-dimension``.
    scheduling_policy : {"LIFO", "FIFO"}
    endpoint_delay_ns : float
    local_mem_bw_gbps : float or None
        ``None`` means reductions cost nothing.
    local_reduction_delay_ns : float
    collective_optimization : {"baseline", "localBWAware"}
    implementations : tuple of (collective, tuple of algorithm names)
        Algorithm per dimension for every collective type; a single ``one*`` entry means flat.
    synchronization : {"barrier", "per_npu"}
    ring_delays : {"per_dimension", "flat"}
        See :data:`RING_DELAYS`.
    source : str
    """

    splits: int = 4
    active_chunks: int = 1
    scheduling_policy: str = "LIFO"
    endpoint_delay_ns: float = 10.0
    local_mem_bw_gbps: float | None = 1600.0
    local_reduction_delay_ns: float = 0.0
    collective_optimization: str = "localBWAware"
    #: ``()`` means ``ring`` in every dimension
    implementations: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("all_reduce", ()), ("reduce_scatter", ()), ("all_gather", ()),
        ("all_to_all", ()), ("broadcast", ()), ("reduce", ()))
    synchronization: str = "barrier"
    ring_delays: str = "per_dimension"
    #: custom algorithms given as Chakra send/recv traces: (collective, trace prefix), from the
    #: ``*-implementation-custom`` keys (relative prefixes resolved against the system file)
    custom: tuple[tuple[str, str], ...] = ()
    #: every NPU leaves a per-NPU (tree) phase when the last one does: ASTRA-sim 1.0's streams
    #: (set by the 1.0 system reader); ASTRA-sim 2.x lets each NPU go on by itself
    phase_barrier: bool = False
    #: collective types whose algorithm was given as a plain string, not a list (a flowsim
    #: extension): the same algorithm in every dimension, whatever the network's shape
    every_dimension: tuple[str, ...] = ()
    source: str = field(default="<default>", compare=False)

    def implementation(self, collective: str) -> tuple[str, ...]:
        """Algorithm names (per dimension, or one flat ``one*``) for a collective type."""
        return dict(self.implementations)[collective]

    def reduction_ns(self, nbytes: float) -> float:
        """Local reduction cost of ``nbytes`` received bytes (ns), as ASTRA-sim charges it
        (see :func:`flowsim.system.cost.reduction_ns`)."""
        return reduction_ns(nbytes, self.local_mem_bw_gbps, self.local_reduction_delay_ns)


def warn_not_modelled(source: str, key: str, value: Any, why: str, stacklevel: int = 2
                      ) -> None:
    """The uniform :class:`~flowsim.errors.FlowsimWarning` for a key flowsim reads but does
    not model, set to a value that would matter in ASTRA-sim (``why`` says what flowsim does
    instead)."""
    warnings.warn(f"{source}: key '{key}' = {value!r} is not modelled by flowsim ({why})",
                  FlowsimWarning, stacklevel=stacklevel + 1)


def _algorithm(value: Any, *, source: str, key: str) -> str:
    """An algorithm name (case-insensitive; ``one*`` for the flat variants)."""
    name = canonical_algorithm(value)
    if name is None:
        known = sorted(ALGORITHMS) + sorted(FLAT_PREFIX + n[0].upper() + n[1:]
                                            for n in ALGORITHMS)
        raise config_error(source, key, "one of " + ", ".join(known), value,
                           cls=ConfigError if isinstance(value, str) else ConfigTypeError)
    return name


def _implementation(data: Mapping[str, Any], key: str, source: str,
                    default: tuple[str, ...]) -> tuple[str, ...]:
    value = data.get(key, list(default))
    names = as_list(value, _algorithm, source=source, key=key, scalar=True, min_length=1,
                    max_length=64, what="a list of algorithm names, one per dimension")
    flat = [n for n in names if n.startswith(FLAT_PREFIX)]
    if flat and len(names) > 1:
        raise config_error(source, key, f"a single flat algorithm ('{flat[0]}' treats all "
                           f"dimensions as one) or one algorithm per dimension", value)
    return tuple(names)


def _choice(data: Mapping[str, Any], key: str, source: str, default: str,
            choices: tuple[str, ...]) -> str:
    """An option of the system json (any letter case, as ASTRA-sim's parser)."""
    return read_choice(data, key, choices, source=source, default=default,
                       case_insensitive=True)


def parse_system_config(data: Mapping[str, Any], source: str = "<dict>") -> SystemConfig:
    # ASTRA-sim's own defaults where a key is absent (they differ from the example file
    # used for SystemConfig()): 1 split, no reduction cost, baseline.
    """Validate an ASTRA-sim 2.x system mapping and return a :class:`SystemConfig`.

    Unknown keys, and known keys flowsim does not model (with a value that would matter),
    are reported as :class:`~flowsim.errors.FlowsimWarning` naming the key.
    """
    as_config(data, source=source, what="system")
    impls: dict[str, Any] = {}
    for collective, key in IMPLEMENTATION_KEYS.items():
        default = impls.get("all_reduce", ("ring",)) if collective in ("broadcast", "reduce") \
            else ("ring",)
        impls[collective] = _implementation(data, key, source, default)
    shared_bus = read_bool(data, "model-shared-bus", source=source, default=False,
                           zero_one=True)
    config = SystemConfig(
        splits=read_int(data, "preferred-dataset-splits", source=source, default=1,  # ASTRA: 0
                        minimum=1, maximum=MAX_CHUNKS),
        active_chunks=read_int(data, "active-chunks-per-dimension", source=source, default=1,
                               minimum=1, maximum=MAX_CHUNKS),
        scheduling_policy=_choice(data, "scheduling-policy", source, "LIFO", POLICIES),
        endpoint_delay_ns=read_number(data, "endpoint-delay", source=source, default=10.0,
                                      quantity=LATENCY_NS),
        local_mem_bw_gbps=read_number(data, "local-mem-bw", source=source, default=None,
                                      quantity=BANDWIDTH_GBPS),
        local_reduction_delay_ns=(read_number(data, "local-reduction-delay", source=source,
                                              default=0.0, quantity=LATENCY_NS)
                                  if shared_bus else 0.0),
        collective_optimization=_choice(data, "collective-optimization", source, "baseline",
                                        OPTIMIZATIONS),
        implementations=tuple(impls.items()),
        synchronization=_choice(data, "step-synchronization", source, "barrier",
                                SYNCHRONIZATIONS),
        ring_delays=_choice(data, "ring-delays", source, "per_dimension", RING_DELAYS),
        custom=_custom_implementations(data, source),
        every_dimension=tuple(c for c, key in IMPLEMENTATION_KEYS.items()
                              if isinstance(data.get(key), str)
                              and not data[key].lower().startswith(FLAT_PREFIX.lower())),
        source=source)
    for key, value in data.items():
        if not isinstance(key, str):
            raise config_error(source, str(key), "string keys (ASTRA-sim system json keys)",
                               key)
        if key in _MODELLED or key in _COMPUTE_KEYS or key.endswith("-implementation-custom"):
            continue
        if key in _NOT_MODELLED:
            if not isinstance(value, (str, int, float)):  # lists, mappings: a wrong type
                raise config_error(source, key, "a number or a name (flowsim reads this key "
                                   "but does not model it)", value, cls=ConfigTypeError)
            if value not in _HARMLESS:
                warn_not_modelled(source, key, value, _NOT_MODELLED[key], stacklevel=2)
            continue
        warnings.warn(f"{source}: unknown system key '{key}' ignored", FlowsimWarning,
                      stacklevel=2)
    if not shared_bus and read_number(data, "local-reduction-delay", source=source,
                                      default=0.0, quantity=LATENCY_NS):
        warnings.warn(f"{source}: key 'local-reduction-delay' is ignored without "
                      f"'model-shared-bus: 1' (as in ASTRA-sim, only its LogGP bus model reads "
                      f"it)", FlowsimWarning, stacklevel=2)
    return config


def _custom_implementations(data: Mapping[str, Any], source: str
                            ) -> tuple[tuple[str, str], ...]:
    """``<collective>-implementation-custom: [prefix]`` keys: one trace prefix each."""
    out = []
    for collective, key in IMPLEMENTATION_KEYS.items():
        value = data.get(key + "-custom")
        if value is None:
            continue
        value = as_list(value, as_str, source=source, key=key + "-custom", scalar=True,
                        min_length=1, max_length=1,
                        what="a list with one Chakra trace prefix (<prefix>.<rank>.et)")
        prefix = Path(value[0])
        if not prefix.is_absolute() and source not in ("<dict>", "<default>"):
            beside = Path(source).parent / prefix
            prefix = beside if beside.parent.is_dir() else prefix
        out.append((collective, str(prefix)))
    return tuple(out)
