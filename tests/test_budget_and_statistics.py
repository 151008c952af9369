"""The work budget (a run beyond reach is refused at once, with the estimate), the engine's
guard against non-finite times, and one definition of per-layer statistics and shares.

Tests marked "issue 15" failed (hung, ran, or gave other numbers) on the main branch before
this change.
"""

from __future__ import annotations

import csv
import json
import math
import time

import numpy as np
import pytest

import flowsim
from flowsim.cli import main
from flowsim.collectives import ALGORITHMS
from flowsim.errors import ConfigError, SimulationError
from flowsim.system.budget import DEFAULT_MAX_WORK, algorithm_work, collective_work
from flowsim.system.phases import chunk_sizes, collective_phases

HUGE_RING = {"topology": ["Ring"], "npus_count": [4_194_304], "bandwidth": [50],
             "latency": [500]}


def test_a_4m_npu_ring_is_refused_quickly_with_its_estimate():
    """issue 15: a 4,194,304-NPU ring ran (for days); the cap bounded memory, not time."""
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"needs about 1\.41e\+14 work units.*--max-work"):
        flowsim.simulate_collective(HUGE_RING, "all_reduce", "1MiB")
    assert time.perf_counter() - start < 20


def test_the_budget_can_be_raised_or_lowered():
    ds = flowsim.simulate_collective("ring8", "all_reduce", "1MiB", max_work=math.inf)
    assert float(ds.time_ns) > 0
    with pytest.raises(ConfigError, match="budget of 10"):
        flowsim.simulate_collective("ring8", "all_reduce", "1MiB", max_work=10)
    with pytest.raises(ConfigError, match="max_work"):
        flowsim.simulate("ring8", "microbench_allreduce", max_work=10)
    with pytest.raises(ConfigError, match="max_work"):
        flowsim.estimate("ring8", "all_reduce", "1MiB", max_work=10)
    ds = flowsim.sweep({"base": {"network": "ring8", "size": "1MiB"},
                        "axes": {"size": ["1MiB"]}}, jobs=1, max_work=10)
    assert "max_work" in str(ds.error.values[0])


def test_the_cli_flag(capsys):
    assert main(["collective", "--max-work", "10"]) == 2
    err = capsys.readouterr().err
    assert "work units" in err and err.count("\n") == 1
    assert main(["collective", "--max-work", "inf", "--size", "1KiB", "--json"]) == 0
    capsys.readouterr()
    help_text = ""
    try:
        main(["collective", "--help"])
    except SystemExit:
        help_text = capsys.readouterr().out
    assert f"{DEFAULT_MAX_WORK:g}" in help_text   # the help states the real default


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_closed_forms_equal_the_step_lists(name):
    algorithm = ALGORITHMS[name]
    for p in (2, 3, 4, 5, 8, 16, 31, 32):
        if algorithm.check_size is not None:
            try:
                algorithm.check_size(p)
            except ValueError:
                continue
        for collective in sorted(algorithm.supports):
            steps = algorithm.steps(collective, p, 1, 0, 0)
            assert algorithm_work(name, collective, p) == (
                len(steps), sum(int(s.src.size) for s in steps)), (collective, p)


@pytest.mark.parametrize("network", ["r16_fc16_sw16", "gpt_1024", "hier_128",
                                     "dgx_pod_1024_leafspine_4to1"])
def test_bundled_platforms_are_far_below_the_budget(network):
    net = flowsim.load_network(network)
    system = flowsim.load_system("ring_16chunks_3d" if net.ndims == 3 else None)
    chunks = [collective_phases(net, system, "all_reduce", c)
              for c in chunk_sizes(1 << 30, system.splits)]
    assert collective_work(net, chunks, replicate=False) < DEFAULT_MAX_WORK / 100


def test_a_131072_gpu_ring_of_rings_all_reduce_fits():
    net = flowsim.load_network({"topology": ["Ring", "Switch", "Switch"],
                                "npus_count": [8, 128, 128], "bandwidth": [400, 50, 25],
                                "latency": [100, 500, 1000]})
    system = flowsim.load_system({"preferred-dataset-splits": 16,
                                  "all-reduce-implementation": ["ring"] * 3})
    chunks = [collective_phases(net, system, "all_reduce", c)
              for c in chunk_sizes(1 << 30, system.splits)]
    assert collective_work(net, chunks, replicate=True) < DEFAULT_MAX_WORK / 1000


def test_the_engine_refuses_non_finite_times():
    """issue 15: a NaN time spun the analytical loop forever (the config values that made it
    are refused at parse time; the engine itself refuses them too)."""
    from flowsim.system.scheduler import Schedule

    net = flowsim.load_network("ring8")
    schedule = Schedule(net, flowsim.load_system(None), "analytical")
    with pytest.raises(SimulationError, match="nan"):
        schedule.at(math.nan, lambda t: None)
    schedule = Schedule(net, flowsim.load_system(None), "analytical")
    schedule.when(12345, lambda t: None)   # pending, and no timer event will ever report it
    with pytest.raises(SimulationError, match="stalled"):
        schedule.run()


def test_estimate_batch_refuses_inputs_whose_times_overflow():
    with pytest.raises(ConfigError):
        flowsim.estimate_batch("ring8", "all_reduce", np.array([1 << 20]),
                               latency=[np.array([math.inf])])


# ------------------------------------------------------------------ statistics
def _per_rank(tmp_path, ranks: int):
    """The same two-layer program once on ``ranks`` NPUs and once as one program per rank."""
    ops = ("      - {id: 0, kind: compute, duration: 1000, layer: L0, pass: fwd}\n"
           "      - {id: 1, kind: collective, collective: all-reduce, size: 1MiB, deps: [0], "
           "layer: L1, pass: wg}\n"
           "      - {id: 2, kind: compute, duration: 500, deps: [1], layer: L1, pass: fwd}\n")
    shared = tmp_path / "shared.yml"
    shared.write_text("layers: [L0, L1]\nprograms:\n  - npus: all\n    ops:\n" + ops)
    split = tmp_path / "split.yml"
    split.write_text("layers: [L0, L1]\nprograms:\n" + "".join(
        f"  - npus: [{r}]\n    ops:\n" + ops for r in range(ranks)))
    return shared, split


def test_per_layer_values_of_per_rank_programs_are_means_not_sums(tmp_path, capsys):
    """issue 15: an 8-rank trace printed per-layer sums over the ranks as means ('most
    exposed: (other) 75.96 ms' in an 11.79 ms run; end_to_end.csv 8x too large)."""
    shared, split = _per_rank(tmp_path, 8)
    a = flowsim.simulate("ring8", shared)
    b = flowsim.simulate("ring8", split)
    assert float(a.time_ns) == float(b.time_ns)
    for name in ("layer_compute_ns", "layer_exposed_comm_ns", "layer_comm_ns"):
        np.testing.assert_allclose(b[name].values, a[name].values, rtol=1e-12)
    assert float(b.layer_compute_ns.sel(layer="L0", **{"pass": "fwd"})) == 1000.0
    assert b.layer_npus.values.tolist() == [8, 8]
    assert main(["run", "--workload", str(split), "--csv", str(tmp_path / "csv")]) == 0
    with open(tmp_path / "csv" / "end_to_end.csv") as f:
        rows = {r[0]: r for r in csv.reader(f) if r}
    assert float(rows["L0"][1]) == 1.0   # fwd compute of L0: 1 us, not 8 us


def test_shares_are_one_definition_everywhere(capsys, tmp_path):
    """issue 15: the exposed share was computed two ways (summary and README)."""
    assert main(["run", "--workload", "microbench_allreduce", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    ds = flowsim.simulate("ring8", "microbench_allreduce")
    assert main(["run", "--workload", "microbench_allreduce", "--csv", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    with open(tmp_path / "end_to_end.csv") as f:
        rows = {r[0]: r[1] for r in csv.reader(f) if r}
    for key in ("compute_share", "exposed_comm_share", "bubble_share", "idle_share"):
        assert summary[key] == ds.attrs[key]
        assert float(rows[key]) == pytest.approx(ds.attrs[key], abs=1e-6)
    assert f"{100 * ds.attrs['exposed_comm_share']:5.1f}%" in text
    assert sum(ds.attrs[k] for k in ("compute_share", "exposed_comm_share", "bubble_share",
                                     "idle_share")) == pytest.approx(1.0)


def test_sub_picosecond_idle_is_zero():
    """issue 15: the summary printed 'idle: 6.519e-09 ns'."""
    from flowsim.units import format_time

    assert format_time(6.519e-09) == "0 ns"
    ds = flowsim.simulate("ring8", "resnet50_dp")
    assert (ds.idle_ns.values == 0).any() or (ds.idle_ns.values >= 1e-3).all()
    assert not ((ds.idle_ns.values > 0) & (ds.idle_ns.values < 1e-3)).any()


def test_a_warning_is_printed_once_and_names_a_key_of_the_file(capsys):
    """issue 15: a warning was repeated four times (once per chunk), about a key the file
    lacked ('broadcast-implementation', defaulted from the all-reduce's)."""
    assert main(["run", "--network", "r4_fc8_sw4", "--system", "ring_4chunks",
                 "--workload", "microbench_allreduce"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "all-reduce-implementation" in warnings[0]
