"""The published-run validation: its records are complete and cited, every row builds, the
recorded predictions (validation/published/results.csv) are what flowsim predicts today, and
the documentation's table is generated from them."""

from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import _published_record as record_io  # noqa: E402
import validate_published as vp  # noqa: E402

import flowsim  # noqa: E402
from flowsim.compute import device  # noqa: E402

RECORD = vp.RECORD
ROWS = vp.rows()


def _record() -> dict[str, dict[str, str]]:
    with RECORD.open(newline="") as handle:
        return {r["run"]: r for r in csv.DictReader(handle)}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["run"])
def test_every_row_is_cited_and_consistent(row):
    assert len(row["citation"]) > 20 and row["notes"]
    layout = [int(row[k] or 1) for k in ("tp", "pp", "dp", "cp")]
    assert layout[0] * layout[1] * layout[2] * layout[3] == int(row["gpus"])
    device(row["device"])                       # a preset
    assert row["cluster"] in vp.CLUSTERS
    assert row["metric"] in vp.METRICS
    net = flowsim.load_network(vp.network(row))
    assert net.npus == int(row["gpus"])
    vp.parsed_spec(row)                         # the workload is a valid spec


def test_every_column_that_names_a_spec_key_reaches_the_spec():
    """A row's column with a transformer key's name is the spec's value (a column the script
    forgot to read would silently take the default); ``device`` goes to the cluster, whose
    device the generator takes."""
    from flowsim.workload.generators import transformer_values as tv
    from flowsim.workload.generators.transformer_spec import KEYS

    for row in ROWS:
        spec = vp.parsed_spec(row)
        for key in sorted(set(row) & set(KEYS) - {"device"}):
            if row[key] in ("", None):
                continue
            value = getattr(spec, key)
            if key == "mla":   # "name=width;..." -> multi-head latent attention's widths
                widths = dict(item.split("=") for item in row[key].split(";"))
                assert {k: str(v) for k, v in dataclasses.asdict(value).items()} == widths
                continue
            if key == "hybrid_pattern":   # the decoder's layers; the depths' after each '/'
                main, *depths = row[key].split("/")
                assert (value, spec.hybrid_mtp, spec.mtp_layers) == (
                    main, depths[0] if depths else "", len(depths) or spec.mtp_layers)
                continue
            if key == "mamba":   # "name=width;..." -> the Mamba-2 mixers' (the rest defaults)
                widths = dict(item.split("=") for item in row[key].split(";"))
                mixer = {k: str(v) for k, v in dataclasses.asdict(value).items()}
                assert {k: mixer[k] for k in widths} == widths, row["run"]
                continue
            if key == "window_skip_freq":   # every N-th layer full: the spec's per-layer 1/0
                assert value == tv.window_pattern(int(row[key]), spec.layers, spec.window,
                                                  row["run"]), row["run"]
                if row[key] == "2":   # counted from 1: the first layer windowed
                    assert value[:2] == (1, 0)
                continue
            if key == "quant_recipe":   # "pattern=precision;..." -> the recipe's rules
                assert [f"{r.pattern}={r.precision}" for r in value] == \
                    row[key].split(";"), row["run"]
                continue
            if key in ("lora_targets", "recompute_modules", "offload_modules"):   # ";"-separated
                assert value == tuple(row[key].split(";")), row["run"]
                continue
            if key in ("moe_layer_freq", "pipeline_layout"):   # list expressions only,
                # "[0]*3+[1]*58" or "[2]*15+[1]"
                runs = [(part if "]*" in part else part + "*1").split("]*")
                        for part in row[key].split("+")]
                assert value == tuple(int(v.strip("[")) for v, n in runs
                                      for _ in range(int(n))), row["run"]
                continue
            expected = (vp._BOOL[row[key]] if isinstance(value, bool)
                        else type(value)(row[key]) if isinstance(value, (int, float))
                        else row[key])
            assert value == expected, f"{row['file']}, run {row['run']}: column {key}"
        assert vp.network(row)["cluster"]["device"] == row["device"]


def test_the_record_covers_every_row_with_its_error():
    record = _record()
    assert set(record) == {row["run"] for row in ROWS}
    for row in ROWS:
        r = record[row["run"]]
        published, predicted = float(r["published_s"]), float(r["predicted_s"])
        assert published == pytest.approx(vp.published_seconds(row), rel=1e-5)
        assert float(r["error"]) == pytest.approx((predicted - published) / published,
                                                  abs=1e-4)


@pytest.mark.parametrize("key, value", [("metric", "mfu"), ("flops", "6nd")])
def test_an_unknown_metric_or_flop_convention_names_the_row_and_key(key, value):
    counted = next(r for r in ROWS if r["metric"] == "tflops_per_gpu")   # reads its flops
    row = dict(counted, **{key: value})
    with pytest.raises(flowsim.ConfigError, match=rf"{row['file']}, run {row['run']}: key "
                                                  rf"'{key}': expected one of .*found '{value}'"):
        vp.published_seconds(row)


FAST = [row for row in ROWS if int(row["gpus"]) <= 96]


@pytest.mark.parametrize("row", FAST, ids=lambda r: r["run"])
def test_the_recorded_prediction_is_today_s(row):
    """The small runs, predicted again, give the recorded times (the record is not stale)."""
    record = _record()[row["run"]]
    assert record["model"] == vp.model_for(row)
    seconds, memory, gpu_memory = vp.predict_run(row, record["model"])
    assert seconds == pytest.approx(float(record["predicted_s"]), rel=1e-5)
    assert (memory, gpu_memory) == pytest.approx(
        (float(record["memory_gib"]), float(record["gpu_memory_gib"])), abs=0.006)


def test_the_documentation_table_is_generated_from_the_record():
    record = _record()
    results = []
    for row in ROWS:
        published = vp.published_seconds(row)
        predicted = float(record[row["run"]]["predicted_s"])
        results.append((row, published, predicted, (predicted - published) / published))
    memory = {run: (float(r["memory_gib"]), float(r["gpu_memory_gib"]))
              for run, r in record.items()}
    page = (ROOT / "validation" / "published" / "results.md").read_text()
    assert page == record_io.markdown(results, memory)
    assert "Memory estimate within the GPU's memory" in page


def test_outputs_in_a_missing_folder_are_refused_before_any_run(tmp_path, capsys):
    """``--csv``, ``--plot`` and ``--markdown`` name their option and the folder in one line
    before a row is predicted (a full run takes minutes); redrawn from the record, the CSV
    and the table are written whole, the CSV with every recorded row."""
    for option in ("--csv", "--plot", "--markdown"):
        with pytest.raises(SystemExit) as exit_:
            vp.main([option, str(tmp_path / "missing" / "out"), "--only", "korthikanti22_"])
        assert exit_.value.code == 2
        err = capsys.readouterr()
        assert f"argument {option}: folder" in err.err and "korthikanti22" not in err.out
    out = tmp_path / "again.csv"
    vp.main(["--from-csv", str(RECORD), "--csv", str(out),
             "--markdown", str(tmp_path / "again.md")])
    assert out.read_text().splitlines()[1:] == RECORD.read_text().splitlines()[1:]
    assert (tmp_path / "again.md").read_text() == \
        (ROOT / "validation" / "published" / "results.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.csv", "again.md"]


def test_parts_of_the_rows_join_into_the_whole_record(tmp_path, capsys):
    """``--part K/N`` takes every N-th row from the K-th, so N parts cover the rows once;
    ``--from-csv`` joins their CSVs back into the record, memory estimates included."""
    parts = [tmp_path / f"part{k}.csv" for k in (1, 2, 3)]
    for k, part in enumerate(parts, start=1):
        vp.main(["--from-csv", str(RECORD), "--part", f"{k}/3", "--csv", str(part)])
    runs = [[r["run"] for r in csv.DictReader(part.open())] for part in parts]
    assert sorted(sum(runs, [])) == sorted(_record()) and all(runs)
    whole = tmp_path / "whole.csv"
    vp.main(["--from-csv", *map(str, parts), "--csv", str(whole)])
    assert whole.read_text() == RECORD.read_text()
    vp.main(["--from-csv", str(parts[0]), str(parts[2])])   # a part left out: said
    assert f"{len(runs[1])} rows have no prediction in the CSVs" in capsys.readouterr().out
    with pytest.raises(SystemExit):   # a run twice: refused, naming it
        vp.main(["--from-csv", str(parts[0]), str(RECORD)])
    assert f"run {runs[0][0]} is also in an earlier CSV" in capsys.readouterr().err
    (tmp_path / "bad.csv").write_text("run,predicted_s\nx,fast\n")
    for path, said in ((tmp_path / "none.csv", "none.csv: no such file"),
                       (tmp_path / "bad.csv", "bad.csv:2: expected a row of run, predicted_s"),
                       (ROOT / "README.md", "README.md:2: expected a row")):
        with pytest.raises(SystemExit):   # one line naming the file (and row), no traceback
            vp.main(["--from-csv", str(path)])
        assert f"argument --from-csv: {path.parent}/{said}" in capsys.readouterr().err
    for bad in ("0/2", "3/2", "1-2", "a/b"):
        with pytest.raises(SystemExit):
            vp.main(["--from-csv", str(RECORD), "--part", bad])
        assert "argument --part: expected" in capsys.readouterr().err


def test_the_memory_count_the_guide_quotes_is_the_record_s():
    """docs/guide/workloads.md's count of runs whose memory estimate fits their GPUs."""
    import re

    page = (ROOT / "docs" / "guide" / "workloads.md").read_text()
    fits, above = map(int, re.search(r"the estimate is within the GPU's memory for (\d+) "
                                     r"and above it\s+for (\d+)\.", page).groups())
    estimates = [(float(r["memory_gib"]), float(r["gpu_memory_gib"]))
                 for r in _record().values()]
    assert fits == sum(m <= gpu for m, gpu in estimates)
    assert above == len(estimates) - fits


@pytest.mark.parametrize("device, constant, run", [
    ("gb200", "GB200_SUSTAINED", "dgxc_gb200_nemotron4_340b_bf16_128gpu_strong"),
    ("h100", "H100_SUSTAINED", "dgxc2505_nemotron4_340b_bf16_256gpu")])
def test_a_device_s_own_constant_reproduces_its_one_source_row(device, constant, run):
    """GB200's and H100's sustained fractions each come from one run, of the same recipe
    release and model (their docstrings name it): predicted again, that row stays within
    1%, and the device uses its constant (not the shared one)."""
    from flowsim.compute import DeviceModel, devices

    assert DeviceModel(device).sustained == getattr(devices, constant) != devices.SUSTAINED
    (row,) = [r for r in ROWS if r["run"] == run]
    published = vp.published_seconds(row)
    assert vp.predict(row, vp.model_for(row)) == pytest.approx(published, rel=0.01)


def test_gb300_s_constant_gives_its_source_pair_s_published_speed_up_over_gb200():
    """GB300's sustained fraction is read from the one pair of runs of one model published
    for GB300 and GB200 in one release (Megatron-Bridge 26.04, Llama 3.1 405B in FP8): with
    it, flowsim's GB300-over-GB200 speed-up is the published one within 1% (the GB200 row at
    GB200's own constant)."""
    from flowsim.compute import DeviceModel, devices

    assert DeviceModel("gb300").sustained == devices.GB300_SUSTAINED != devices.GB200_SUSTAINED
    record = _record()
    (ultra, _), (blackwell, _) = [
        (float(record[r["run"]]["predicted_s"]), vp.published_seconds(r)) for r in ROWS
        if r["run"] in ("mbridge2604_gb300_llama31_405b_fp8_256gpu",
                        "mbridge2604_gb200_llama31_405b_fp8_256gpu")]
    published = {r["run"]: vp.published_seconds(r) for r in ROWS}
    speedup = (published["mbridge2604_gb200_llama31_405b_fp8_256gpu"]
               / published["mbridge2604_gb300_llama31_405b_fp8_256gpu"])
    assert 1.2 < speedup < 1.25
    assert blackwell / ultra == pytest.approx(speedup, rel=0.01)


def test_b300_s_constant_gives_its_source_pair_the_b200_row_s_error():
    """B300's sustained fraction is read from the one pair of runs of one model published for
    B300 and B200 in one layout and release (Megatron-Bridge 26.04, DeepSeek-V3 in MXFP8): with
    it, the B300 row's error is the B200 row's within half a point, at B200's constant."""
    from flowsim.compute import DeviceModel, devices

    assert DeviceModel("b300").sustained == devices.B300_SUSTAINED != devices.GB300_SUSTAINED
    assert DeviceModel("b200").sustained == devices.B200_SUSTAINED
    errors = []
    for d in ("b300", "b200"):
        (row,) = [r for r in ROWS if r["run"] == f"mbridge2604_{d}_deepseek_v3_mxfp8_256gpu"]
        published = vp.published_seconds(row)
        errors.append(vp.predict(row, vp.model_for(row)) / published - 1)
    assert errors[0] == pytest.approx(errors[1], abs=0.005)


def test_b200_s_constant_gives_its_source_pair_the_gb200_row_s_error():
    """B200's sustained fraction is read from NVIDIA's pair of one MLPerf benchmark,
    configuration and software on B200 and GB200 (v5.0, Llama 2 70B LoRA on 8 GPUs): with
    it, the B200 row's error is the GB200 row's within a point, at GB200's constant; at
    GB200's constant the B200 row would be 10 points slower."""
    from flowsim.compute import DeviceModel, devices

    assert DeviceModel("b200").sustained == devices.B200_SUSTAINED != devices.GB200_SUSTAINED
    errors = []
    for run in ("mlperf50_b200_llama2_70b_lora_8gpu_nyx",
                "mlperf50_gb200_llama2_70b_lora_8gpu_tyche"):
        (row,) = [r for r in ROWS if r["run"] == run]
        errors.append(vp.predict(row, vp.model_for(row)) / vp.published_seconds(row) - 1)
    assert errors[0] == pytest.approx(errors[1], abs=0.01)
    (row,) = [r for r in ROWS if r["run"] == "mlperf50_b200_llama2_70b_lora_8gpu_nyx"]
    borrowed = vp.predict(row, vp.model_for(row), devices.GB200_SUSTAINED)
    assert borrowed / vp.published_seconds(row) - 1 > errors[1] + 0.08


def test_nemo_s_tflops_count_attention_as_megatron_does():
    """The long-sequence rows read NeMo's TFLOP/s with Megatron's FLOP count (whole score
    matrix): NeMo 24.07's pre-training table gives Llama 2 7B both ways, 16,847 tokens/s and
    776 TFLOP/s per GPU, and Megatron's count per token is their ratio; with the causal mask
    halving attention it would be 7% less."""
    from flowsim.workload.flops import ModelShape, megatron

    shape = dict(layers=32, hidden=4096, ffn=11008, heads=32, kv_heads=32, head_dim=128,
                 vocab=32000, sequence=4096, global_batch=1, gated_mlp=True,
                 tied_embeddings=False)
    per_token = megatron(ModelShape(**shape)) / 4096
    assert per_token == pytest.approx(776e12 / 16847, rel=2e-3)
    long = next(r for r in ROWS if r["file"] == "nemo_long_sequence.csv")
    assert long["flops"] == "megatron"


def test_megatron_bridge_s_tflops_are_megatron_s_causal_count():
    """Megatron-Bridge's tables give tokens/s and model TFLOP/s per GPU; their ratio is
    Megatron-LM's count from core_r0.12, the causal mask halving the scores
    (``megatron_causal``), within 0.6% on every row without sliding windows or adapters
    (which Megatron-Bridge counts its own way), and ``megatron`` (the whole matrix) is 3-21%
    more. (Hybrid models count as ``hybrid_flops`` does, halved in both: test_hybrid.py.)
    The DeepSeek-V3 GB200 row of Megatron-LM's guide (TFLOP/s alone) is counted so."""
    import re

    from flowsim.workload.flops import CONVENTIONS
    from flowsim.workload.generators.transformer import model_shape

    checked = 0
    for row in ROWS:
        quoted = re.search(r"model TFLOP/s per GPU ([\d,]+)", row["notes"])
        if not row["file"].startswith("megatron_bridge") or not quoted or row.get("window") \
                or row.get("lora_rank") or row.get("hybrid_pattern"):
            continue
        tokens = int(row["global_batch"]) * int(row["sequence"])
        per_token = float(quoted.group(1).replace(",", "")) * 1e12 / float(row["published"])
        shape = model_shape(vp.parsed_spec(row))
        assert CONVENTIONS["megatron_causal"](shape) / tokens == \
            pytest.approx(per_token, rel=0.006), row["run"]
        assert CONVENTIONS["megatron"](shape) / tokens > 1.03 * per_token, row["run"]
        checked += 1
    assert checked >= 40
    guide = next(r for r in ROWS if r["run"] == "megatron_gb200_deepseek_v3_mxfp8_256gpu")
    assert (guide["metric"], guide["flops"]) == ("tflops_per_gpu", "megatron_causal")


def test_the_weak_scaling_table_is_the_record_s():
    """docs/accuracy/published.md's table of the same recipe at two sizes: every growth it
    quotes (published and predicted) is the record's."""
    import re

    page = (ROOT / "docs" / "accuracy" / "published.md").read_text()
    section = page[page.index("**The same recipe on more GPUs**"):]
    names = {"GPT-3 175B": "gpt3_175b", "Nemotron-4 340B": "nemotron4_340b",
             "Llama 3.1 405B": "llama31_405b", "Llama 3.1 70B": "llama31_70b",
             "Grok-1 314B": "grok1_314b", "Nemotron-4 15B": "nemotron4_15b",
             "Llama 3.1 8B": "llama31_8b"}
    rows = re.findall(r"^  \| ([^|]+?) \| ([\d,]+) → ([\d,]+) \|(.*)\|$", section, re.M)
    assert {r[0] for r in rows} == set(names)
    record = _record()
    for name, small, large, cells in rows:
        quoted = [float(c.strip().rstrip("%").replace("−", "-")) for c in cells.split("|")]
        got = []
        for dtype in ("bf16", "fp8"):
            a, b = (record[f"dgxc_{names[name]}_{dtype}_{n.replace(',', '')}gpu"]
                    for n in (small, large))
            for column in ("published_s", "predicted_s"):
                got.append(100 * (float(b[column]) / float(a[column]) - 1))
        assert quoted == pytest.approx(got, abs=0.051), name


def test_the_bundled_deepseek_v3_workload_is_its_published_row():
    """``workloads/deepseek_v3.yml`` (the Hugging Face config plus the run's keys) parses to
    the spec the validation row predicts."""
    import yaml

    from flowsim.workload.generators.huggingface import huggingface_keys
    from flowsim.workload.generators.transformer_parse import parse_transformer

    path = ROOT / "workloads" / "deepseek_v3.yml"
    values = yaml.safe_load(path.read_text())
    values.pop("generator")
    keys = {**huggingface_keys(values.pop("config"), str(path)), **values}
    bundled = parse_transformer(keys, str(path))
    row = vp.parsed_spec(next(r for r in ROWS if r["run"] == "deepseek_v3_2048gpu"))
    differ = {f.name for f in dataclasses.fields(bundled)
              if f.compare and getattr(bundled, f.name) != getattr(row, f.name)}
    # the row's cluster names the device
    assert differ <= {"device"}, differ
    from flowsim.workload.generators.transformer_schedule import layer_counts
    assert layer_counts(bundled) == layer_counts(row)


def test_the_nemotron4_reports_times_give_their_own_mfu():
    """The Nemotron-4 reports' Table 2 gives each stage's iteration time and MFU (of 989
    TFLOP/s, BF16 dense): each transcribed time, counted with Megatron's FLOPs of the row's
    model, gives the MFU its note quotes within half a unit of the time's last digit (a
    mistyped time or batch would not)."""
    import re

    from flowsim.workload.flops import CONVENTIONS
    from flowsim.workload.generators.transformer import model_shape

    rows = [r for r in ROWS if r["file"] == "nemotron4_reports.csv"]
    assert len(rows) == 6
    for row in rows:
        quoted = float(re.search(r"the table's MFU, ([\d.]+)%", row["notes"]).group(1))
        seconds = float(row["published"])
        flops = CONVENTIONS["megatron"](model_shape(vp.parsed_spec(row)))
        mfu = 100 * flops / (seconds * int(row["gpus"]) * 989e12)
        decimals = len(row["published"].partition(".")[2])
        rounding = 0.5 * 10.0 ** -decimals / seconds + 0.05 / quoted   # the time's, the MFU's
        assert mfu == pytest.approx(quoted, rel=rounding), row["run"]


def test_the_sequence_length_table_is_the_record_s():
    """docs/accuracy/published.md's LLM Foundry table by sequence length: each bucket's row
    count, median error and rows within 10% are the record's."""
    import re
    import statistics

    page = (ROOT / "docs" / "accuracy" / "published.md").read_text()
    section = page[page.index("## Long sequences"):]
    quoted = re.findall(r"^\| ([\d,]+)(?: and ([\d,]+))? \| (\d+) \| ([−+]\d+\.\d)% \| (\d+) \|$",
                        section[:section.index("Only attention grows")], re.M)
    assert len(quoted) == 6
    record = _record()
    lengths = {row["run"]: int(row["sequence"]) for row in vp.rows("mosaic_")}
    for first, second, count, median, within in quoted:
        wanted = {int(first.replace(",", "")), int((second or first).replace(",", ""))}
        errors = [float(rec["error"]) for run, rec in record.items()
                  if lengths.get(run) in wanted]
        assert len(errors) == int(count), first
        assert float(median.replace("−", "-")) == round(100 * statistics.median(errors), 1)
        assert sum(abs(e) <= 0.1 for e in errors) == int(within), first


def test_the_weak_scaling_pairs_are_the_record_s():
    """validation/published/scaling.md (included by the accuracy page) is what
    scripts/published_scaling.py makes of today's record; its pairs really differ only in
    size and have the same sequences per data-parallel replica."""
    import published_scaling

    found = published_scaling.pairs()
    assert len(found) >= 30
    for small, large, _, _ in found:
        assert int(small["gpus"]) < int(large["gpus"])
        assert int(small["global_batch"]) // int(small["dp"]) == \
            int(large["global_batch"]) // int(large["dp"])
        for key in ("file", "device", "layers", "hidden", "tp", "pp", "cp", "micro_batch",
                    "sequence", "dtype", "recompute"):
            assert small[key] == large[key], (large["run"], key)
        if small["file"] == "mlperf_training.csv":   # one round and submitter, not two
            assert small["run"][:8] == large["run"][:8], large["run"]
            owners = [c.split("/results/")[0].rsplit(maxsplit=1)[-1].lstrip("(,;")
                      for c in (small["citation"], large["citation"])]
            assert owners[0] == owners[1], (large["run"], owners)
    page = (ROOT / "validation" / "published" / "scaling.md").read_text()
    assert page == published_scaling.markdown(found)
    assert '--8<-- "validation/published/scaling.md"' in \
        (ROOT / "docs" / "accuracy" / "published.md").read_text()


def test_a_speed_spread_is_a_seeded_normal_spread_that_slows_a_run():
    """published_scaling's what-if: speeds with the asked standard deviation, the slowest
    where the expected slowest of n normals is, the same for the same seed; and a run given
    them is slower than without (its slowest GPU sets the pace)."""
    import published_scaling
    from scipy.stats import norm

    speeds = published_scaling.spread_speeds(2048, 0.01)
    assert speeds.mean() == pytest.approx(1.0, abs=1e-12)
    assert speeds.std() == pytest.approx(0.01, rel=0.02)
    assert speeds.min() == pytest.approx(1 + 0.01 * norm.ppf(0.5 / 2048))
    assert (speeds == published_scaling.spread_speeds(2048, 0.01)).all()
    assert not (speeds == published_scaling.spread_speeds(2048, 0.01, seed=1)).all()
    (row,) = [r for r in ROWS if r["run"] == "dgxc_llama31_8b_bf16_8gpu"]
    plain = float(flowsim.simulate(vp.network(row), vp.spec(row), "nccl").time_ns)
    spread = float(flowsim.simulate(vp.network(row), vp.spec(row), "nccl",
                                    speed=published_scaling.spread_speeds(8, 0.01)).time_ns)
    assert plain < spread < plain / (1 + 0.01 * norm.ppf(0.5 / 8)) * 1.001


@pytest.mark.parametrize("value", ["-0.01", "0.5", "nan"])
def test_the_spread_what_if_refuses_a_spread_it_cannot_run(value, capsys):
    """``published_scaling.py --spread`` takes a standard deviation from 0 to its maximum
    (every speed then positive) and names the option and value otherwise."""
    import published_scaling

    with pytest.raises(SystemExit) as exit_:
        published_scaling.main(["--spread", value])
    assert exit_.value.code == 2
    assert f"argument --spread: expected a standard deviation from 0 to " \
           f"{published_scaling.MAX_SPREAD}" in capsys.readouterr().err


def test_the_fp8_speed_ups_the_accuracy_page_quotes_are_the_record_s():
    """The GB200 section's FP8-over-BF16 speed-ups (each recipe pair's BF16 time over its FP8
    time): 1.44-1.52 published and 1.60-1.69 recorded on GB200, 8-11% more in flowsim; on
    H100, at each model's smallest size, a median of -0.2% (-2.2% to +6.4%), at 2,048 GPUs
    and more -1.7% to +8.2%."""
    import statistics

    record = _record()

    def pairs(files):
        out = {}
        for run, rec in record.items():
            if rec["file"] in files and "_bf16_" in run:
                fp8 = record.get(run.replace("_bf16_", "_fp8_"))
                if fp8:
                    out[run] = [float(rec[c]) / float(fp8[c])
                                for c in ("published_s", "predicted_s")]
        return out

    gb200 = pairs({"dgxc_gb200_2505.csv"})
    assert len(gb200) == 6
    assert [round(min(p[i] for p in gb200.values()), 2) for i in (0, 1)] == [1.44, 1.60]
    assert [round(max(p[i] for p in gb200.values()), 2) for i in (0, 1)] == [1.52, 1.69]
    excess = [100 * (q / p - 1) for p, q in gb200.values()]
    assert 8.0 <= min(excess) and max(excess) < 11.5
    h100 = pairs({"dgxc_2411.csv", "dgxc_h100_2505.csv"})
    smallest, large = {}, []
    for run, ratio in h100.items():
        model, gpus = run.rsplit("_", 1)[0], int(record[run]["gpus"])
        error = 100 * (ratio[1] / ratio[0] - 1)
        if model not in smallest or gpus < smallest[model][0]:
            smallest[model] = (gpus, error)
        if gpus >= 2048:
            large.append(error)
    errors = [e for _, e in smallest.values()]
    assert len(errors) == 10
    assert round(statistics.median(errors), 1) == -0.2
    assert (round(min(errors), 1), round(max(errors), 1)) == (-2.2, 6.4)
    assert (round(min(large), 1), round(max(large), 1)) == (-1.7, 8.2)
    page = (ROOT / "docs" / "accuracy" / "published.md").read_text()
    assert "1.44 to 1.52 published, 1.60 to 1.69 in flowsim, 8–11% more" in page
    assert "a median of −0.2% at each model's smallest\nsize (ten pairs, −2.2% to +6.4%)" in page
    assert "larger (−1.7% to +8.2%)" in page


def test_the_nvfp4_table_on_the_accuracy_page_is_the_record_s():
    """The accuracy page's NVFP4 table: each row's published and predicted speed-up over its
    sibling on the same layout (MXFP8 or FP8), and its error, as the record has them."""
    record = _record()
    page = (ROOT / "docs" / "accuracy" / "published.md").read_text()
    start = page.index("## NVFP4: the GEMMs in FP4")
    section = page[start: page.index("\n## ", start)]
    pairs = {"gb300_llama3_70b": "mxfp8_64gpu", "gb200_llama3_70b": "mxfp8_64gpu",
             "gb300_llama31_405b": "fp8_256gpu", "gb200_llama31_405b": "mxfp8_256gpu"}
    lines = [line for line in section.splitlines() if line.startswith("| Llama")]
    assert len(lines) == len(pairs)
    for line, (run, sibling) in zip(lines, pairs.items()):
        nvfp4 = record[f"mbridge2604_{run}_nvfp4_{sibling.split('_')[-1]}"]
        other = record[f"mbridge2604_{run}_{sibling}"]
        published, predicted = (float(other[c]) / float(nvfp4[c])
                                for c in ("published_s", "predicted_s"))
        error = f"{100 * float(nvfp4['error']):+.1f}%".replace("-", "−")
        assert line.endswith(f"| {published:.2f} | {predicted:.2f} | {error} |"), line


def test_the_mlperf_table_on_the_accuracy_page_is_the_record_s():
    """docs/accuracy/published.md's MLPerf table: one line per row of mlperf_training.csv,
    with its published and predicted seconds and error as recorded, and the summary after it
    (median error, rows within 10%) the record's."""
    import re
    import statistics

    page = (ROOT / "docs" / "accuracy" / "published.md").read_text()
    section = page[page.index("## MLPerf Training"):]
    section = section[:section.index("By benchmark:")]
    lines = re.findall(r"^\|[^|]+\| [\d,]+ \|.*\| ([\d.]+) \| ([\d.]+) \| ([−+][\d.]+)% \|$",
                       section, re.M)
    record = {run: rec for run, rec in _record().items() if rec["file"] == "mlperf_training.csv"}
    assert len(lines) == len(record) > 0
    unmatched = dict(record)
    for published, predicted, error in lines:
        match = [run for run, rec in unmatched.items()
                 if float(rec["published_s"]) == pytest.approx(float(published), abs=6e-4)
                 and float(rec["predicted_s"]) == pytest.approx(float(predicted), abs=6e-4)
                 and f"{100 * _error(rec):+.1f}" == error.replace("−", "-")]
        assert match, (published, predicted, error)   # two runs may print alike: either
        del unmatched[match[0]]
    errors = [abs(_error(rec)) for rec in record.values()]
    within = sum(e <= 0.1 for e in errors)
    assert f"Median {100 * statistics.median(errors):.1f}%, {within} of {len(errors)} within " \
           f"10%" in section


def _error(rec: dict) -> float:
    """A recorded row's error from its published and predicted seconds (as results.md
    computes it, not the rounded ``error`` column)."""
    return float(rec["predicted_s"]) / float(rec["published_s"]) - 1
