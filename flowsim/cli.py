"""The ``flowsim`` command line.

``flowsim collective``  simulate one collective (defaults: bundled ring of 8 NPUs, ASTRA-sim's
                        Ring_4chunks system, a 64 MiB all-reduce, analytical model).

Every error about an input is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from . import __version__
from .errors import FlowsimError, FlowsimWarning
from .resources import DEFAULT_NETWORK, bundled_names
from .units import format_size, format_time


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsim",
        description="Fast analytical and flow-level simulator of distributed ML training "
                    "platforms (ASTRA-sim family).")
    parser.add_argument("--version", action="version", version=f"flowsim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    coll = commands.add_parser(
        "collective", help="simulate one collective",
        description="Simulate one collective on a network and print its time.")
    coll.add_argument("--network", default=DEFAULT_NETWORK,
                      help="network YAML (ASTRA-sim 2.x keys) or a bundled name "
                           f"(default: {DEFAULT_NETWORK}; bundled: "
                           + ", ".join(bundled_names("network")) + ")")
    coll.add_argument("--system", default=None,
                      help="system json (ASTRA-sim 2.x keys) or a bundled name (default: "
                           "ASTRA-sim's Ring_4chunks settings, ring in every dimension; "
                           "bundled: " + ", ".join(bundled_names("system")) + ")")
    coll.add_argument("--collective", default="all-reduce",
                      help="all-reduce, reduce-scatter, all-gather, all-to-all, broadcast, "
                           "reduce or send-recv (default: all-reduce)")
    coll.add_argument("--size", default="64MiB",
                      help="bytes per NPU, e.g. 1048576, 64MiB, 1GB (default: 64MiB; for "
                           "all-gather, each NPU's input)")
    coll.add_argument("--model", default="analytical", choices=["analytical", "flow"],
                      help="analytical (congestion-unaware, as ASTRA-sim) or flow "
                           "(max-min fair sharing); default: analytical")
    coll.add_argument("--dims", default=None,
                      help="comma-separated dimensions the collective spans (default: all)")
    coll.add_argument("--root", type=int, default=0, help="root NPU of broadcast / reduce")
    coll.add_argument("--src", type=int, default=None, help="sender of send-recv")
    coll.add_argument("--dst", type=int, default=None, help="receiver of send-recv")
    coll.add_argument("--json", action="store_true",
                      help="print one JSON object (time_ns, model, npus, ...) instead of text")
    coll.add_argument("-o", "--output", default=None,
                      help="write the full result Dataset (NetCDF, .nc)")
    coll.add_argument("--trace", default=None,
                      help="write a Chrome-trace / Perfetto timeline (.json)")
    return parser


def _run_collective(args: argparse.Namespace) -> int:
    from .system import simulate_collective
    from .topology import load_network

    dims = None
    if args.dims is not None:
        try:
            dims = [int(d) for d in args.dims.split(",") if d.strip() != ""]
        except ValueError:
            raise FlowsimError(f"argument --dims: expected comma-separated integers, "
                               f"found {args.dims!r}") from None
    network = load_network(args.network)
    ds = simulate_collective(network, args.collective, args.size, args.system,
                             model=args.model, dims=dims, root=args.root, src=args.src,
                             dst=args.dst, trace=args.trace)
    if args.output:
        from .results import write_dataset
        write_dataset(ds, args.output)
    summary = {
        "time_ns": float(ds.time_ns),
        "model": ds.attrs["model"],
        "collective": ds.attrs["collective"],
        "size_bytes": ds.attrs["size_bytes"],
        "npus": ds.attrs["npus"],
        "network": str(args.network),
        "system": str(args.system) if args.system else "default",
        "topology": [str(t) for t in ds.topology.values],
        "algorithm": [str(a) for a in ds.algorithm.values],
        "dim_bytes": [float(b) for b in ds.dim_bytes.values],
        "stats": json.loads(ds.attrs["stats"]),
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    shape = " x ".join(f"{t}({n})" for t, n in zip(summary["topology"],
                                                 ds.npus_count.values.tolist()))
    print(f"flowsim {__version__}: {summary['collective'].replace('_', '-')} of "
          f"{format_size(summary['size_bytes'])} on {summary['npus']} NPUs [{shape}], "
          f"{summary['model']} model")
    print(f"  time:       {format_time(summary['time_ns'])}  ({summary['time_ns']:.1f} ns)")
    print(f"  algorithms: {', '.join(summary['algorithm'])}")
    busy = ds.dim_busy_ns.values
    for d in range(len(busy)):
        print(f"  dim {d}: {format_size(ds.dim_bytes.values[d])} over links, busy "
              f"{format_time(busy[d])}")
    stats = summary["stats"]
    print(f"  flows: {stats['flows']}, steps: {stats['steps']}, events: {stats['events']}")
    if args.output:
        print(f"  wrote {args.output}")
    if args.trace:
        print(f"  wrote {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flowsim`` console command."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", FlowsimWarning)
            warnings.showwarning = _warning_line  # type: ignore[assignment]
            return _run_collective(args)
    except FlowsimError as exc:
        print(f"flowsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("flowsim: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"flowsim: error: {exc}", file=sys.stderr)
        return 2


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"flowsim: warning: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
