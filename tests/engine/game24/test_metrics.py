"""Metrics equal a hand computation on a small fixed log; report files are written and labelled."""

from __future__ import annotations

import json

import pytest

from engine.errors import InputError
from engine.game24 import metrics, report


def _rec(method, seed, eid, any_, first, calls, samples, pt, ct, wall, phase="test"):
    return {"method": method, "seed": seed, "phase": phase, "episode_id": eid, "success_any": any_,
            "success_first": first, "calls": calls, "samples": samples, "prompt_tokens": pt,
            "completion_tokens": ct, "tokens": pt + ct, "wall_s": wall}


LOG = [
    # tot, seed 0: 2 test puzzles (+1 warm-up record that must be ignored)
    _rec("tot", 0, 0, True, True, 50, 120, 1000, 100, 0.5, phase="warmup"),
    _rec("tot", 0, 1, True, False, 40, 100, 800, 80, 0.2),
    _rec("tot", 0, 2, False, False, 60, 140, 1200, 120, 0.4),
    # tot, seed 1
    _rec("tot", 1, 1, True, True, 50, 110, 900, 90, 0.3),
    _rec("tot", 1, 2, True, True, 30, 70, 600, 60, 0.1),
    # toe, seed 0 only
    _rec("toe", 0, 1, True, True, 10, 20, 200, 20, 0.05),
    _rec("toe", 0, 2, True, False, 0, 0, 0, 0, 0.01),
]


def test_summary_equals_hand_computation():
    s = {r["method"]: r for r in metrics.summarize(LOG)}
    tot = s["tot"]
    # seed 0: acc_any 1/2, acc_first 0/2, calls 50; seed 1: acc_any 1, acc_first 1, calls 40
    assert tot["acc_any"] == pytest.approx((0.5 + 1.0) / 2)
    assert tot["acc_first"] == pytest.approx((0.0 + 1.0) / 2)
    assert tot["calls"] == pytest.approx((50 + 40) / 2)
    assert tot["samples"] == pytest.approx((120 + 90) / 2)
    assert tot["tokens"] == pytest.approx(((880 + 1320) / 2 + (990 + 660) / 2) / 2)
    assert tot["wall_s"] == pytest.approx((0.3 + 0.2) / 2)
    assert tot["calls_std"] == pytest.approx(((50 - 45) ** 2 * 2) ** 0.5)  # sample std of [50, 40]
    assert tot["seeds"] == [0, 1] and tot["n_puzzles"] == 2
    toe = s["toe"]
    assert toe["acc_any"] == 1.0 and toe["acc_first"] == 0.5 and toe["calls"] == 5.0 and toe["calls_std"] == 0.0


def test_learning_curve_windows():
    x, acc = metrics.learning_curve(LOG, "tot", window=2)
    # window 0 holds ids 0,1 (3 records: T, T, T), window 1 holds id 2 (F, T)
    assert x.tolist() == [2.0, 3.0]
    assert acc.tolist() == [1.0, 0.5]


def test_metric_errors():
    with pytest.raises(InputError, match="lacks field"):
        metrics.summarize([{"method": "tot"}])
    with pytest.raises(InputError, match="no 'test' episodes for method 'flex'"):
        metrics.summarize(LOG, methods=["flex"])
    with pytest.raises(InputError, match="window must be >= 1"):
        metrics.learning_curve(LOG, "tot", window=0)
    with pytest.raises(InputError, match="at least one"):
        metrics.seed_metrics([])


def test_report_files_are_labelled(tmp_path):
    summary = metrics.summarize(LOG, methods=["tot", "toe"])
    table = report.markdown_table(summary, "simulated", "simulated-game24-v1")
    assert "SIMULATED" in table and "ToT+ToE [simulated]" in table
    assert "| ToT (Yao et al. 2023) [simulated] | 75.0% ± 35.4 | 50.0% | 45.0 ± 7.1 |" in table
    real = report.markdown_table(summary, "local", "smollm2")
    assert "simulated" not in real.lower() and "local (smollm2)" in real
    from engine.run_folder import write_records, write_summary

    write_records(LOG, tmp_path / "episodes.parquet")
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "episodes.parquet").num_rows == len(LOG)
    write_summary(summary, {"backend": "simulated"}, tmp_path / "summary.json")
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [m["method"] for m in data["methods"]] == ["tot", "toe"]
    report.plot_accuracy_vs_calls(summary, tmp_path / "a.png", "simulated")
    report.plot_learning_curve(LOG, ["tot", "toe"], tmp_path / "l.png", "simulated", window=1, test_start=1)
    assert (tmp_path / "a.png").stat().st_size > 1000 and (tmp_path / "l.png").stat().st_size > 1000


def test_learning_curve_of_calls():
    x, calls = metrics.learning_curve(LOG, "toe", window=1, field="calls")
    assert x.tolist() == [2.0, 3.0] and calls.tolist() == [10.0, 0.0]
    with pytest.raises(InputError, match="no field 'nope'"):
        metrics.learning_curve(LOG, "toe", field="nope")
