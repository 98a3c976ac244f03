"""Forecast search: BM25 scores from ``engine.forecast.search.Okapi`` against rank-bm25's ``BM25Okapi``, same run.

The corpus is every Prophet Arena question's sources (``TOE_PA_DATA``, default ``../shared/data/forecast/
prophet_arena``; skipped without it), the queries every question's title, as the forecasting agent's first search
sends them. Both score every query ``TOE_BENCH_REPEATS`` times (5), interleaved; the best pass of each is reported
and their ratio. Scores are asserted equal to the bit.

    TOE_PA_DATA=../shared/data/forecast/prophet_arena python -m pytest benchmarks/test_forecast_search.py -s -p no:cacheprovider
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import record  # noqa: E402
from engine.forecast.data import load_prophet_arena  # noqa: E402
from engine.forecast.search import Okapi, corpus_from_questions, tokenize  # noqa: E402

PA_DATA = Path(os.environ.get("TOE_PA_DATA", Path(__file__).resolve().parents[2] / "shared/data/forecast/prophet_arena"))
REPEATS = int(os.environ.get("TOE_BENCH_REPEATS", 5))


def _pass(scorer, queries) -> float:
    t = time.process_time()
    for q in queries:
        scorer.get_scores(q)
    return time.process_time() - t


def test_okapi_against_rank_bm25():
    from rank_bm25 import BM25Okapi

    if not PA_DATA.exists():
        pytest.skip(f"no Prophet Arena data at {PA_DATA} (TOE_PA_DATA)")
    questions = load_prophet_arena(PA_DATA)
    docs = corpus_from_questions(questions).docs
    corpus = [tokenize(d.title + " " + d.content) or ["_"] for d in docs]
    queries = [tokenize(q.title) or ["_"] for q in questions]
    ref, ours = BM25Okapi(corpus), Okapi(corpus)
    assert all(ours.get_scores(q).tobytes() == ref.get_scores(q).tobytes() for q in queries)
    times = {"rank_bm25": [], "okapi": []}
    for _ in range(REPEATS):
        times["rank_bm25"].append(_pass(ref, queries))
        times["okapi"].append(_pass(ours, queries))
    best = {k: min(v) for k, v in times.items()}
    figures = {"documents": len(docs), "queries": len(queries),
               "ms_per_query": {k: 1e3 * v / len(queries) for k, v in best.items()},
               "speedup": best["rank_bm25"] / best["okapi"], "repeats": REPEATS}
    print(figures)
    record("forecast_search", "prophet_arena", figures)
    assert figures["speedup"] > 1
