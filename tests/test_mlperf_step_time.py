"""scripts/mlperf_step_time.py: the published MLPerf step time, recomputed from MLLOG files.

The fixtures under ``tests/data/mlperf/`` are synthetic result files in the submissions' own
formats, each built so that a wrong rule gives a different number:

* ``per_step``: per-step ``train_step_time`` entries (median 2.2 s) beside mlperf_common's block
  summaries (9.0, 9.5 s) and a rank-1 copy (9.0 s); counting any of them moves the median.
* ``block_timer``: blocks of 6, 2 and 2 steps logging 1.0, 2.0, 2.5 s (median over steps 1.0 s,
  over blocks 2.0 s, wall time 1.1 s per step); ``samples_count`` is each block's own count.
* ``block_throughput``: blocks of 4 and 2 steps, global batch 8 over 6.4 and 4.0 samples/s
  (1.25 and 2.0 s), wall 1.4 s per step; ``result_1.txt`` is killed inside its first block.
* ``block_wall``: GPT-3 blocks of 3 and 1 steps counted in tokens, 1.1 and 1.5 s per step.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import _mlperf_logs as logs  # noqa: E402
import mlperf_step_time as mst  # noqa: E402

from flowsim.errors import ConfigError  # noqa: E402

DATA = Path(__file__).parent / "data" / "mlperf"
TABLE = ROOT / "validation" / "published" / "mlperf_training.csv"


def _logs(folder: str) -> dict[str, str]:
    return {str(p): p.read_text() for p in sorted((DATA / folder).glob("result_*.txt"))}


def test_per_step_rule_is_the_median_of_every_step_of_every_file():
    found = mst.run_step_time(_logs("per_step"))
    assert found == mst.StepTime(2.2, "per-step", 5, 2)


def test_block_summaries_and_other_ranks_are_not_steps():
    events = mst.read_events((DATA / "per_step" / "result_0.txt").read_text(), "result_0.txt")
    assert mst.per_step_times(events) == [2.0, 2.2, 2.1]
    # the summary is told apart by the file that logs it (mlperf_common), not by its fields
    summaries = [e for e in events if e.key == "tracked_stats" and logs._is_summary(e)]
    assert len(summaries) == 1 and "mlperf_common" in summaries[0].metadata["file"]
    v51 = mst.read_events((DATA / "per_step" / "result_1.txt").read_text(), "result_1.txt")
    assert mst.per_step_times(v51) == [2.4, 2.3]


@pytest.mark.parametrize("key", mst.STEP_TIME_KEYS)
def test_every_per_step_key_is_read(key):
    line = (':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", '
            f'"key": "tracked_stats", "value": {{"{key}": 1.5}}, "metadata": '
            '{"file": "/workspace/llm/custom_callbacks.py", "lineno": 277, "step": 4194304}}')
    assert mst.per_step_times(mst.read_events(line, "x")) == [1.5]


def test_block_timer_rule_is_step_weighted_and_counts_the_global_step():
    found = mst.run_step_time(_logs("block_timer"))
    assert found == mst.StepTime(1.0, "block timer", 10, 1)
    events = mst.read_events((DATA / "block_timer" / "result_0.txt").read_text(), "r")
    blocks = mst.training_blocks(events, "r")
    assert [b.steps for b in blocks] == [6, 2, 2]
    assert [b.timer_s for b in blocks] == [1.0, 2.0, 2.5]
    assert [b.wall_s for b in blocks] == pytest.approx([1.1, 1.1, 1.1], rel=1e-3)


def test_block_throughput_rule_and_a_file_cut_off_in_its_first_block():
    found = mst.run_step_time(_logs("block_throughput"))
    assert found == mst.StepTime(1.25, "block timer", 6, 1)


def test_block_wall_rule_counts_gpt3_tokens():
    found = mst.run_step_time(_logs("block_wall"))
    assert found.rule == "block wall" and found.steps == 4
    assert found.seconds == pytest.approx(1.1)   # over blocks it would be 1.3


def test_a_file_without_steps_or_blocks_is_an_error():
    text = (DATA / "block_throughput" / "result_1.txt").read_text()
    with pytest.raises(ConfigError, match="cut.txt: missing key 'tracked_stats'"):
        mst.run_step_time({"cut.txt": text})


def test_a_malformed_line_names_file_line_and_expectation(tmp_path):
    lines = (DATA / "block_wall" / "result_0.txt").read_text().splitlines()
    lines[2] = lines[2][:-20]   # a line cut short
    with pytest.raises(ConfigError, match=r"bad\.txt:3: key ':::MLLOG': expected a JSON object"):
        mst.run_step_time({"bad.txt": "\n".join(lines)})
    lines[2] = "[1,0]<stdout>:" + lines[3]   # a prefix other than a rank
    with pytest.raises(ConfigError, match=r"bad\.txt:3: .*rank prefix 'N: '"):
        mst.read_events("\n".join(lines), "bad.txt")


def test_a_block_of_a_fractional_step_count_is_an_error():
    text = (DATA / "block_wall" / "result_0.txt").read_text()
    text = text.replace('"value": 2048', '"value": 3000')   # sequence 3000: 2.73 steps a block
    with pytest.raises(ConfigError, match="key 'eval_start': expected a whole, positive number"):
        mst.run_step_time({"w.txt": text})


@pytest.mark.parametrize("run, release, commit, directory, numbers", [
    ("mlperf31_h100_gpt3_175b_512gpu_eos", "v3.1", "d06288b2bd67",
     "NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3", (0, 1, 2)),
    ("mlperf40_h100_llama2_70b_lora_8gpu_eos", "v4.0", "6fe954378efe",
     "NVIDIA/results/eos_ngc24.04_nemo/llama2_70b_lora", None),
    ("mlperf41_h200_llama2_70b_lora_512gpu_azure", "v4.1", "b87b9e396f77",
     "Azure/results/ND_H200_v5_n64_nemo/llama2_70b_lora", tuple(range(10))),
    ("mlperf50_h100_llama31_405b_512gpu", "v5.0", "0fdc28f01325",
     "NVIDIA/results/eos-dfw_n64_ngc25.01_nemo/llama31_405b", (0, 1, 2)),
    ("mlperf50_gb200_llama31_405b_256gpu_tyche", "v5.0", "0fdc28f01325",
     "NVIDIA/results/tyche_ngpu256_ngc25.04_nemo/llama31_405b", (0, 1, 2)),
    ("mlperf50_gb200_llama2_70b_lora_64gpu_dell_16xxe9712", "v5.0", "0fdc28f01325",
     "Dell/results/16xXE9712x4GB200/llama2_70b_lora", None),
])
def test_citations_of_real_rows(run, release, commit, directory, numbers):
    row = next(r for r in csv.DictReader(TABLE.open()) if r["run"] == run)
    cited = mst.parse_citation(row["citation"])
    assert (cited.release, cited.commit[:12], cited.directory, cited.numbers) == \
        (release, commit, directory, numbers)


def test_a_citation_without_a_commit_is_an_error():
    with pytest.raises(ConfigError, match="row x: key 'citation': expected .*, a 40-digit"):
        mst.parse_citation("mlcommons/training_results_v5.0, A/results/B/c/result_0.txt", "row x")


@pytest.mark.parametrize("published, seconds, same", [
    ("0.9256", 0.925566, True), ("10.98", 10.98, True), ("1.704", 1.70396, True),
    ("2.2270", 2.226951, True), ("0.9256", 0.92555, False), ("3.181", 3.1834, False)])
def test_agreement_is_at_the_printed_digits(published, seconds, same):
    assert mst.agrees(published, seconds) is same


def _table(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "published", "citation"])
        writer.writerows(rows)
    return path


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _citation(folder: str, files: str) -> str:
    return (f"mlcommons/training_results_v9.9 (git {COMMIT}), Org/results/{folder}/bench/"
            f"{files} (MLLOG tracked_stats)")


def test_check_against_a_results_checkout(tmp_path, capsys):
    for folder in ("per_step", "block_timer"):
        shutil.copytree(DATA / folder, tmp_path / "training_results_v9.9/Org/results" /
                        folder / "bench")
    good = _table(tmp_path / "good.csv", [("a", "2.20", _citation("per_step", "result_*.txt")),
                                          ("b", "1.0", _citation("block_timer", "result_0.txt"))])
    assert mst.main(["--check", str(good), "--results-root", str(tmp_path)]) == 0
    assert "2 of 2 rows agree" in capsys.readouterr().out
    bad = _table(tmp_path / "bad.csv", [("a", "2.3", _citation("per_step", "result_*.txt")),
                                        ("c", "1.0", _citation("block_timer", "result_7.txt"))])
    assert mst.main(["--check", str(bad), "--results-root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "differ" in out and "0 of 2 rows agree" in out
    assert "failed" in out and "block_timer/bench: result file 7: expected one, found none" \
        in out
    for bad, said in ((tmp_path / "none.csv", "none.csv: no such file"),
                      (_table(tmp_path / "empty.csv", []), "expected rows with run, published")):
        assert mst.main(["--check", str(bad), "--results-root", str(tmp_path)]) == 2
        assert said in capsys.readouterr().err


def test_result_files_are_found_by_their_number_whatever_their_prefix(tmp_path, capsys):
    """Submitters name their files ``result_01.txt`` or ``result_<job>_1.txt``: a number
    cited finds its one file; ``result_*`` takes them all; a number two files share is an
    error naming both."""
    folder = tmp_path / "training_results_v9.9/Org/results/per_step/bench"
    folder.mkdir(parents=True)
    sources = sorted((DATA / "per_step").glob("result_*.txt"))
    for name, source in zip(("result_00.txt", "result_job7-x_1.txt"), sources, strict=True):
        shutil.copy(source, folder / name)
    table = _table(tmp_path / "t.csv", [("n", "2.20", _citation("per_step", "result_0.txt .. "
                                                                "result_job7-x_1.txt")),
                                        ("a", "2.20", _citation("per_step", "result_*.txt"))])
    assert mst.main(["--check", str(table), "--results-root", str(tmp_path)]) == 0
    shutil.copy(sources[0], folder / "result_job8_1.txt")
    assert mst.main(["--check", str(table), "--results-root", str(tmp_path)]) == 1
    assert "result file 1: expected one, found result_job7-x_1.txt, result_job8_1.txt" in \
        capsys.readouterr().out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_check_against_a_bare_mirror_at_the_cited_commit(tmp_path, capsys):
    work = tmp_path / "work"
    shutil.copytree(DATA / "block_wall", work / "Org/results/block_wall/bench")
    mirror = tmp_path / "mirrors" / "mlcommons+training_results_v9.9" / "repo"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "results"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror)], check=True)
    citation = _citation("block_wall", "result_0.txt").replace(COMMIT, commit)
    table = _table(tmp_path / "t.csv", [("w", "1.10", citation)])
    assert mst.main(["--check", str(table), "--git", str(tmp_path / "mirrors")]) == 0
    assert "w" in capsys.readouterr().out


def test_files_on_the_command_line(capsys):
    assert mst.main([str(p) for p in sorted((DATA / "per_step").glob("*.txt"))]) == 0
    assert capsys.readouterr().out.startswith("2.2 s  (per-step: median over 5 steps of 2 files)")
    assert mst.main([str(DATA / "nowhere" / "result_0.txt")]) == 2
    assert "nowhere/result_0.txt: no such result file" in capsys.readouterr().err


def test_the_script_is_a_small_module():
    assert len((ROOT / "scripts" / "mlperf_step_time.py").read_text().splitlines()) <= 400
