"""A seeded synthetic market: industries, trading days, templated news and known true effects.

Each important news event belongs to a latent channel (:mod:`engine.finance.channels`)
with a known effect on the industry's future daily excess returns; minor news
(importance < 8) has no effect. Closes are built from a benchmark random walk
times the industry's excess path, then go through the same forward-return code
as real data (:func:`engine.finance.data.forward_excess_returns`).

``market.truth`` exposes the ground truth for tests:

- ``channels``: channel names; ``roles``; ``intuitive_sign`` and ``true_sign`` (i8[C]);
- ``effect f8[C, H]``: true cumulative excess return of a polarity +1 event of
  unit size at each horizon, ``true_sign * size * min(h, D) / D``;
- ``reading_truth f8[C, H]``: how right the intuitive reading is, per horizon,
  ``intuitive_sign * true_sign * min(h, D) / D`` (> 0 predictive, < 0 misleading, 0 noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.config import check
from engine.finance.channels import CHANNELS, CHANNEL_INDEX, industry_names
from engine.finance.data import DEFAULT_HORIZONS, Market, NewsTable

# A news item: the event (the channel's phrase) in the title, an analyst's two-sentence comment (two of
# the channel's notes) as its content; engine.finance.channels says why the texts are this focused.
_TITLES = ("{Industry} firms {phrase}", "{Industry} companies {phrase}")


@dataclass(frozen=True)
class SyntheticConfig:
    """[market] section for synthetic data."""

    n_industries: int = 8
    n_days: int = 300  # evaluated trading days (the stream adds a 4-day news lead-in and max(h) days at the end)
    events_per_day: float = 3.0  # important news (importance >= 8) per trading day, whole market
    minor_per_day: float = 1.0  # unimportant news per day (importance < 8, no effect)
    effect_size: float = 0.04  # mean total excess return of one event
    daily_noise: float = 0.01  # daily idiosyncratic excess-return volatility
    multi_industry_prob: float = 0.15
    channels: tuple[str, ...] = tuple(c.name for c in CHANNELS)
    seed: int = 0

    def __post_init__(self):
        check(2 <= self.n_industries <= 200, f"market.n_industries must be in [2, 200], got {self.n_industries}")
        check(self.n_days >= 3, f"market.n_days must be >= 3, got {self.n_days}")
        check(self.events_per_day > 0, f"market.events_per_day must be > 0, got {self.events_per_day}")
        check(self.minor_per_day >= 0, f"market.minor_per_day must be >= 0, got {self.minor_per_day}")
        check(self.effect_size >= 0, f"market.effect_size must be >= 0, got {self.effect_size}")
        check(self.daily_noise >= 0, f"market.daily_noise must be >= 0, got {self.daily_noise}")
        check(0 <= self.multi_industry_prob <= 1,
              f"market.multi_industry_prob must be in [0, 1], got {self.multi_industry_prob}")
        unknown = [c for c in self.channels if c not in CHANNEL_INDEX]
        check(not unknown and len(self.channels) > 0,
              f"market.channels must be a non-empty subset of {', '.join(CHANNEL_INDEX)}, got {list(self.channels)}")


LEAD_IN = 4  # news window T-4..T needs four earlier days


def generate_market(cfg: SyntheticConfig, horizons=DEFAULT_HORIZONS) -> Market:
    """Generate a seeded market; same config, same market, byte for byte."""
    rng = np.random.default_rng(cfg.seed)
    horizons = tuple(int(h) for h in horizons)
    n = cfg.n_industries
    total = LEAD_IN + cfg.n_days + max(horizons)
    industries = industry_names(n)
    chans = [CHANNEL_INDEX[c] for c in cfg.channels]
    freq = np.asarray([CHANNELS[c].frequency for c in chans], dtype=np.float64)
    cum = np.cumsum(freq / freq.sum())

    excess = rng.normal(0.0, cfg.daily_noise, size=(n, total))
    titles, contents, ids, days, inds, imps, chs, pols = [], [], [], [], [], [], [], []
    for t in range(total - 1):
        n_major = rng.poisson(cfg.events_per_day)
        n_minor = rng.poisson(cfg.minor_per_day)
        for k in range(n_major + n_minor):
            major = k < n_major
            c = chans[min(int(np.searchsorted(cum, rng.random(), side='right')), len(chans) - 1)]
            ch = CHANNELS[c]
            pol = 1 if rng.random() < 0.5 else -1
            first = int(rng.integers(n))
            targets = [first]
            if rng.random() < cfg.multi_industry_prob:
                other = int(rng.integers(n - 1))
                targets.append(other + (other >= first))
            importance = float(rng.integers(8, 11)) if major else float(rng.integers(3, 8))
            if major and ch.true_sign != 0:
                size = cfg.effect_size * rng.uniform(0.5, 1.5)
                end = min(total, t + 1 + ch.duration)
                for i in targets:
                    excess[i, t + 1:end] += ch.true_sign * pol * size / ch.duration
            title, content = _render(rng, ch, pol, [industries[i] for i in targets])
            ids.append(f"n{len(ids):06d}")
            titles.append(title)
            contents.append(content)
            days.append(t)
            inds.append(tuple(sorted(targets)))
            imps.append(importance)
            chs.append(c)
            pols.append(pol)
    market_ret = rng.normal(0.0003, 0.01, size=total)
    benchmark = 1000.0 * np.cumprod(1.0 + market_ret)
    # close_i[t] / close_i[s] - bench[t] / bench[s] ~ sum of excess in (s, t]
    close = 100.0 * np.cumprod((1.0 + market_ret)[None, :] + excess, axis=1)
    dates = np.datetime64("2025-01-02") + np.arange(total).astype("timedelta64[D]")
    news = NewsTable(ids, np.asarray(days, dtype=np.int64), titles, contents, inds, np.asarray(imps),
                     np.asarray(chs, dtype=np.int64), np.asarray(pols, dtype=np.int64))
    return Market(industries, dates, close, benchmark, news, horizons, truth=channel_truth(horizons))


def channel_truth(horizons) -> dict:
    """Ground truth of every channel (see module docstring), independent of the market seed."""
    h = np.asarray(horizons, dtype=np.float64)
    dur = np.asarray([c.duration for c in CHANNELS], dtype=np.float64)
    frac = np.minimum(h[None, :], dur[:, None]) / dur[:, None]
    true_sign = np.asarray([c.true_sign for c in CHANNELS], dtype=np.int64)
    intuitive = np.asarray([c.intuitive_sign for c in CHANNELS], dtype=np.int64)
    return {
        "channels": [c.name for c in CHANNELS],
        "roles": [c.role for c in CHANNELS],
        "intuitive_sign": intuitive,
        "true_sign": true_sign,
        "effect": true_sign[:, None] * frac,
        "reading_truth": (intuitive * true_sign)[:, None] * frac,
        "horizons": list(horizons),
    }


def eval_days(market: Market) -> np.ndarray:
    """Trading-day indices that are evaluated: after the news lead-in, with every horizon's return known."""
    last = market.n_days - max(market.horizons)
    first = LEAD_IN if market.truth is not None else 0
    return np.arange(first, max(first, last), dtype=np.int64)


def _render(rng, ch, pol: int, industries: list[str]) -> tuple[str, str]:
    """Title and content of a news item about ``industries`` (every industry it concerns is named)."""
    phrases = ch.up if pol > 0 else ch.down
    phrase = phrases[int(rng.integers(len(phrases)))]
    named = " and ".join([industries[0]] + [x.lower() for x in industries[1:]])
    title = _TITLES[int(rng.integers(len(_TITLES)))].format(Industry=named, phrase=phrase)
    notes = rng.choice(len(ch.notes), size=2, replace=False)
    return title, " ".join(ch.notes[int(k)] for k in notes)
