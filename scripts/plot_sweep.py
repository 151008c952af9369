"""Plot one output of a sweep result against one axis, a line per value of another.

    python scripts/plot_sweep.py bandwidth_split.nc --x network_bandwidth_2 --hue size \
        [--var time_ns] [--select model=flow] [-o figure.png]

Other axes must be fixed with --select (or have length 1). Needs matplotlib
(``pip install 'flowsim[plot]'``).
"""

from __future__ import annotations

import argparse
import sys

import xarray as xr

from flowsim._atomic import refuse_missing_folder, save_figure


def _same(stored: object, text: str) -> bool:
    if str(stored) == text:
        return True
    try:
        return float(stored) == float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="sweep result (.nc or .zarr)")
    parser.add_argument("--x", required=True, help="axis on the horizontal axis")
    parser.add_argument("--hue", default=None, help="axis drawn as one line per value")
    parser.add_argument("--var", default="time_ns", help="output to plot (default time_ns)")
    parser.add_argument("--select", action="append", default=[],
                        help="fix another axis: NAME=VALUE (repeatable)")
    parser.add_argument("--logx", action="store_true")
    parser.add_argument("--logy", action="store_true")
    parser.add_argument("-o", "--output", default=None, help="PNG file (default: RESULT.png)")
    args = parser.parse_args(argv)
    refuse_missing_folder(parser, args.output, "--output")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_sweep: matplotlib is needed: pip install 'flowsim[plot]'", file=sys.stderr)
        return 2
    if args.result.endswith(".zarr"):
        ds = xr.open_zarr(args.result)
    else:
        ds = xr.open_dataset(args.result)
    da = ds[args.var]
    for item in args.select:
        name, _, value = item.partition("=")
        if name in ds.coords:
            hits = [i for i, v in enumerate(ds[name].values.tolist()) if _same(v, value)]
            if not hits:
                print(f"plot_sweep: {name} has no value {value!r}", file=sys.stderr)
                return 2
            da = da.isel({name: hits[0]})
        elif name in da.dims:  # a zip group: select by position
            da = da.isel({name: int(value)})
        else:
            print(f"plot_sweep: no axis {name!r} (axes: {list(da.dims)})", file=sys.stderr)
            return 2
    extra = [d for d in da.dims if d not in (args.x, args.hue) and da.sizes[d] > 1]
    if extra:
        print(f"plot_sweep: fix the other axes with --select: {extra}", file=sys.stderr)
        return 2
    da = da.squeeze()
    fig, ax = plt.subplots(figsize=(6, 4))
    for value in (da[args.hue].values if args.hue else [None]):
        line = da.sel({args.hue: value}) if args.hue else da
        ax.plot(line[args.x].values, line.values / 1e3, marker="o",
                label=f"{args.hue} = {value}" if args.hue else None)
    ax.set_xlabel(args.x)
    ax.set_ylabel(f"{args.var} (us)" if args.var == "time_ns" else args.var)
    ax.set_xscale("log" if args.logx else "linear")
    ax.set_yscale("log" if args.logy else "linear")
    if args.hue:
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    output = args.output or args.result.rsplit(".", 1)[0] + ".png"
    save_figure(fig, output, option="--output", dpi=120)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
