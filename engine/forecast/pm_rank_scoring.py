"""Prophet Arena scores as upstream's scorer computes them (``pm-rank`` 0.3.1, which ForeDreamer's code calls).

Read from pm-rank's ``data/loaders.py`` (``ProphetArenaChallengeLoader``), ``data/base.py``,
``model/scoring_rule.py`` (``BrierScoringRule``) and ``model/average_return.py`` (``AverageReturn()``
with its defaults: $1 per event, risk-neutral, binary reduction, exact bets); written here in NumPy so
that scoring needs neither pandas nor pydantic, and tested equal to the library itself on every shared
Prophet Arena file (``tests/engine/forecast/test_pm_rank_scoring.py``, to 1e-9).

* **Outcome set**: the markets that have price data (the keys of ``market_data``, in that order), not
  the listed ``markets``; a question without price data is not scored.
* **Forecast**: each option's probability, clipped to [0, 1]; an option the answer omits counts as 0.
* **Brier**: ``sum_i (p_i - o_i)^2 / k`` over the k options (pm-rank reports ``1 -`` this).
* **Odds** (implied probabilities): ``yes_ask / 100`` per option, 1.0 where the quote is missing,
  non-positive or the market's liquidity is under 100; the same from ``no_ask`` for the No side; both
  clipped to [0.005, 0.995] (``SMOOTH_ODDS_EPS``).
* **Average return** (binary reduction, risk neutral): per option the bettor takes Yes when
  ``p/q_yes >= (1-p)/q_no`` and No otherwise, then puts the whole dollar on the option with the largest
  edge (``argmax``: the first on ties); the gross return is ``outcome / price`` of that contract. The
  market-price predictor ("market-baseline") bets with ``p`` = its unsmoothed Yes odds and prices No at
  ``1 - q_yes``.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

SMOOTH_ODDS_EPS = 5e-3  # pm_rank.data.base
MIN_LIQUIDITY = 100  # pm_rank.data.loaders: quotes of thinner markets are priced at 1


def options(q) -> list[str]:
    """The options pm-rank scores: markets with price data, in ``market_data`` order."""
    return list(q.market_data.keys())


def outcomes(q) -> np.ndarray:
    return np.array([1.0 if q.outcome.get(m, 0) == 1 else 0.0 for m in options(q)])


def forecast(probs: Mapping[str, float], q) -> np.ndarray:
    """``f8[k]``: each option's probability clipped to [0, 1], 0 where the answer omits it."""
    return np.array([max(0.0, min(1.0, float(probs.get(m, 0.0)))) for m in options(q)])


def odds(q, side: str = "yes", smooth: bool = True) -> np.ndarray:
    """``f8[k]`` implied probabilities of the Yes (or No) contracts (see module doc)."""
    key = f"{side}_ask"
    out = []
    for m in options(q):
        info = q.market_data.get(m) or {}
        ask = info.get(key)
        if ask is None or info.get("liquidity", 0) < MIN_LIQUIDITY or ask <= 0:
            ask = 100
        out.append(float(ask) / 100.0)
    out = np.array(out)
    return np.clip(out, SMOOTH_ODDS_EPS, 1 - SMOOTH_ODDS_EPS) if smooth else out


def brier(probs: Mapping[str, float], q) -> float:
    p, o = forecast(probs, q), outcomes(q)
    return float(np.sum((p - o) ** 2) / len(p))


def accuracy(probs: Mapping[str, float], q) -> float:
    """Not a pm-rank metric: the fraction of pm-rank's options where ``p >= 0.5`` matches the outcome."""
    p, o = forecast(probs, q), outcomes(q)
    return float(np.mean((p >= 0.5) == (o == 1.0)))


def _return(p: np.ndarray, q_yes: np.ndarray, q_no: np.ndarray, o: np.ndarray) -> float:
    yes_edge, no_edge = p / q_yes, (1 - p) / q_no
    flip = no_edge > yes_edge
    eff_p = np.where(flip, 1 - p, p)
    eff_q = np.where(flip, q_no, q_yes)
    eff_o = np.where(flip, 1 - o, o)
    j = int(np.argmax(eff_p / eff_q))
    return float(eff_o[j] / eff_q[j])


def market_return(probs: Mapping[str, float], q) -> float:
    """Gross return of $1 on the event (pm-rank ``AverageReturn()``, binary reduction, risk neutral)."""
    return _return(forecast(probs, q), odds(q, "yes"), odds(q, "no"), outcomes(q))


def market_baseline_probs(q) -> dict[str, float]:
    """pm-rank's market-price predictor: the Yes odds themselves (unsmoothed, unnormalized) per option."""
    return dict(zip(options(q), odds(q, "yes", smooth=False).tolist()))


def market_baseline_return(q) -> float:
    """The market-price predictor's return: No priced at ``1 - q_yes`` (pm-rank's market-baseline rule)."""
    q_yes = odds(q, "yes")
    return _return(odds(q, "yes", smooth=False), q_yes, 1 - q_yes, outcomes(q))
