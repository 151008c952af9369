"""The ``flowsim`` command line.

``flowsim collective``  simulate one collective (defaults: bundled ring of 8 NPUs, ASTRA-sim's
                        Ring_4chunks system, a 64 MiB all-reduce, analytical model).
``flowsim sweep``       run a sweep spec (a grid of configurations), locally, as a shard of
                        an array job, or on Dask.
``flowsim merge``       assemble the shards of a sweep.

Every error about an input is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path
from typing import Any

# Only light imports here: ``flowsim --help`` and ``--version`` must not load numpy, xarray or
# Numba. Each subcommand imports what it needs.
from ._version import __version__
from .cli_args import build_parser
from .errors import ConfigError, FlowsimError, FlowsimWarning


def _run_sweep(args: argparse.Namespace) -> int:
    from .sweep import SweepInterrupted, sweep

    client = None
    if args.dask:
        try:
            from distributed import Client
        except ImportError:
            raise FlowsimError("--dask needs dask.distributed: pip install 'flowsim[dask]'") \
                from None
        client = Client(args.dask)
    try:
        options = {} if args.checkpoint is None else {"checkpoint_seconds": args.checkpoint}
        ds = sweep(args.spec, args.output, jobs=args.jobs, client=client, shard=args.shard,
                   progress=not args.no_progress, max_work=args.max_work, **options)
    except SweepInterrupted as stop:
        print(f"flowsim: interrupted; {len(stop.results)} finished point(s) kept, run the "
              f"same command again to resume", file=sys.stderr)
        return 130
    finally:
        if client is not None:
            client.close()
    failed = int((ds.error != "").sum())
    print(f"wrote {args.output}: {ds.sizes.get('point', None) or _grid(ds)} point(s)"
          + (f", {failed} failed (see the 'error' variable)" if failed else ""))
    return 0


def _grid(ds) -> int:
    import math
    return math.prod(ds.time_ns.shape)


def _run_merge(args: argparse.Namespace) -> int:
    from .sweep import merge

    ds = merge(args.folder, args.output)
    print(f"wrote {args.output}: {_grid(ds)} point(s) from {args.folder}")
    return 0


def _with_failures(args: argparse.Namespace):
    """The fabric config of ``--network`` with ``--fail`` / ``--degrade`` added."""
    from ._io import read_mapping
    from .resources import resolve_config_path
    from .topology import parse_network_mapping

    path: str | Path
    if isinstance(args.network, dict):   # already read, with --set items applied
        path, data = "--network", dict(args.network)
    else:
        path = resolve_config_path(args.network, kind="network")
        data = dict(read_mapping(path, what="network config"))
    cluster = "cluster" in data
    if cluster:   # a cluster preset: its fabric form has links to fail
        from .topology.clusters import as_cluster, cluster_mapping

        data = cluster_mapping(data, str(path))
        if "fabric" not in data:
            raise FlowsimError(f"{path}: --fail and --degrade need the cluster's fabric "
                               f"form, whose links can fail: set 'cluster.form: fabric' "
                               f"(e.g. --set network.cluster.form=fabric)")
    if "fabric" not in data and "infragraph" not in data:
        raise FlowsimError(f"{path}: --fail and --degrade need a fabric network (a 'fabric:' "
                           f"or 'infragraph:' config); Ring / FullyConnected / Switch "
                           f"dimensions have no alternative routes")
    # failures sit in the fabric mapping, or at the top level of an InfraGraph network file
    fabric = data if "infragraph" in data else dict(data["fabric"])
    fabric["fail"] = list(fabric.get("fail") or []) + list(args.fail)
    degrade = dict(fabric.get("degrade") or {})
    for item in args.degrade:
        pattern, sep, factor = item.rpartition("=")
        try:
            degrade[pattern] = float(factor)
        except ValueError:
            sep = ""
        if not sep or not pattern:
            raise FlowsimError(f"argument --degrade: expected PATTERN=FACTOR, found {item!r}")
    fabric["degrade"] = degrade
    if "fabric" in data:
        data["fabric"] = fabric
    config = parse_network_mapping(data, str(path))
    return as_cluster(config) if cluster else config


def _run_collective(args: argparse.Namespace) -> int:
    # the record, not the Dataset: a shell loop's --json point never loads xarray
    from .cli_set import apply_set_items
    from .system.collective import run_collective
    from .topology import load_network
    from .units import format_size, format_time

    apply_set_items(args, workload=False)
    _check_output("-o", args.output)
    _check_output("--trace", args.trace, trace=True)
    dims = None
    if args.dims is not None:
        try:
            dims = [int(d) for d in args.dims.split(",") if d.strip() != ""]
        except ValueError:
            raise FlowsimError(f"argument --dims: expected comma-separated integers, "
                               f"found {args.dims!r}") from None
    network = load_network(_with_failures(args) if args.fail or args.degrade else args.network)
    record = run_collective(network, args.collective, args.size, args.system,
                            model=args.model, dims=dims, root=args.root, src=args.src,
                            dst=args.dst, trace=args.trace, max_work=args.max_work)
    if args.output:
        from .results import write_dataset
        write_dataset(record.to_dataset(), args.output, option="-o")
    summary = {"network": args.network_name, "system": _system_label(args, network),
               **record.summary()}
    if args.json:
        from ._io import json_text
        print(json_text(summary))
        return 0
    shape = " x ".join(f"{t}({n})" for t, n in zip(summary["topology"],
                                                 summary["npus_count"]))
    print(f"flowsim {__version__}: {summary['collective'].replace('_', '-')} of "
          f"{format_size(summary['size_bytes'])} on {summary['npus']} NPUs [{shape}], "
          f"{summary['model']} model, system {summary['system']}")
    print(f"  time:       {format_time(summary['time_ns'])}  ({summary['time_ns']:.1f} ns)")
    print(f"  algorithms: {', '.join(summary['algorithm'])}")
    for d, (carried, busy) in enumerate(zip(summary["dim_bytes"], summary["dim_busy_ns"])):
        over = f"{format_size(carried)} over links, " if carried is not None else ""
        print(f"  dim {d}: {over}busy {format_time(busy)}")
    stats = summary["stats"]
    print(f"  flows: {stats['flows']}, steps: {stats['steps']}, events: {stats['events']}")
    if args.output:
        print(f"  wrote {args.output}")
    if args.trace:
        print(f"  wrote {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _roofline_option(text: str | None) -> dict | None:
    if text is None:
        return None
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (2, 3):
        raise FlowsimError(f"argument --roofline: expected TFLOPS,GBPS[,EFFICIENCY], found "
                           f"{text!r}")
    keys = ("peak_tflops", "memory_bandwidth_GBps", "efficiency")
    return dict(zip(keys, values))


def _check_output(option: str, path: str | None, *, folder: bool = False,
                  trace: bool = False) -> None:
    """Fail before simulating when an output cannot be written: a Dataset file in a format
    its extension names, a trace ``.json``, or a folder for CSVs."""
    from .results.io import output_format

    if path is None:
        return
    if folder:
        if Path(path).exists() and not Path(path).is_dir():
            raise ConfigError(f"argument {option}: {path} exists and is not a folder")
        return
    output_format(path, option=option, formats={".json": "Chrome trace JSON"} if trace
                  else None)


def _system_label(args: argparse.Namespace, network: Any) -> str:
    """The run's system for its summary: as given, or the default it took: a ``cluster:``
    network's own (``nccl``), else ``default`` (flowsim's, ASTRA-sim's Ring_4chunks)."""
    label = args.system_name
    if not args.system_given:   # "default", or "default with system.<key>=..." items
        from .system.load import default_system_name
        from .topology import load_network

        name = default_system_name(load_network(network))   # built already: cached
        label = label.replace("default", name, 1) if name else label
    return label


def _run_workload(args: argparse.Namespace) -> int:
    # the run's record and summary; a Dataset (xarray) only when -o or --csv writes one
    from .cli_astra import apply_astra_options
    from .cli_set import apply_set_items
    from .system.simulate import run_training
    from .units import format_size, format_time

    apply_astra_options(args)
    apply_set_items(args, workload=True)
    _check_output("-o", args.output)
    _check_output("--trace", args.trace, trace=True)
    _check_output("--csv", args.csv, folder=True)
    from .topology import load_network

    # built once: the run and the summary's system label read the same network (a second
    # read would repeat its warnings)
    network = load_network(_with_failures(args) if args.fail or args.degrade
                           else args.network)
    run = run_training(network, args.workload, args.system, model=args.model,
                       iterations=args.iterations, compute_scale=args.compute_scale,
                       comm_scale=args.comm_scale, memory=args.memory,
                       roofline=_roofline_option(args.roofline), comm_groups=args.comm_group,
                       trace=args.trace, max_work=args.max_work, spmd=args.spmd,
                       element_bytes=args.element_bytes)
    written = []
    if args.output or args.csv:
        ds = run.to_dataset()
        if args.output:
            from .results import write_dataset
            write_dataset(ds, args.output, option="-o")
            written.append(args.output)
        if args.csv:
            from .results import write_csvs
            written += [str(p) for p in write_csvs(ds, args.csv)]
    if args.trace:
        written.append(args.trace)
    summary = {**run.summary(), "system": _system_label(args, network)}
    if args.json:
        from ._io import json_text
        print(json_text({k: v for k, v in summary.items()
                         if k not in ("dim_busy_ns", "most_exposed")}))
        return 0
    total = summary["time_ns"]
    print(f"flowsim {__version__}: {summary['workload']} on {summary['npus']} NPUs, "
          f"{summary['iterations']} iteration(s), {summary['model']} model, system "
          f"{summary['system']}")
    if "layout" in summary:
        print(f"  layout:        {summary['layout']}")
    print(f"  time:          {format_time(total)}  ({total:.1f} ns)")

    def share(key: str) -> str:
        return f"{100 * summary[key]:5.1f}%" if math.isfinite(summary[key]) else "  -  "

    print(f"  compute:       {format_time(summary['compute_ns'])}  {share('compute_share')} "
          "(means over NPUs, shares of their time)")
    print(f"  exposed comm:  {format_time(summary['exposed_comm_ns'])}  "
          f"{share('exposed_comm_share')}")
    if summary["bubble_ns"] > 0:   # a pipeline
        print(f"  bubble:        {format_time(summary['bubble_ns'])}  {share('bubble_share')} "
              "(waiting on pipeline receives)")
    print(f"  idle:          {format_time(summary['idle_ns'])}  {share('idle_share')}")
    if "tflops_per_npu" in summary:
        mfu = f", MFU {100 * summary['mfu']:.1f}%" if "mfu" in summary else ""
        print(f"  throughput:    {summary['tflops_per_npu']:.1f} TFLOP/s per NPU{mfu} "
              f"({summary['model_flops']:.3e} model FLOPs per iteration, Megatron-LM's count)")
    if "memory_gib" in summary:
        parts = summary["memory"]
        of = f" of {summary['memory_capacity_gib']:.0f}" if "memory_capacity_gib" in summary \
            else ""
        fits = summary.get("memory_fits", True)
        print(f"  memory:        {summary['memory_gib']:.1f}{of} GiB per NPU at the peak, stage "
              f"{parts['stage']} (weights {parts['weights']:.1f}, gradients "
              f"{parts['gradients']:.1f}, optimizer {parts['optimizer']:.1f}, activations "
              f"{parts['activations']:.1f}; an estimate)"
              + ("" if fits else " -- DOES NOT FIT the device's memory"))
    if summary["most_exposed"]:
        print("  most exposed:  " + ", ".join(f"{layer} {format_time(v)}"
                                             for layer, v in summary["most_exposed"])
              + " (per layer, mean over its NPUs)")
    for d, (carried, busy) in enumerate(zip(summary["dim_bytes"], summary["dim_busy_ns"])):
        over = f"{format_size(carried)} over links, " if carried is not None else ""
        print(f"  dim {d}: {over}busy {format_time(busy)}")
    for path in written:
        print(f"  wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flowsim`` console command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        with warnings.catch_warnings():
            # each warning once per run ("default"), however many chunks or ops repeat it
            warnings.simplefilter("default", FlowsimWarning)
            warnings.showwarning = _warning_line
            return {"collective": _run_collective, "run": _run_workload,
                    "sweep": _run_sweep, "merge": _run_merge}[args.command](args)
    except FlowsimError as exc:
        print(f"flowsim: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("flowsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `flowsim collective | head -2`: the reader left, fine
        sys.stderr.close()
        return 0
    except OSError as exc:
        print(f"flowsim: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(message: object) -> str:
    """A message as one line (a file name or value may hold line breaks)."""
    return str(message).replace("\r", "\\r").replace("\n", "\\n")


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"flowsim: warning: {_one_line(message)}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
