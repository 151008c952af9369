"""Decode time of a Chakra trace: flowsim's protobuf codec against the hand-written wire reader
it replaced (issue 16), read from git history.

    python scripts/bench_chakra.py                      # the PyTorch trace of real_inputs
    python scripts/bench_chakra.py --trace x.0.et --repeat 11
    python scripts/bench_chakra.py --old-rev 88b3a2d    # where the old reader lives

Three timings, each the median of ``--repeat`` runs after one warm-up run:

* ``old read_et``: the old ``_protowire`` module (``git show REV:flowsim/workload/
  _protowire.py``), decoding every node into the dicts of ``read_et`` (the only decoding it
  had: ``load_chakra`` read those dicts);
* ``new read_et``: the same dicts, every attribute, through the ``protobuf`` package;
* ``new decode for load_chakra``: the node dicts ``load_chakra`` reads (the attributes it
  uses, no IOInfo strings);
* ``new messages``: the file into protobuf messages only;
* ``new load``: the trace into flowsim ops, ``load_chakra`` as a whole (decoding, mapping
  nodes to ops, the dependency check).

The old and new dicts are compared: the script fails if they differ.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "validation" / "real_inputs" / "chakra_pytorch" / "chakra.0.et"
OLD_PATH = "flowsim/workload/_protowire.py"


def _old_module(rev: str | None) -> types.ModuleType:
    """The hand-written wire reader at ``rev`` (default: the last commit that has it)."""
    if rev is None:
        deleted = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%H",
                                  "--diff-filter=D", "--", OLD_PATH],
                                 capture_output=True, text=True, check=True).stdout.strip()
        rev = f"{deleted}^" if deleted else "HEAD"
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{OLD_PATH}"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("flowsim.workload._protowire_old")
    module.__package__ = "flowsim.workload"      # its relative imports resolve in flowsim
    exec(compile(source, f"{rev}:{OLD_PATH}", "exec"), module.__dict__)
    return module


def _old_read(pw: types.ModuleType, path: Path) -> tuple[dict, list[dict]]:
    """The old ``read_et``: the whole file in memory, then every message decoded."""
    buf = memoryview(path.read_bytes())
    metadata, nodes = None, []
    for _, start, stop in pw.iter_delimited(buf):
        if metadata is None:
            metadata = pw.decode_metadata(buf, start, stop)
        else:
            nodes.append(pw.decode_node(buf, start, stop))
    return metadata, nodes


def _median(run, repeat: int) -> float:
    run()   # warm-up: imports, caches
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=TRACE,
                        help=f"a Chakra .et file (default: {TRACE})")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs (default 7)")
    parser.add_argument("--old-rev", default=None,
                        help="git revision holding the old reader (default: the commit before "
                             "it was deleted, or HEAD while it exists)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from flowsim.workload.chakra import load_chakra
    from flowsim.workload.chakra_codec import iter_et, node_dict
    from flowsim.workload.chakra_format import read_et
    from flowsim.workload.chakra_nodes import READ_ATTRIBUTES

    old = _old_module(args.old_rev)
    if _old_read(old, args.trace) != read_et(args.trace):
        print("the old and new readers decode different dicts", file=sys.stderr)
        return 1
    timings = {
        "old read_et (hand-written wire reader)": _median(
            lambda: _old_read(old, args.trace), args.repeat),
        "new read_et (protobuf)": _median(lambda: read_et(args.trace), args.repeat),
        "new decode for load_chakra": _median(
            lambda: _decode_nodes(iter_et(args.trace), node_dict, READ_ATTRIBUTES),
            args.repeat),
        "new messages (protobuf only)": _median(lambda: list(iter_et(args.trace)),
                                                args.repeat),
        "new load (trace -> ops)": _median(lambda: _load(load_chakra, args.trace),
                                           args.repeat),
    }
    base = timings["old read_et (hand-written wire reader)"]
    print(f"{args.trace} ({args.trace.stat().st_size / 1e6:.1f} MB), median of {args.repeat}:")
    for name, seconds in timings.items():
        print(f"  {name:40s} {seconds * 1e3:8.1f} ms   {base / seconds:5.1f}x")
    return 0


def _decode_nodes(messages, node_dict, wanted) -> list[dict]:
    next(messages)                      # GlobalMetadata
    return [node_dict(message, wanted) for _, message in messages]


def _load(load_chakra, trace: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # the PyTorch trace's notes on what it ignores
        load_chakra(trace, npus=1, spmd=True)


if __name__ == "__main__":
    sys.exit(main())
