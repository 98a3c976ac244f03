import numpy as np
import pytest

from engine.errors import InputError
from engine.forecast.data import load_prophet_arena
from engine.forecast.metrics import (
    accuracy, brier, format_table, market_probs, market_return, reference_rows, score, uniform_probs,
)

from .conftest import make_row, write_csv


@pytest.fixture
def qs(tmp_path):
    rows = [make_row("a", markets=("X", "Y", "Z"), outcome=(0, 1, 0), quotes=((20, 30), (50, 54), (None, None))),
            make_row("b", category="Economics", markets=("Up",), outcome=(1,), quotes=((70, 75),))]
    write_csv(tmp_path / "m.csv", rows)
    return sorted(load_prophet_arena(tmp_path), key=lambda q: q.qid)


def test_brier_accuracy_match_independent_computation(qs):
    a, b = qs
    pa = {"X": 0.1, "Y": 0.7, "Z": 0.6}
    # independent: by hand
    assert brier(pa, a, "listed") == pytest.approx(((0.1 - 0) ** 2 + (0.7 - 1) ** 2 + (0.6 - 0) ** 2) / 3)
    assert accuracy(pa, a, "listed") == pytest.approx(2 / 3)
    assert brier({"Up": 0.2}, b, "listed") == pytest.approx(0.64)
    row = score("m", qs, [pa, {"Up": 0.2}], scorer="listed")
    assert row.brier == pytest.approx({"Sports": (0.01 + 0.09 + 0.36) / 3, "Economics": 0.64})
    assert row.avg_brier == pytest.approx(((0.01 + 0.09 + 0.36) / 3 + 0.64) / 2)
    assert row.accuracy["Economics"] == 0.0


def test_reference_rows(qs):
    a, b = qs
    assert market_probs(a) == {"X": 0.25, "Y": 0.52, "Z": 0.5}  # Z has no quote
    assert uniform_probs(b) == {"Up": 0.5}
    none, market = reference_rows(qs, scorer="listed")
    assert none.avg_brier == pytest.approx(0.25)
    expect_a = np.mean([(0.25 - 0) ** 2, (0.52 - 1) ** 2, (0.5 - 0) ** 2])
    assert market.brier["Sports"] == pytest.approx(expect_a)
    assert market.brier["Economics"] == pytest.approx((0.725 - 1) ** 2)
    assert "| Market |" in format_table([none, market])
    # upstream's outcome set: Z has no price data, so pm-rank scores X and Y only
    assert reference_rows(qs)[1].brier["Sports"] == pytest.approx(np.mean([0.25 ** 2, 0.48 ** 2]))


def test_market_return_risk_neutral_bet(qs):
    a, b = qs
    # ratios p/ask: X 0.9/0.30=3.0, Y 0.5/0.54; Z unquoted -> bet X, which lost -> 0
    assert market_return({"X": 0.9, "Y": 0.5, "Z": 1.0}, a, "listed") == 0.0
    assert market_return({"X": 0.1, "Y": 0.9, "Z": 0.0}, a, "listed") == pytest.approx(1 / 0.54)
    assert market_return({"Up": 0.9}, b, "listed") == pytest.approx(1 / 0.75)


def test_bad_probabilities(qs):
    a, _ = qs
    with pytest.raises(InputError, match="probabilities missing for markets \\['Z'\\]"):
        brier({"X": 0.1, "Y": 0.2}, a, "listed")
    with pytest.raises(InputError, match="must be in \\[0, 1\\]"):
        brier({"X": 1.5, "Y": 0.2, "Z": 0.0}, a, "listed")
    with pytest.raises(InputError, match="2 questions but 1 predictions"):
        score("m", qs, [{}])
