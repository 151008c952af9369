"""The ``flowsim`` command line's options: every subcommand and how its option values are
checked (through :mod:`flowsim._validate`, so a bad value reads as any other input error)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from ._version import __version__
from .cli_astra import add_astra_options
from .errors import ConfigError
from .network.models import MODELS
from .resources import DEFAULT_NETWORK, DEFAULT_WORKLOAD, bundled_names

# This module imports nothing heavy (no numpy): ``flowsim --help`` and ``--version`` build the
# parser and exit. The readers of :mod:`flowsim._validate` load when an option is parsed.


def _argument(reader: str, convert: Callable[[str], Any],
              **limits: Any) -> Callable[[str], Any]:
    """An argparse ``type``: the option's text converted (``int``, ``float``), then checked by
    the :mod:`flowsim._validate` reader named ``reader``; its error becomes argparse's
    "expected ..., found". A limit given as a callable is evaluated when the option is parsed
    (so that building the parser imports nothing heavy)."""
    def parse(text: str) -> Any:
        from . import _validate

        try:
            value = convert(text) if len(text) <= 64 else text
        except ValueError:
            value = text
        now = {key: limit() if callable(limit) else limit for key, limit in limits.items()}
        try:
            return getattr(_validate, reader)(value, source=None, key="", **now)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(f"expected {exc.expected}, found {text!r}") \
                from None
    return parse


def _scale() -> Any:
    """``--compute-scale`` and ``--comm-scale``: factors from 0 to 1e9."""
    from ._validate import Quantity

    return Quantity("", 0.0, 1e9)


def _max_npu() -> int:
    from .topology.network_config import MAX_NPUS

    return MAX_NPUS - 1


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (unless the text already states it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (action.option_strings and "default" not in text and default is not None
                and default is not False and default != [] and default != argparse.SUPPRESS):
            text += " (default: %(default)s)"
        return text


#: Most processes ``--jobs`` may ask for.
MAX_JOBS = 4096
_NPU = _argument("as_int", int, minimum=0, maximum=_max_npu)


def _add_failures(parser: argparse.ArgumentParser) -> None:
    """``--fail`` and ``--degrade``: what-ifs on a fabric network's links."""
    parser.add_argument("--fail", action="append", default=[], metavar="PATTERN",
                        help="fabrics: take out links or switches whose name matches (glob, "
                             "repeatable), e.g. 'spine3' or 'leaf0->*'")
    parser.add_argument("--degrade", action="append", default=[], metavar="PATTERN=FACTOR",
                        help="fabrics: scale the bandwidth of matching links, e.g. "
                             "'leaf0->spine1=0.5' (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``flowsim`` subcommand."""
    parser = argparse.ArgumentParser(
        prog="flowsim", formatter_class=_HelpFormatter,
        description="Fast analytical and flow-level simulator of distributed ML training "
                    "platforms (ASTRA-sim family).")
    parser.add_argument("--version", action="version", version=f"flowsim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _collective_command(commands)
    _run_command(commands)
    _sweep_commands(commands)
    return parser


def _collective_command(commands: Any) -> None:
    """``flowsim collective``."""
    coll = commands.add_parser(
        "collective", help="simulate one collective", formatter_class=_HelpFormatter,
        description="Simulate one collective on a network and print its time.")
    coll.add_argument("--network", default=DEFAULT_NETWORK,
                      help="network YAML (ASTRA-sim 2.x keys) or a bundled name "
                           f"(default: {DEFAULT_NETWORK}; bundled: "
                           + ", ".join(bundled_names("network")) + ")")
    coll.add_argument("--system", default=None,
                      help="system json (ASTRA-sim 2.x keys) or a bundled name (default: "
                           "nccl on a cluster: network, else ASTRA-sim's Ring_4chunks "
                           "settings, ring in every dimension; bundled: "
                           + ", ".join(bundled_names("system")) + ")")
    coll.add_argument("--collective", default="all-reduce",
                      help="all-reduce, reduce-scatter, all-gather, all-to-all, broadcast, "
                           "reduce or send-recv (default: all-reduce)")
    coll.add_argument("--size", default="64MiB",
                      help="bytes per NPU, e.g. 1048576, 64MiB, 1GB (default: 64MiB; for "
                           "all-gather, each NPU's input)")
    coll.add_argument("--model", default="analytical", choices=MODELS,
                      help="analytical (congestion-unaware, as ASTRA-sim) or flow "
                           "(max-min fair sharing); default: analytical")
    coll.add_argument("--dims", default=None,
                      help="comma-separated dimensions the collective spans (default: all)")
    coll.add_argument("--root", type=_NPU, default=0, help="root NPU of broadcast / reduce")
    coll.add_argument("--src", type=_NPU, default=None, help="sender of send-recv")
    coll.add_argument("--dst", type=_NPU, default=None, help="receiver of send-recv")
    _add_failures(coll)
    coll.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="change one key of the network or system, as a sweep axis does "
                           "(repeatable; VALUE read as YAML): network.cluster.nodes=256, "
                           "network.bandwidth[1]=50, system.endpoint-delay=100")
    coll.add_argument("--json", action="store_true",
                      help="print one JSON object (time_ns, model, npus, ...) instead of text")
    coll.add_argument("-o", "--output", default=None,
                      help="write the full result Dataset; the format follows the extension: "
                           ".nc (NetCDF4), .zarr, .csv or .json")
    coll.add_argument("--trace", default=None,
                      help="write a Chrome-trace / Perfetto timeline (.json)")
    _max_work(coll)


def _run_command(commands: Any) -> None:
    """``flowsim run``."""
    run = commands.add_parser(
        "run", help="simulate a training workload", formatter_class=_HelpFormatter,
        description="Simulate a training workload (iterations of compute and communication) "
                    "and print its iteration time and exposed communication.")
    run.add_argument("--network", default=DEFAULT_NETWORK,
                     help="network: ASTRA-sim 2.x YAML, 1.0 analytical JSON, fabric or "
                          f"bundled name (default: {DEFAULT_NETWORK}; bundled: "
                          + ", ".join(bundled_names("network")) + ")")
    run.add_argument("--system", default=None,
                     help="system: 2.x json, 1.0 txt or bundled name (default: nccl on a "
                          "cluster: network, else ASTRA-sim's Ring_4chunks settings, ring in "
                          "every dimension; bundled: "
                          + ", ".join(bundled_names("system")) + ")")
    run.add_argument("--workload", default=DEFAULT_WORKLOAD,
                     help="ASTRA-sim text workload (.txt), flowsim YAML graph or generator "
                          "spec (.yml), Chakra traces (<prefix> of <prefix>.<rank>.et) or a "
                          f"bundled name (default: {DEFAULT_WORKLOAD}; bundled: "
                          + ", ".join(bundled_names("workload")) + ")")
    run.add_argument("--model", default="analytical", choices=MODELS,
                     help="analytical (congestion-unaware, as ASTRA-sim) or flow "
                          "(max-min fair sharing)")
    run.add_argument("--iterations", type=_argument("as_int", int, minimum=1), default=1,
                     help="training iterations (ASTRA-sim's --num-passes; default 1)")
    run.add_argument("--compute-scale", type=_argument("as_number", float, quantity=_scale),
                     default=1.0,
                     help="multiply every compute time (durations, FLOPs and bytes of "
                          "roofline ops; a text workload's cycles of a 1 GHz clock are ns: "
                          "0.5 for a 2 GHz part), in any workload format")
    run.add_argument("--comm-scale", type=_argument("as_number", float, quantity=_scale),
                     default=1.0,
                     help="multiply every communication size (collectives, send / recv), "
                          "in any workload format")
    run.add_argument("--memory", default=None,
                     help="remote-memory json (ASTRA-sim keys) for memory ops (default: no "
                          "memory expansion)")
    run.add_argument("--roofline", default=None, metavar="TFLOPS,GBPS[,EFF]",
                     help="time compute ops given as FLOPs and bytes: peak TFLOP/s, memory "
                          "GB/s (1e9 B/s) and efficiency, e.g. 312,2039,0.5 (default: none; such "
                          "ops are then an error)")
    run.add_argument("--comm-group", default=None,
                     help="Chakra communicator groups json {\"<pg_name>\": [ranks]} "
                          "(default: <prefix>.comm_group.json or <prefix>.json beside the "
                          "traces)")
    run.add_argument("--spmd", action="store_true",
                     help="Chakra: run one rank's trace on every NPU (its default "
                          "communicator spans all NPUs; see 'Bring your own traces')")
    run.add_argument("--element-bytes", type=_argument("as_int", int, minimum=1, maximum=64),
                     default=None,
                     help="Chakra traces whose sizes count elements (symbolic_tensor_graph): "
                          "bytes per element (default 2)")
    _add_failures(run)
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="change one key of the network, system or generator spec, as a "
                          "sweep axis does (repeatable; VALUE read as YAML): "
                          "network.cluster.nodes=256, network.bandwidth[1]=50, "
                          "system.endpoint-delay=100, workload.tp=4, "
                          "workload.config=llama3_70b")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("-o", "--output", default=None,
                     help="write the Dataset; the format follows the extension: .nc (NetCDF4), "
                          ".zarr, .csv or .json")
    run.add_argument("--csv", default=None, metavar="DIR",
                     help="write end_to_end.csv (per layer, as ASTRA-sim 1.0) and npus.csv")
    run.add_argument("--trace", default=None,
                     help="write a Chrome-trace / Perfetto timeline of every NPU (.json)")
    _max_work(run)
    add_astra_options(run, _argument("as_int", int, minimum=1))


def _sweep_commands(commands: Any) -> None:
    """``flowsim sweep`` and ``flowsim merge``."""
    sw = commands.add_parser(
        "sweep", help="run a sweep spec (grid of configurations)",
        formatter_class=_HelpFormatter,
        description="Run every point of a sweep spec and write one xarray Dataset.")
    sw.add_argument("spec", help="sweep spec YAML (see README, 'Sweeps and clusters')")
    sw.add_argument("-o", "--output", required=True,
                    help="result file (.nc, .zarr, .csv or .json, by extension); with --shard, "
                         "the folder that receives shard files")
    sw.add_argument("--jobs", type=_argument("as_int", int, minimum=1, maximum=MAX_JOBS),
                    default=None,
                    help="processes (default: all cores)")
    sw.add_argument("--shard", default=None,
                    help="run shard I/N only (default in a Slurm array job: "
                         "SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT)")
    sw.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="run on the dask.distributed scheduler at ADDRESS")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.add_argument("--checkpoint", type=_argument("as_number", float, minimum=0.0,
                                                   maximum=86400.0),
                    default=None, metavar="SECONDS",
                    help="save finished points every SECONDS (default: 5, "
                         "flowsim.sweep.execute.CHECKPOINT_SECONDS); an interrupted or killed "
                         "sweep resumes from them")
    _max_work(sw, "each point")
    mg = commands.add_parser(
        "merge", help="merge the shard files of a sweep", formatter_class=_HelpFormatter,
        description="Check that every shard of one sweep is present and write the result.")
    mg.add_argument("folder", help="folder with shard-IIIII-of-NNNNN.nc files")
    mg.add_argument("-o", "--output", required=True,
                    help="result file (.nc, .zarr, .csv or .json, by extension)")


def _max_work(parser: argparse.ArgumentParser, what: str = "the run") -> None:
    """``--max-work`` (the default is read where the budget lives, not imported here: the
    parser stays cheap to build)."""
    finite = _argument("as_number", float, positive=True)
    parser.add_argument("--max-work", type=lambda text: math.inf if text.strip().lower() in
                        ("inf", "infinity") else finite(text),
                        default=None, metavar="UNITS",
                        help=f"refuse {what} when its estimated work exceeds UNITS (default: "
                             "1e+11, flowsim.system.budget.DEFAULT_MAX_WORK; 'inf': no limit)")
