"""Input schema, loaders and forward excess returns for a FinEvolveBench-style news stream.

Two tables describe a market (CSV or Parquet, chosen by file extension):

``news`` (one row per news item)
    ==============  ==========================================================
    news_id         str or int, unique
    publish_time    date or timestamp (ISO text in CSV); mapped to the first
                    trading day on or after it
    title           str
    content         str
    industries      related industries: a list column (Parquet) or one string
                    with names separated by ``;`` (CSV); names must appear in
                    the prices table
    importance      number in [0, 10] (the pipeline's importance score)
    ==============  ==========================================================

``prices`` (long format, one row per trading day and industry)
    ===============  =========================================================
    date             trading date
    industry         industry index name
    close            industry index close (> 0)
    benchmark_close  benchmark index close on that date (> 0, same for every
                     industry of a date)
    ===============  =========================================================

The forward excess return of industry ``i`` on day ``t`` at horizon ``h`` is
``alpha[i, t, h] = close[i, t+h] / close[i, t] - bench[t+h] / bench[t]`` (the
target of csIC/tsIC, ToE eqs. (A7)-(A10)); it is NaN when ``t + h`` lies
beyond the last trading day.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import InputError

NEWS_COLUMNS = ("news_id", "publish_time", "title", "content", "industries", "importance")
PRICE_COLUMNS = ("date", "industry", "close", "benchmark_close")
DEFAULT_HORIZONS = (10, 20, 40)


@dataclass
class NewsTable:
    """News items as columns. ``day i8[m]`` is the trading-day index of each item.

    ``industries`` holds a tuple of industry indices per item. ``channel i8[m]``
    and ``polarity i8[m]`` are the synthetic generator's ground truth (-1 and 0
    for real data).
    """

    news_id: list[str]
    day: np.ndarray
    title: list[str]
    content: list[str]
    industries: list[tuple[int, ...]]
    importance: np.ndarray
    channel: np.ndarray | None = None
    polarity: np.ndarray | None = None

    def __post_init__(self):
        m = len(self.news_id)
        for name in ("title", "content", "industries"):
            if len(getattr(self, name)) != m:
                raise InputError(f"news.{name} has {len(getattr(self, name))} rows, expected {m}")
        self.day = np.asarray(self.day, dtype=np.int64)
        self.importance = np.asarray(self.importance, dtype=np.float64)
        if self.day.shape != (m,) or self.importance.shape != (m,):
            raise InputError(f"news.day and news.importance must have shape ({m},)")
        if self.channel is None:
            self.channel = np.full(m, -1, dtype=np.int64)
        if self.polarity is None:
            self.polarity = np.zeros(m, dtype=np.int64)
        if len(set(self.news_id)) != m:
            raise InputError("news.news_id must be unique")

    def __len__(self) -> int:
        return len(self.news_id)


@dataclass
class Market:
    """A market: industries, trading days, closes, forward excess returns and news.

    ``close f8[N, T]``, ``benchmark f8[T]``, ``alpha f8[N, T, H]`` (NaN where
    the horizon runs past the data). ``truth`` holds generator ground truth
    (synthetic markets only).
    """

    industries: tuple[str, ...]
    dates: np.ndarray
    close: np.ndarray
    benchmark: np.ndarray
    news: NewsTable
    horizons: tuple[int, ...] = DEFAULT_HORIZONS
    alpha: np.ndarray = field(init=False)
    truth: dict | None = None

    def __post_init__(self):
        n, t = len(self.industries), len(self.dates)
        self.close = np.ascontiguousarray(self.close, dtype=np.float64)
        self.benchmark = np.ascontiguousarray(self.benchmark, dtype=np.float64)
        if self.close.shape != (n, t):
            raise InputError(f"close must have shape ({n}, {t}), got {self.close.shape}")
        if self.benchmark.shape != (t,):
            raise InputError(f"benchmark must have shape ({t},), got {self.benchmark.shape}")
        self.alpha = forward_excess_returns(self.close, self.benchmark, self.horizons)

    @property
    def n_industries(self) -> int:
        return len(self.industries)

    @property
    def n_days(self) -> int:
        return len(self.dates)


def forward_excess_returns(close: np.ndarray, benchmark: np.ndarray, horizons: Sequence[int]) -> np.ndarray:
    """``alpha f8[N, T, H]``: ``close[i,t+h]/close[i,t] - bench[t+h]/bench[t]``, NaN past the end.

    ``close f8[N, T]`` and ``benchmark f8[T]`` must be finite and > 0.
    """
    close = np.asarray(close, dtype=np.float64)
    benchmark = np.asarray(benchmark, dtype=np.float64)
    if close.ndim != 2 or benchmark.ndim != 1 or close.shape[1] != benchmark.shape[0]:
        raise InputError(
            f"close must be [N, T] and benchmark [T] with the same T, got {close.shape} and {benchmark.shape}"
        )
    if not (np.all(np.isfinite(close)) and np.all(close > 0)):
        raise InputError("close must be finite and > 0 everywhere")
    if not (np.all(np.isfinite(benchmark)) and np.all(benchmark > 0)):
        raise InputError("benchmark_close must be finite and > 0 everywhere")
    hs = [int(h) for h in horizons]
    if not hs or any(h < 1 for h in hs):
        raise InputError(f"horizons must be positive integers, got {list(horizons)}")
    n, t = close.shape
    out = np.full((n, t, len(hs)), np.nan)
    for k, h in enumerate(hs):
        if h < t:
            out[:, : t - h, k] = close[:, h:] / close[:, :-h] - (benchmark[h:] / benchmark[:-h])[None, :]
    return out


# --------------------------------------------------------------------------- loaders


def _read_table(path: Path):
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix == ".csv":
            return pacsv.read_csv(path)
    except Exception as exc:  # pyarrow raises several types for malformed files
        raise InputError(f"cannot read {str(path)!r}: {exc}") from exc
    raise InputError(f"{str(path)!r}: expected a .csv or .parquet file, got {suffix!r}")


def _require_columns(table, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputError(
            f"{what} is missing column(s) {', '.join(missing)}; expected {', '.join(columns)}, "
            f"got {', '.join(table.column_names)}"
        )


def _to_days(values) -> np.ndarray:
    arr = np.asarray([str(v)[:10] for v in values])
    try:
        return arr.astype("datetime64[D]")
    except ValueError as exc:
        raise InputError(f"cannot parse dates: {exc}") from exc


def load_prices(path: str | Path) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """Read the prices table: ``(industries, dates datetime64[D][T], close f8[N, T], benchmark f8[T])``."""
    table = _read_table(Path(path))
    _require_columns(table, PRICE_COLUMNS, f"prices file {str(path)!r}")
    d = _to_days(table.column("date").to_pylist())
    ind = [str(x) for x in table.column("industry").to_pylist()]
    close = np.asarray(table.column("close").to_pylist(), dtype=np.float64)
    bench = np.asarray(table.column("benchmark_close").to_pylist(), dtype=np.float64)
    industries = tuple(sorted(set(ind)))
    dates = np.unique(d)
    ii = np.searchsorted(np.asarray(industries, dtype=object), np.asarray(ind, dtype=object))
    tt = np.searchsorted(dates, d)
    out = np.full((len(industries), len(dates)), np.nan)
    if len(set(zip(ii.tolist(), tt.tolist()))) != len(ii):
        raise InputError(f"prices file {str(path)!r} has duplicate (date, industry) rows")
    out[ii, tt] = close
    if np.isnan(out).any():
        k = np.argwhere(np.isnan(out))[0]
        raise InputError(
            f"prices file {str(path)!r}: no close for industry {industries[k[0]]!r} on {dates[k[1]]}"
        )
    if not (np.all(np.isfinite(out)) and np.all(out > 0)):
        raise InputError(f"prices file {str(path)!r}: close must be finite and > 0 everywhere")
    b = np.full(len(dates), np.nan)
    b[tt] = bench
    if not np.allclose(b[tt], bench):
        raise InputError(f"prices file {str(path)!r}: benchmark_close differs between rows of one date")
    return industries, dates, out, b


def load_news(path: str | Path, industries: Sequence[str], dates: np.ndarray) -> NewsTable:
    """Read the news table and map items onto trading days and industry indices.

    Items published after the last trading day, or tagged with no known
    industry, are dropped; an unknown industry name is an error.
    """
    table = _read_table(Path(path))
    _require_columns(table, NEWS_COLUMNS, f"news file {str(path)!r}")
    index = {name: k for k, name in enumerate(industries)}
    pub = _to_days(table.column("publish_time").to_pylist())
    day = np.searchsorted(dates, pub, side="left")
    raw_ind = table.column("industries").to_pylist()
    imp = np.asarray(table.column("importance").to_pylist(), dtype=np.float64)
    if not np.all(np.isfinite(imp)) or np.any((imp < 0) | (imp > 10)):
        raise InputError(f"news file {str(path)!r}: importance must be finite and in [0, 10]")
    ids, titles, contents, inds, days, imps = [], [], [], [], [], []
    for row, (nid, title, content, ind, d) in enumerate(
        zip(table.column("news_id").to_pylist(), table.column("title").to_pylist(),
            table.column("content").to_pylist(), raw_ind, day)
    ):
        names = ind if isinstance(ind, list) else [s for s in str(ind or "").split(";")]
        names = [s.strip() for s in names if s and s.strip()]
        unknown = [s for s in names if s not in index]
        if unknown:
            raise InputError(
                f"news file {str(path)!r} row {row}: unknown industry {unknown[0]!r}; "
                f"known: {', '.join(industries)}"
            )
        if d >= len(dates) or not names:
            continue
        ids.append(str(nid))
        titles.append(str(title or ""))
        contents.append(str(content or ""))
        inds.append(tuple(sorted({index[s] for s in names})))
        days.append(int(d))
        imps.append(imp[row])
    order = np.argsort(np.asarray(days, dtype=np.int64), kind="stable")
    pick = lambda xs: [xs[k] for k in order]  # noqa: E731
    return NewsTable(pick(ids), np.asarray(days, dtype=np.int64)[order], pick(titles), pick(contents),
                     pick(inds), np.asarray(imps)[order])


def load_market(news_path: str | Path, prices_path: str | Path,
                horizons: Sequence[int] = DEFAULT_HORIZONS) -> Market:
    """Load a real market from the two documented tables."""
    industries, dates, close, bench = load_prices(prices_path)
    news = load_news(news_path, industries, dates)
    return Market(industries, dates, close, bench, news, tuple(int(h) for h in horizons))


def save_market(market: Market, news_path: str | Path, prices_path: str | Path) -> None:
    """Write a market in the documented schema (CSV or Parquet by extension)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    n, t = market.close.shape
    prices = pa.table({
        "date": [str(d) for d in np.repeat(market.dates, n)],
        "industry": [market.industries[i] for _ in range(t) for i in range(n)],
        "close": market.close.T.reshape(-1),
        "benchmark_close": np.repeat(market.benchmark, n),
    })
    nw = market.news
    csv_news = str(news_path).lower().endswith(".csv")
    inds = [[market.industries[i] for i in ind] for ind in nw.industries]
    news = pa.table({
        "news_id": nw.news_id,
        "publish_time": [str(market.dates[d]) for d in nw.day],
        "title": nw.title,
        "content": nw.content,
        "industries": [";".join(x) for x in inds] if csv_news else inds,
        "importance": nw.importance,
    })
    for table, path in ((prices, prices_path), (news, news_path)):
        if str(path).lower().endswith(".csv"):
            pacsv.write_csv(table, path)
        else:
            pq.write_table(table, path)
