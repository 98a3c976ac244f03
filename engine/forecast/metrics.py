"""Prophet Arena metrics and the reference rows that need no model.

Two scorers, chosen per run (``run.scorer``):

* ``"pm_rank"`` (default): upstream's scorer, ``pm-rank`` 0.3.1, which ForeDreamer's code calls
  (:mod:`engine.forecast.pm_rank_scoring`): Brier and average return over the markets that have price
  data, an omitted market at probability 0, the return of a bettor who takes Yes or No per market
  (illiquid quotes priced at 1). Accuracy is not a pm-rank metric: the fraction of the same options
  where ``p >= 0.5`` matches the outcome.
* ``"listed"``: the engine's earlier definitions, kept as an option: Brier and accuracy over every
  listed market, and $1 on the Yes contract with the largest ``p / yes_ask`` (contracts priced outside
  (0, 1) cannot be bought; no buyable contract: the dollar is kept, 1.0). An omitted market raises.

A question's scores are averaged per category, and the reported average is the mean over categories
(paper Table 1 layout; Brier lower is better).

Reference predictors: Uniform (0.5 on every market; the paper's "No Information" row is the model
forecasting from the question alone, a method row, see ``agent``) and Market (the implied probability
``(yes_bid + yes_ask) / 200`` at the snapshot, 0.5 for a market without a quote; under ``pm_rank`` its
return is pm-rank's market-price predictor's, :func:`pm_rank_scoring.market_baseline_return`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.errors import InputError
from engine.forecast import pm_rank_scoring as pm
from engine.forecast.data import Question
from engine.markdown import table

Probs = Mapping[str, float]


def probs_vector(probs: Probs, q: Question) -> np.ndarray:
    """``f8[m]`` probabilities in the order of ``q.markets``; missing names or values outside [0, 1] raise."""
    missing = [m for m in q.markets if m not in probs]
    if missing:
        raise InputError(f"question {q.qid}: probabilities missing for markets {missing[:5]}")
    p = np.array([float(probs[m]) for m in q.markets], dtype=np.float64)
    if not np.all(np.isfinite(p)) or p.min() < 0.0 or p.max() > 1.0:
        raise InputError(f"question {q.qid}: probabilities must be in [0, 1], got {p.tolist()[:8]}")
    return p


def outcome_vector(q: Question) -> np.ndarray:
    """``f8[m]`` resolved outcomes (1 = Yes) in the order of ``q.markets``."""
    return np.array([q.outcome[m] for m in q.markets], dtype=np.float64)


SCORERS = ("pm_rank", "listed")


def check_scorer(scorer: str) -> str:
    if scorer not in SCORERS:
        raise InputError(f"scorer must be one of {list(SCORERS)}, got {scorer!r}")
    return scorer


def brier(probs: Probs, q: Question, scorer: str = "pm_rank") -> float:
    """Brier score of one question under ``scorer`` (module doc)."""
    return pm.brier(probs, q) if check_scorer(scorer) == "pm_rank" else brier_listed(probs, q)


def accuracy(probs: Probs, q: Question, scorer: str = "pm_rank") -> float:
    return pm.accuracy(probs, q) if check_scorer(scorer) == "pm_rank" else accuracy_listed(probs, q)


def market_return(probs: Probs, q: Question, scorer: str = "pm_rank") -> float:
    return pm.market_return(probs, q) if check_scorer(scorer) == "pm_rank" else market_return_listed(probs, q)


def brier_listed(probs: Probs, q: Question) -> float:
    """Mean over the listed markets of (p_i - o_i)^2."""
    p, o = probs_vector(probs, q), outcome_vector(q)
    return float(np.mean((p - o) ** 2))


def accuracy_listed(probs: Probs, q: Question) -> float:
    """Fraction of listed markets where the thresholded forecast (p >= 0.5) equals the outcome."""
    p, o = probs_vector(probs, q), outcome_vector(q)
    return float(np.mean((p >= 0.5) == (o == 1.0)))


def yes_ask_prices(q: Question) -> np.ndarray:
    """``f8[m]`` Yes ask prices in dollars (NaN where the market has no quote)."""
    out = np.full(len(q.markets), np.nan)
    for i, m in enumerate(q.markets):
        quote = q.market_data.get(m)
        if quote is not None and quote.get("yes_ask") is not None:
            out[i] = float(quote["yes_ask"]) / 100.0
    return out


def market_return_listed(probs: Probs, q: Question) -> float:
    """Gross return of $1 bet by a risk-neutral bettor on argmax_i p_i / ask_i (see module doc)."""
    p, o = probs_vector(probs, q), outcome_vector(q)
    ask = yes_ask_prices(q)
    ok = np.isfinite(ask) & (ask > 0.0) & (ask < 1.0)
    if not ok.any():
        return 1.0
    ratio = np.where(ok, p / np.where(ok, ask, 1.0), -np.inf)
    i = int(np.argmax(ratio))
    return float(o[i] / ask[i])


def uniform_probs(q: Question) -> dict[str, float]:
    """Uniform reference: 0.5 on every market."""
    return {m: 0.5 for m in q.markets}


def market_probs(q: Question) -> dict[str, float]:
    """Market reference: (yes_bid + yes_ask) / 200 at the snapshot, clipped to [0, 1]; 0.5 if unquoted."""
    out = {}
    for m in q.markets:
        quote = q.market_data.get(m) or {}
        bid, ask = quote.get("yes_bid"), quote.get("yes_ask")
        if bid is None or ask is None:
            out[m] = 0.5
        else:
            out[m] = float(min(1.0, max(0.0, (float(bid) + float(ask)) / 200.0)))
    return out


@dataclass(frozen=True)
class Row:
    """One method's scores: per category and averaged over categories."""

    method: str
    brier: dict  # category -> mean Brier
    accuracy: dict
    market_return: dict
    n: dict  # category -> number of questions scored
    failed: int = 0  # questions whose answer was unusable (scored with the fallback, see agent)
    experience_tokens: float | None = None  # mean memory tokens per main-agent prompt (None: reference rows)

    @property
    def avg_brier(self) -> float:
        return float(np.mean(list(self.brier.values()))) if self.brier else float("nan")

    @property
    def avg_accuracy(self) -> float:
        return float(np.mean(list(self.accuracy.values()))) if self.accuracy else float("nan")

    @property
    def avg_return(self) -> float:
        return float(np.mean(list(self.market_return.values()))) if self.market_return else float("nan")


def score(method: str, questions: Sequence[Question], predictions: Sequence[Probs], failed: int = 0,
          scorer: str = "pm_rank", returns: Sequence[float] | None = None) -> Row:
    """Per-category means of Brier, accuracy and market return over ``questions`` (``returns`` overrides the last)."""
    if len(questions) != len(predictions):
        raise InputError(f"score: {len(questions)} questions but {len(predictions)} predictions")
    check_scorer(scorer)
    acc: dict[str, list] = {}
    for i, (q, p) in enumerate(zip(questions, predictions)):
        if scorer == "pm_rank" and not q.market_data:
            continue  # upstream does not score a question without price data
        ret = returns[i] if returns is not None else market_return(p, q, scorer)
        acc.setdefault(q.category, []).append((brier(p, q, scorer), accuracy(p, q, scorer), ret))
    cats = sorted(acc)
    return Row(
        method=method,
        brier={c: float(np.mean([x[0] for x in acc[c]])) for c in cats},
        accuracy={c: float(np.mean([x[1] for x in acc[c]])) for c in cats},
        market_return={c: float(np.mean([x[2] for x in acc[c]])) for c in cats},
        n={c: len(acc[c]) for c in cats}, failed=failed,
    )


UNIFORM_ROW = "Uniform (0.5 on every market)"


def reference_rows(questions: Sequence[Question], scorer: str = "pm_rank") -> list[Row]:
    """Uniform and Market rows on every question given (Market's return: pm-rank's market-price predictor)."""
    uniform = score(UNIFORM_ROW, questions, [uniform_probs(q) for q in questions], scorer=scorer)
    rets = [pm.market_baseline_return(q) if q.market_data else 1.0 for q in questions] if scorer == "pm_rank" else None
    market = score("Market", questions, [market_probs(q) for q in questions], scorer=scorer, returns=rets)
    return [uniform, market]


def format_table(rows: Sequence[Row], metric: str = "brier", digits: int = 4) -> str:
    """Markdown table: one row per method, one column per category, then Avg. and n."""
    cats = sorted({c for r in rows for c in getattr(r, metric)})
    exp = any(r.experience_tokens is not None for r in rows)  # model rows: memory tokens per prompt
    out = []
    for r in rows:
        vals = getattr(r, metric)
        avg = {"brier": r.avg_brier, "accuracy": r.avg_accuracy, "market_return": r.avg_return}[metric]
        cells = [r.method] + [f"{vals[c]:.{digits}f}" if c in vals else "-" for c in cats] + [f"{avg:.{digits}f}"]
        if exp:
            cells.append("-" if r.experience_tokens is None else f"{r.experience_tokens:.1f}")
        out.append(cells)
    return "\n".join(table(["Method", *cats, "Avg."] + (["Exp. tokens / prompt"] if exp else []), out))


def summary_rows(summary: dict) -> list[dict]:
    """``summary.json`` (``{"meta", "methods"}``, :mod:`engine.run_folder`) as one flat record per row of its
    table (reference and model rows on the evaluated questions): average Brier, accuracy and market return
    over categories, the per-category Brier (``brier_<category>``), questions scored and unusable answers."""
    out = []
    for r in summary.get("methods", []):
        row = Row(r["method"], r["brier"], r["accuracy"], r["market_return"], r["n"], r.get("failed", 0))
        rec = {"method": row.method, "brier": row.avg_brier, "accuracy": row.avg_accuracy,
               "market_return": row.avg_return, "n_questions": int(sum(row.n.values())), "failed": int(row.failed),
               "simulated": bool(r.get("simulated"))}
        rec.update({f"brier_{cat}": float(v) for cat, v in row.brier.items()})
        out.append(rec)
    return out
