import csv
import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from engine.forecast.data import PA_COLUMNS

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "forecast" / "prophet_arena"

from engine.forecast.sandbox import sandbox_available  # noqa: E402

_SANDBOX_OK, _SANDBOX_WHY = sandbox_available()
needs_bwrap = pytest.mark.skipif(not _SANDBOX_OK, reason=f"bubblewrap sandbox unavailable: {_SANDBOX_WHY}")


def _close_after(iso: str, hours: float) -> str:
    """A close time ``hours`` after the snapshot (a question closes after its snapshot; the loader checks it)."""
    return (datetime.fromisoformat(iso) + timedelta(hours=hours)).isoformat()


def make_row(qid, category="Sports", snapshot="2025-08-01T12:00:00+00:00", markets=("A", "B"), outcome=(1, 0),
             quotes=((60, 62), (36, 40)), ticker=None, sources=None, close_hours=12):
    md = {m: {"yes_bid": b, "yes_ask": a, "no_bid": 100 - a, "no_ask": 100 - b, "liquidity": 1000.0}
          for m, (b, a) in zip(markets, quotes) if b is not None}
    if sources is None:
        sources = [{"url": f"https://example.org/{qid}/{i}", "title": f"{qid} report {i}", "ranking": i,
                    "summary": f"Team A looks strong before the {qid} match. Injury news for B. Sentence {i}.",
                    "source_id": f"{qid}-{i}"} for i in range(1, 4)]
    return {
        "submission_id": qid, "event_ticker": ticker or f"EV-{qid}", "title": f"Who wins match {qid}?",
        "snapshot_time": snapshot, "close_time": _close_after(snapshot, close_hours), "market_data": json.dumps(md),
        "market_outcome": json.dumps(dict(zip(markets, outcome))), "category": category, "markets": repr(list(markets)),
        "augmented_title": "", "rules": "Resolves Yes for the winner.", "sources": json.dumps(sources),
    }


def write_csv(path: Path, rows) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(PA_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


@pytest.fixture
def pa_folder(tmp_path):
    """Two categories; the train file repeats two eval rows (as upstream)."""
    folder = tmp_path / "pa"
    folder.mkdir()
    rows = [make_row(f"s{i}", snapshot=f"2025-08-{i + 1:02d}T12:00:00+00:00") for i in range(8)]
    rows += [make_row(f"e{i}", category="Economics", markets=("Above 2%", "Above 3%"), outcome=(1, 0),
                      quotes=((80, 82), (10, 12)), snapshot=f"2025-09-{i + 1:02d}T12:00:00+00:00") for i in range(4)]
    write_csv(folder / "subset_data_Sports_8.csv", rows[:8])
    write_csv(folder / "subset_data_Economics_4.csv", rows[8:])
    write_csv(folder / "subset_data_Sports_train_2.csv", rows[:2])
    return folder


@pytest.fixture(scope="session")
def _seeded_template(tmp_path_factory):
    from engine.forecast.memtools import ProceduralStore
    from engine.forecast.seed_tools import DEFAULT_GUIDE, seed_tool_sources

    if not _SANDBOX_OK:
        pytest.skip(f"bubblewrap sandbox unavailable: {_SANDBOX_WHY}")
    root = tmp_path_factory.mktemp("seeded") / "proc"
    ProceduralStore(root).seed(seed_tool_sources(), DEFAULT_GUIDE)
    return root


@pytest.fixture
def seeded_store_dir(_seeded_template, tmp_path):
    """A fresh copy of a procedural store holding the seed tools and guide (seeded once per session)."""
    dst = tmp_path / "proc"
    shutil.copytree(_seeded_template, dst)
    return dst
