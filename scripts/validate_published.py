"""Predict published training runs and compare: flowsim against measurements of real runs.

    python scripts/validate_published.py [--model auto|analytical|flow] [--only NAME]
                                         [--part K/N] [--csv OUT.csv] [--plot OUT.png]
    python scripts/validate_published.py --from-csv PART.csv [PART.csv ...] [--csv OUT.csv]

Every row of ``validation/published/*.csv`` is a run someone measured and published (the
citation is in the row). Each is predicted from what the publication states and nothing else:
the model and parallelism of the row, a cluster preset of the machine (``cluster:`` block:
device, nodes, NICs), the bundled NCCL-like system config, the generator's Megatron-LM
semantics. No constant is set per row. The published figure (``metric``: ``iteration_s``,
``tflops_per_gpu`` or ``tokens_per_gpu_s``) is turned into an iteration time, with the
publication's own FLOP convention (``flops`` column) for TFLOP/s, and compared with the
simulated iteration.

The network model (``--model auto``, the default) is the analytical one, except for rows with
expert parallelism, whose all-to-alls need the flow model: the analytical model prices every
message as if alone (ASTRA-sim's congestion-unaware semantics), so the ``p - 1`` messages an
all-to-all sends at once each get the whole NIC, ``p - 1`` times what one NIC carries.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

import _published_record as record
from numpy.typing import ArrayLike

from flowsim._atomic import refuse_missing_folder, write_text_atomic

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "validation" / "published"
#: the cluster preset (topologies/clusters/) of each machine the rows name
CLUSTERS = {"dgx_a100": "dgx_a100_superpod", "dgx_h100": "dgx_h100",
            "meta_h100_roce": "roce_clos_h100", "gb200_nvl72": "gb200_nvl72",
            "dgx_b200": "dgx_b200", "dgx_h200": "dgx_h200", "gb300_nvl72": "gb300_nvl72",
            "dgx_b300": "dgx_b300"}
_BOOL = {"true": True, "false": False}
#: the recorded predictions (``--csv`` of a full run), beside the publications' rows
RECORD = record.RECORD


def rows(only: str | None = None) -> list[dict[str, str]]:
    """Every published row (``only``: those whose run name contains it)."""
    out = []
    for path in sorted(DATA.glob("*.csv")):
        if path.name == RECORD.name:   # flowsim's predictions, not a publication
            continue
        for row in csv.DictReader(path.open()):
            row["file"] = path.name
            if only is None or only in row["run"]:
                out.append(row)
    return out


def network(row: dict[str, str]) -> dict:
    """The row's cluster as a network mapping: its preset's ``cluster:`` block at the row's
    size, with the row's overrides (a cluster that differs from the preset's machine)."""
    import yaml

    gpus = int(row["gpus"])
    preset = ROOT / "topologies" / "clusters" / f"{CLUSTERS[row['cluster']]}.yml"
    cluster = yaml.safe_load(preset.read_text())["cluster"]
    cluster.update(device=row["device"], nodes=max(1, gpus // 8), gpus_per_node=min(8, gpus))
    for item in filter(None, (row.get("cluster_overrides") or "").split(";")):
        key, value = item.split("=")
        cluster[key] = float(value) if "." in value else int(value)
    return {"cluster": cluster}


def spec(row: dict[str, str]) -> dict:
    """The row's workload as a transformer generator spec."""
    ints = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "sequence",
            "global_batch", "micro_batch", "tp", "pp", "dp", "cp", "ep", "experts", "top_k",
            "vpp")
    out = {"generator": "transformer"}
    for key in ints:
        value = int(row[key] or 0)
        if value or key in ("experts",):
            out[key] = value
    if out.get("experts", 0) == 0:
        out.pop("experts", None)
        out.pop("top_k", None)
    if out.get("vpp", 1) <= 1:
        out.pop("vpp", None)
    layers, vpp, pp = out["layers"], out.get("vpp", 1), out["pp"]
    if layers % (pp * vpp) and (layers + 2) % (pp * vpp) == 0:
        out["pipeline_layout"] = "first_last_fewer"
    elif layers % (pp * vpp):
        base, extra = divmod(layers, pp * vpp)   # the first stages take one layer more
        out["pipeline_layout"] = [base + (i < extra) for i in range(pp * vpp)]
    if row.get("pipeline_layout"):   # a row's own layers per virtual stage (a list expression)
        from flowsim.workload.generators.transformer_values import list_expression

        out["pipeline_layout"] = list_expression(row["pipeline_layout"], "pipeline_layout",
                                                 row["run"], "layers per virtual stage")
    for key in ("sp", "distributed_optimizer", "gated_mlp", "scatter_gather"):
        out[key] = _BOOL[row[key]]
    out["recompute"] = row["recompute"]
    out["attention"] = row["attention"]
    if row.get("expert_layout"):   # a row's own column; else expert parallelism inside DP
        out["expert_layout"] = row["expert_layout"]
    if row.get("position_embedding"):   # a row's own column; else Megatron's default
        out["position_embedding"] = row["position_embedding"]
    if row.get("cp_comm_type"):   # a row's own column; else Megatron-Core's default (p2p)
        out["cp_comm_type"] = row["cp_comm_type"]
    out["dtype"] = row["dtype"]
    if row.get("fp8_recipe"):   # a row's own column; else delayed scaling
        out["fp8_recipe"] = row["fp8_recipe"]
    overlap = set(filter(None, row["overlap"].split(",")))
    out["overlap_grad_reduce"] = "grad_reduce" in overlap
    out["overlap_param_gather"] = "param_gather" in overlap and out["distributed_optimizer"]
    out["tp_comm_overlap"] = "tp_comm" in overlap and out["tp"] > 1
    if out["tp_comm_overlap"] and row.get("tp_comm_overlap_cfg"):   # whose userbuffers settings
        out["tp_comm_overlap_cfg"] = row["tp_comm_overlap_cfg"]
    for key in ("grad_reduce_in_bf16", "fp8_param_gather", "fsdp", "align_param_gather",
                "align_grad_reduce", "cross_entropy_fusion",
                "moe_a2a_overlap", "fp8_dispatch", "fused_grouped_mlp",
                "fp8_attention", "mtp_repeated",
                "activation_func_fp8_input_store", "tp_comm_overlap_disable_qkv",
                "tp_comm_overlap_rs_dgrad", "lora_a2a"):   # a row's own columns
        if row.get(key):
            out[key] = _BOOL[row[key]]
    for key in ("head_dim", "moe_ffn", "shared_ffn", "moe_latent", "expert_tp", "window",
                "recompute_layers", "cpu_offload_layers", "node_limit", "routing_groups",
                "microbatch_group",
                "bf16_layers_at_start", "bf16_layers_at_end",
                "mtp_layers", "metric_cross_entropies", "lora_rank",
                "document_tokens", "fsdp_replicas", "offload_min_elements",
                "offload_max_inflight"):   # a row's own; else the defaults
        if row.get(key):
            out[key] = int(row[key])
    for key in ("moe_layer_freq", "window_skip_freq"):   # Megatron-LM's list expressions
        if row.get(key):
            out[key] = row[key]
    if row.get("schedule"):   # a row's own column; else the generator's (1F1B, interleaved)
        out["schedule"] = row["schedule"]
    if row.get("cross_entropy_fusion_impl"):   # a row's own column; else Megatron-Core's
        out["cross_entropy_fusion_impl"] = row["cross_entropy_fusion_impl"]
    if row.get("fp8_library"):   # a row's own column; else Transformer Engine
        out["fp8_library"] = row["fp8_library"]
    if row.get("optimizer"):   # a row's own column; else Adam
        out["optimizer"] = row["optimizer"]
    if row.get("dispatcher"):   # a row's own column; else Megatron-Core's all-to-all
        out["dispatcher"] = row["dispatcher"]
    if row.get("fsdp_defer_grad_sync"):   # FSDP2 under gradient accumulation: a row's own
        out["fsdp_defer_grad_sync"] = _BOOL[row["fsdp_defer_grad_sync"]]
    for key in ("fsdp_reshard", "fsdp_outer", "fsdp_impl"):   # a row's own; else FSDP2's
        if row.get(key):
            out[key] = row[key]
    if row.get("offload_modules"):   # fine-grained offloading's modules, ";"-separated
        out["offload_modules"] = row["offload_modules"].split(";")
    if row.get("lora_targets"):   # LoRA's adapted layers, ";"-separated; else all four
        out["lora_targets"] = row["lora_targets"].split(";")
    if row.get("recompute_modules"):   # selective recomputation's modules, ";"-separated
        out["recompute_modules"] = row["recompute_modules"].split(";")
    for key in ("mla", "mamba"):   # latent attention's, Mamba-2's widths: "key=value;..."
        if row.get(key):
            out[key] = {k: int(v) for k, v in (item.split("=") for item in row[key].split(";"))}
    if row.get("quant_recipe"):   # a precision per module: "pattern=precision;...", in order
        out["quant_recipe"] = quant_recipe(row["quant_recipe"])
    if row.get("hybrid_pattern"):   # a hybrid model's layers (Megatron-Core's pattern)
        out["hybrid_pattern"] = row["hybrid_pattern"]
    if row.get("bucket_size"):   # a row's own column; else Megatron-Core's default
        out["bucket_size"] = int(row["bucket_size"])
    # GPT ties them, Llama does not; a row's own column (Nemotron-4: untied) wins
    tied = row.get("tied_embeddings")
    out["tied_embeddings"] = _BOOL[tied] if tied else not out["gated_mlp"]
    return out


def quant_recipe(cell: str) -> dict:
    """A row's ``quant_recipe`` column (``pattern=precision`` items, ``;``-separated, first
    match first) as Megatron-Core's recipe: one config per precision, one matcher per item."""
    def config(precision: str) -> dict:
        key = {"bf16": {}, "nvfp4": {"fp4_quantization_recipe": "nvfp4"}}
        return {"transformer_engine_config_type": "TEQuantizationParams",
                "training_recipe": key.get(precision,
                                           {"fp8_quantization_recipe": precision})}
    items = [item.rsplit("=", 1) for item in cell.split(";")]
    return {"configs": {p: config(p) for _, p in items},
            "matchers": {f"m{i}": {"type": "glob", "pattern": pattern, "config": p,
                                   "enabled": True} for i, (pattern, p) in enumerate(items)}}


def parsed_spec(row: dict[str, str]):
    """The row's workload as a validated :class:`TransformerSpec` (errors name the file)."""
    from flowsim.workload.generators.transformer_parse import parse_transformer

    values = {k: v for k, v in spec(row).items() if k != "generator"}
    return parse_transformer(values, f"{row['file']}, run {row['run']}")


#: what a row's ``published`` figure may be
METRICS = ("iteration_s", "tflops_per_gpu", "tokens_per_gpu_s")


def published_seconds(row: dict[str, str]) -> float:
    """The published figure as an iteration time (s), with the publication's convention.

    Raises
    ------
    ConfigError
        The row's ``metric`` or ``flops`` is not one this script knows.
    """
    from flowsim.errors import config_error
    from flowsim.workload.flops import CONVENTIONS

    where = f"{row['file']}, run {row['run']}"
    if row["metric"] not in METRICS:
        raise config_error(where, "metric", "one of " + ", ".join(METRICS), row["metric"])
    if row["metric"] == "iteration_s":
        return float(row["published"])
    if row["metric"] == "tokens_per_gpu_s":   # the global batch's tokens, spread over GPUs
        tokens = int(row["global_batch"]) * int(row["sequence"])
        return tokens / (float(row["published"]) * int(row["gpus"]))
    from flowsim.workload.generators.transformer import model_shape

    if row["flops"] not in CONVENTIONS:
        raise config_error(where, "flops", "one of " + ", ".join(CONVENTIONS), row["flops"])

    # the model the simulation runs, counted the publication's way
    flops = CONVENTIONS[row["flops"]](model_shape(parsed_spec(row)))
    return flops / (float(row["published"]) * 1e12 * int(row["gpus"]))


def model_for(row: dict[str, str], model: str = "auto") -> str:
    """The network model a row is predicted with: ``model``, or for ``auto`` the flow model
    where the row has all-to-alls over more than two ranks (expert parallelism; context
    parallelism's ring or Ulysses exchanges, which are all-to-alls) and the analytical one
    elsewhere: the analytical model prices each message of an all-to-all as if alone."""
    if model != "auto":
        return model
    ring = int(row["cp"] or 1) > 2 and (row.get("cp_comm_type") or "p2p") != "all_gather"
    return "flow" if int(row["ep"] or 1) > 1 or ring else "analytical"


def predict(row: dict[str, str], model: str, sustained: float | None = None,
            speed: ArrayLike | None = None) -> float:
    """Simulated iteration time (s); ``sustained`` overrides the compute model's calibrated
    constant (to re-derive it: see :data:`flowsim.compute.devices.SUSTAINED`), ``speed``
    gives per-GPU compute speeds (a what-if: see ``published_scaling.py --spread``)."""
    return predict_run(row, model, sustained, speed)[0]


def predict_run(row: dict[str, str], model: str, sustained: float | None = None,
                speed: ArrayLike | None = None) -> tuple[float, float, float]:
    """:func:`predict`'s iteration time (s), with the memory estimate's peak per GPU and the
    GPU's memory (GiB: HBM's GB read as GiB, as ``flowsim run`` reads them)."""
    import warnings

    import flowsim
    from flowsim.compute import DeviceModel

    device = DeviceModel(row["device"], sustained=sustained) if sustained else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flowsim.FlowsimWarning)
        ds = flowsim.simulate(network(row), spec(row), "nccl", model=model, device=device,
                              speed=speed)
    return (float(ds.time_ns) / 1e9, float(ds.attrs["memory_gib"]),
            float(ds.attrs["memory_capacity_gib"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("auto", "analytical", "flow"), default="auto",
                        help="network model (auto: flow for rows with expert parallelism, "
                             "analytical for the others)")
    parser.add_argument("--only", help="runs whose name contains this")
    parser.add_argument("--part", type=_part, default=(1, 1), metavar="K/N",
                        help="only the K-th of N interleaved parts of the rows (for N "
                             "processes or array jobs; join their CSVs with --from-csv)")
    parser.add_argument("--csv", help="write the comparison as CSV here")
    parser.add_argument("--plot", help="draw predicted against published times here (PNG)")
    parser.add_argument("--markdown", help="write the comparison as a Markdown table here")
    parser.add_argument("--from-csv", dest="from_csv", nargs="+", metavar="CSV",
                        help="take the predictions from CSVs this script wrote (--csv; "
                             "the parts of a --part run, say) instead of simulating: redraw "
                             "the plot and the table, or join the parts")
    parser.add_argument("--sustained", type=float, default=None,
                        help="override the compute model's calibrated sustained fraction "
                             "(to re-derive it on its calibration rows)")
    args = parser.parse_args(argv)
    for option in ("csv", "plot", "markdown"):   # refuse a missing folder before the runs
        refuse_missing_folder(parser, getattr(args, option), f"--{option}")
    results = []
    memory: dict[str, tuple[float, float]] = {}   # run: (estimate, the GPU's), GiB
    try:
        done = record.read_predictions(args.from_csv) if args.from_csv else {}
    except ValueError as error:
        parser.error(f"argument --from-csv: {error}")
    unpredicted = 0   # rows a --from-csv join has no prediction for
    print(f"{'run':36} {'GPUs':>6} {'published s':>12} {'predicted s':>12} {'error':>8} "
          f"{'wall s':>7}")
    part, parts = args.part
    for index, row in enumerate(rows(args.only)):
        if index % parts != part - 1:
            continue
        if args.from_csv and row["run"] not in done:
            unpredicted += 1
            continue
        start = time.perf_counter()
        if args.from_csv:
            predicted, peak, capacity = done[row["run"]]
        else:
            predicted, peak, capacity = predict_run(row, model_for(row, args.model),
                                                    args.sustained)
            predicted = float(f"{predicted:.6g}")
        if peak is not None and capacity is not None:
            memory[row["run"]] = (round(peak, 2), capacity)
        wall = time.perf_counter() - start
        published = published_seconds(row)
        error = (predicted - published) / published
        results.append((row, published, predicted, error))
        print(f"{row['run']:36} {row['gpus']:>6} {published:12.3f} {predicted:12.3f} "
              f"{100 * error:+7.1f}% {wall:7.1f}", flush=True)
    errors = [abs(e) for *_, e in results]
    if errors:
        print(f"{len(errors)} runs: median |error| {100 * statistics.median(errors):.1f}%, "
              f"max {100 * max(errors):.1f}%, within 10%: "
              f"{sum(e <= 0.10 for e in errors)}/{len(errors)}")
        if len(memory) == len(results):
            print(record.memory_summary(memory))
    if unpredicted:
        print(f"{unpredicted} rows have no prediction in the CSVs (a part missing?)")
    if args.csv:
        record.write_csv(args.csv, results, memory,
                         {row["run"]: model_for(row, args.model) for row, *_ in results})
    if args.plot:
        record.plot(results, args.plot)
    if args.markdown:
        write_text_atomic(args.markdown, record.markdown(results, memory), option="--markdown")
    return 0


def _part(text: str) -> tuple[int, int]:
    """``--part K/N``: the K-th (from 1) of N parts."""
    try:
        part, parts = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected K/N (two whole numbers), found {text!r}") from None
    if not 1 <= part <= parts:
        raise argparse.ArgumentTypeError(f"expected 1 <= K <= N, found {text!r}")
    return part, parts


if __name__ == "__main__":
    sys.exit(main())
