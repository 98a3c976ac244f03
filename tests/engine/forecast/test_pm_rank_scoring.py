"""The engine's Prophet Arena scores equal upstream's scorer (the real ``pm-rank`` library) on every shared file."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from engine.forecast import pm_rank_scoring as pm
from engine.forecast.data import load_prophet_arena
from engine.forecast.metrics import market_probs, reference_rows, score, uniform_probs

from .conftest import SHARED

pd = pytest.importorskip("pandas")
pm_rank = pytest.importorskip("pm_rank")
from pm_rank.data.loaders import ProphetArenaChallengeLoader  # noqa: E402
from pm_rank.model.average_return import AverageReturn  # noqa: E402
from pm_rank.model.scoring_rule import BrierScoringRule  # noqa: E402

pytestmark = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared Prophet Arena data not at {SHARED}")


def _predictors(q, rng):
    """Forecasters exercising every rule: uniform, market mid, random, an answer omitting markets, extremes."""
    names = list(q.markets)
    omit = {m: rng.random() for m in names[: max(1, len(names) // 2)]}
    return {
        "uniform": uniform_probs(q),
        "market_mid": market_probs(q),
        "random": {m: rng.random() for m in names},
        "omits_markets": omit,
        "extremes": {m: float(rng.random() < 0.5) for m in names},
        "out_of_range": {m: rng.uniform(-0.5, 1.5) for m in names},
    }


def _upstream(questions, preds):
    rows = []
    for q in questions:
        for name, probs in preds[q.qid].items():
            rows.append({"event_ticker": q.qid, "submission_id": q.qid, "predictor_name": name,
                         "market_info": json.dumps(q.market_data), "market_outcome": json.dumps(q.outcome),
                         "category": q.category, "close_time": "2025-12-31T00:00:00+00:00",
                         "prediction": json.dumps({"probabilities": [{"market": m, "probability": p}
                                                                     for m, p in probs.items()]})})
    loader = ProphetArenaChallengeLoader(predictions_df=pd.DataFrame(rows))
    problems = loader.load_challenge(add_market_baseline=True).forecast_problems
    *_, brier_info = BrierScoringRule().fit(problems, include_per_problem_info=True)
    *_, ret_info = AverageReturn().fit(problems, include_per_problem_info=True)
    brier = {(i["problem_id"], i["username"]): 1.0 - i["score"] for i in brier_info}  # pm-rank reports 1 - Brier
    ret = {(i["problem_id"], i["username"]): i["score"] for i in ret_info}
    return brier, ret


@pytest.fixture(scope="module")
def questions():
    return load_prophet_arena(SHARED)


def test_brier_and_return_equal_pm_rank_on_every_shared_question(questions):
    rng = random.Random(0)
    preds = {q.qid: _predictors(q, rng) for q in questions}
    up_brier, up_ret = _upstream(questions, preds)
    checked = 0
    for q in questions:
        for name, probs in preds[q.qid].items():
            assert pm.brier(probs, q) == pytest.approx(up_brier[(q.qid, name)], abs=1e-9), (q.qid, name)
            assert pm.market_return(probs, q) == pytest.approx(up_ret[(q.qid, name)], abs=1e-9), (q.qid, name)
            checked += 1
        assert pm.market_baseline_return(q) == pytest.approx(up_ret[(q.qid, "market-baseline")], abs=1e-9)
        assert pm.brier(pm.market_baseline_probs(q), q) == pytest.approx(up_brier[(q.qid, "market-baseline")], abs=1e-9)
    assert checked == 6 * len(questions) == 6 * 137


def test_the_outcome_set_and_omitted_markets_follow_upstream(questions):
    differs = [q for q in questions if set(pm.options(q)) != set(q.markets)]
    assert differs, "the shared files have questions whose listed markets lack price data"
    q = differs[0]
    only_priced = {m: 1.0 for m in q.markets if m not in q.market_data}  # probabilities only on unpriced markets
    assert pm.brier(only_priced, q) == pytest.approx(pm.brier({}, q))  # ignored, like omitted ones (p = 0)


def test_rows_use_the_upstream_scorer_by_default(questions):
    sample = questions[:20]
    row = score("x", sample, [uniform_probs(q) for q in sample])
    by_cat = {}
    for q in sample:
        by_cat.setdefault(q.category, []).append(pm.brier(uniform_probs(q), q))
    assert row.brier == pytest.approx({c: float(np.mean(v)) for c, v in by_cat.items()})
    mids = [market_probs(q) for q in sample]
    assert score("x", sample, mids, scorer="listed").brier != score("x", sample, mids).brier  # the engine's own definition stays available, and differs
    market = next(r for r in reference_rows(sample) if r.method == "Market")
    rets = {}
    for q in sample:
        rets.setdefault(q.category, []).append(pm.market_baseline_return(q))
    assert market.market_return == pytest.approx({c: float(np.mean(v)) for c, v in rets.items()})
