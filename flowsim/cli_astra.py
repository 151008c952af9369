"""ASTRA-sim's command-line flags on ``flowsim run``: the ones with a flowsim equivalent are
aliases of it, the others are accepted when they change nothing flowsim models (a warning
says so) and refused otherwise, one line naming what flowsim does instead.

Flags of ASTRA-sim 2.x's analytical and ns-3 front ends (``CmdLineParser.cc``,
``AstraSimNetwork.cc``) and of ASTRA-sim 1.0 (its README). ``--compute-scale`` and
``--comm-scale`` are flowsim's own names too.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from .errors import ConfigError, FlowsimWarning

#: ASTRA-sim flag -> (flowsim's option dest, flowsim's flag)
ALIASES = {
    "--workload-configuration": ("workload", "--workload"),
    "--system-configuration": ("system", "--system"),
    "--network-configuration": ("network", "--network"),
    "--remote-memory-configuration": ("memory", "--memory"),
    "--num-passes": ("iterations", "--iterations"),
    "--path": ("csv", "--csv"),
}
#: flags about ASTRA-sim's logs and reports: ignored, with a warning
IGNORED = {
    "--logging-configuration": "flowsim writes no log files (results: -o, --csv, --trace)",
    "--logging-folder": "flowsim writes no log files (results: -o, --csv, --trace)",
    "--run-name": "flowsim names a run by its workload",
    "--total-stat-rows": "flowsim writes one result per run (sweeps: flowsim sweep)",
    "--stat-row": "flowsim writes one result per run (sweeps: flowsim sweep)",
}
#: flags flowsim does not model: (value that changes nothing, what flowsim does instead)
REFUSED = {
    "--num-queues-per-dim": ("1", "flowsim has one queue per dimension and NPU set; "
                                  "'active-chunks-per-dimension' in the system json sets "
                                  "how many chunks run at once"),
    "--injection-scale": ("1", "flowsim injects every message at once"),
    "--rendezvous-protocol": ("false", "flowsim sends eagerly, as ASTRA-sim's default"),
    "--logical-topology-configuration": (None, "flowsim reads the NPUs per dimension from "
                                               "the network config (--network)"),
    "--htsim_opts": (None, "flowsim's network models are analytical and flow (--model)"),
}


def _dest(flag: str) -> str:
    return "astra_" + flag.lstrip("-").replace("-", "_")


def add_astra_options(parser: argparse.ArgumentParser, passes_type: Any) -> None:
    """Add ASTRA-sim's flags to ``flowsim run``'s parser (``passes_type`` checks
    ``--num-passes`` as ``--iterations``)."""
    group = parser.add_argument_group(
        "ASTRA-sim's flags", "accepted as they are; see 'From ASTRA-sim' in the docs")
    for flag, (dest, ours) in ALIASES.items():
        group.add_argument(flag, dest=dest, default=argparse.SUPPRESS, metavar="VALUE",
                           type=passes_type if dest == "iterations" else str,
                           help=f"= {ours}")
    group.add_argument("--comm-group-configuration", dest=_dest("--comm-group-configuration"),
                       default=None, metavar="FILE",
                       help="= --comm-group (a path containing 'empty' means none, as in "
                            "ASTRA-sim)")
    for flag in (*IGNORED, *REFUSED):
        group.add_argument(flag, dest=_dest(flag), default=None, metavar="VALUE",
                           help=argparse.SUPPRESS)


def apply_astra_options(args: argparse.Namespace) -> None:
    """Resolve ASTRA-sim's flags on parsed ``flowsim run`` arguments: the communicator file,
    warnings for ignored flags, errors for flags flowsim does not model."""
    comm = getattr(args, _dest("--comm-group-configuration"), None)
    if comm is not None and "empty" not in comm:     # ASTRA-sim's "not given"
        if args.comm_group is not None:
            raise ConfigError("arguments --comm-group and --comm-group-configuration: give one")
        args.comm_group = comm
    for flag, why in IGNORED.items():
        if getattr(args, _dest(flag), None) is not None:
            warnings.warn(f"argument {flag} ignored: {why}", FlowsimWarning, stacklevel=2)
    for flag, (harmless, instead) in REFUSED.items():
        value = getattr(args, _dest(flag), None)
        if value is not None and value.strip().lower() != harmless:
            raise ConfigError(f"argument {flag}={value}: not modelled by flowsim ({instead})")
