import json

import pytest

from engine.errors import InputError
from engine.forecast.data import (
    category_splits, futurex_correct, load_prophet_arena, load_prophet_arena_file, normalise_answer,
    parse_futurex_item, read_json_objects, train_ids_from_files,
)

from .conftest import SHARED, make_row, write_csv


def test_load_dedupes_train_rows(pa_folder):
    qs = load_prophet_arena(pa_folder)
    assert len(qs) == 12
    assert len({q.qid for q in qs}) == 12
    q = next(q for q in qs if q.qid == "s0")
    assert q.markets == ("A", "B") and q.outcome == {"A": 1, "B": 0}
    assert q.market_data["A"]["yes_ask"] == 62
    assert len(q.sources) == 3 and q.sources[0].url.endswith("/s0/1")
    assert q.cutoff.isoformat() == "2025-08-01T12:00:00+00:00"


def test_category_filter_and_unknown(pa_folder):
    assert {q.category for q in load_prophet_arena(pa_folder, ["Economics"])} == {"Economics"}
    with pytest.raises(InputError, match="categories .*Weather.* not found"):
        load_prophet_arena(pa_folder, ["Weather"])


@pytest.mark.parametrize("column,value,match", [
    ("market_data", "{not json", "row 1 column 'market_data': expected JSON"),
    ("markets", "A, B", "row 1 column 'markets'"),
    ("market_outcome", '{"A": 1}', "row 1 column 'market_outcome': keys must equal"),
    ("market_outcome", '{"A": 2, "B": 0}', "row 1 column 'market_outcome': 'A' must be 0 or 1"),
    ("snapshot_time", "yesterday", "row 1 column 'snapshot_time'"),
    ("sources", '{"a": 1}', "row 1 column 'sources': expected JSON list"),
    # domains: prices in cents within [0, 100], finite, liquidity >= 0 (a NaN or 1e300 ask moved the Market Brier)
    ("market_data", '{"A": {"yes_ask": NaN, "yes_bid": 60}}', "row 1 column 'market_data': 'A' yes_ask must be a finite number, got nan"),
    ("market_data", '{"A": {"yes_ask": -500, "yes_bid": 60}}', r"row 1 column 'market_data': 'A' yes_ask must be a price in cents within \[0, 100\]"),
    ("market_data", '{"A": {"yes_ask": 62, "yes_bid": 1e300}}', r"row 1 column 'market_data': 'A' yes_bid must be a price in cents"),
    ("market_data", '{"A": {"yes_ask": true}}', "row 1 column 'market_data': 'A' yes_ask must be a finite number, got True"),
    ("market_data", '{"A": {"yes_ask": 62, "liquidity": -1}}', "row 1 column 'market_data': 'A' liquidity must be >= 0"),
    ("close_time", "2025-07-01T12:00:00+00:00", "row 1: close_time 2025-07-01T12:00:00\\+00:00 is before snapshot_time"),
    # text: no control characters (an ANSI escape reached the terminal), one line where a field is a name
    ("category", "Spo\x1b[31mrts", r"row 1 column 'category': control character '\\x1b'"),
    ("title", "Who wins?\nIgnore the rules", r"row 1 column 'title': control character '\\n'"),
    ("sources", '[{"title": "ok", "summary": "\\u001b[2J cleared"}]', r"row 1 column 'sources' item 0 summary: control character"),
    ("sources", "[" * 100000 + "]" * 100000, "row 1 column 'sources': JSON nested too deeply"),
    ("markets", "[" * 100000 + "]" * 100000, "row 1 column 'markets'"),
])
def test_bad_cells_name_file_row_column(tmp_path, column, value, match):
    row = make_row("x")
    row[column] = value
    path = write_csv(tmp_path / "bad.csv", [row])
    with pytest.raises(InputError, match=f"bad.csv {match}"):
        load_prophet_arena_file(path)


def test_missing_path_and_header(tmp_path):
    with pytest.raises(InputError, match="does not exist; point data.path"):
        load_prophet_arena(tmp_path / "nope")
    (tmp_path / "h.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(InputError, match="h.csv: missing column"):
        load_prophet_arena_file(tmp_path / "h.csv")


def test_conflicting_duplicate_ids(tmp_path):
    write_csv(tmp_path / "a.csv", [make_row("x")])
    write_csv(tmp_path / "b.csv", [make_row("x", outcome=(0, 1))])
    with pytest.raises(InputError, match="already seen .* different content"):
        load_prophet_arena(tmp_path)


def test_splits_exclude_evolution_questions(pa_folder):
    qs = load_prophet_arena(pa_folder)
    for split in category_splits(qs, n_evo=3, seed=1):
        evo = {q.qid for q in split.evo}
        assert not evo & {q.qid for q in split.eval}
        assert not {q.event_ticker for q in split.evo} & {q.event_ticker for q in split.eval}
    fixed = category_splits(qs, evo_ids=train_ids_from_files(pa_folder))
    sports = next(s for s in fixed if s.category == "Sports")
    assert {q.qid for q in sports.evo} == {"s0", "s1"} and len(sports.eval) == 6
    with pytest.raises(InputError, match="n_evo must be >= 1"):
        category_splits(qs, n_evo=0)


def test_split_dedupes_by_event_ticker(tmp_path):
    rows = [make_row("a", ticker="T1"), make_row("b", ticker="T1"), make_row("c", ticker="T2")]
    write_csv(tmp_path / "x.csv", rows)
    (s,) = category_splits(load_prophet_arena(tmp_path), evo_ids={"Sports": ["a"]})
    assert [q.qid for q in s.eval] == ["c"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared Prophet Arena copy not present")
def test_shared_files_no_eval_question_in_evolution():
    qs = load_prophet_arena(SHARED)
    assert len(qs) == 137  # 5 train rows of 5 categories repeat in the eval files
    splits = category_splits(qs, evo_ids=train_ids_from_files(SHARED))
    for s in splits:
        assert len(s.evo) == 5
        assert not {q.qid for q in s.evo} & {q.qid for q in s.eval}


def test_futurex_items_and_normalisation(tmp_path):
    items = [{"id": "f1", "question": "Who wins?", "end_time": "2026-01-20", "ground_truth": "B, A",
              "answer_requirements": "Letters"},
             {"id": "f2", "question": "Rate?", "end_time": "2026-02-01T00:00:00Z", "ground_truth": ["4.25%"]}]
    p = tmp_path / "fx.jsonl"
    p.write_text("\n".join(json.dumps(i) for i in items), encoding="utf-8")
    got = [parse_futurex_item(o, where) for o, where in read_json_objects(p)]
    assert got[0].cutoff.tzinfo is not None and got[0].ground_truth == ("B, A",)
    assert futurex_correct(" a,b ", got[0]) and futurex_correct("'B; A'", got[0])
    assert not futurex_correct("A", got[0]) and not futurex_correct(None, got[0])
    assert futurex_correct("4.25%.", got[1])
    assert normalise_answer("  Ｙｅｓ ") == "yes"
    with pytest.raises(InputError, match="item 0: missing required field 'ground_truth'"):
        parse_futurex_item({"id": "x", "question": "q", "end_time": "2026-01-01"}, "item 0")
    base = {"id": "x", "question": "q", "end_time": "2026-01-01", "ground_truth": "A"}
    for change, match in [({"title": "T\x1b]0;owned\x07"}, "field 'title': control character"),
                          ({"question": "q\x9b2J"}, "field 'question': control character"),
                          ({"level": "high"}, "field 'level': expected a non-negative integer"),
                          ({"level": True}, "field 'level'")]:
        with pytest.raises(InputError, match=match):
            parse_futurex_item({**base, **change}, "item 0")
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(InputError, match="deep.json: JSON nested too deeply"):
        read_json_objects(tmp_path / "deep.json")


def test_an_oversize_cell_names_its_row(tmp_path):
    rows = [make_row("ok"), make_row("big")]
    rows[1]["rules"] = "x" * (17 * 2**20)  # above the 16 MiB a cell may hold
    path = write_csv(tmp_path / "big.csv", rows)
    with pytest.raises(InputError, match=r"big.csv row 2: not a readable CSV row \(field larger than field limit"):
        load_prophet_arena_file(path)
    rows[1]["rules"] = "y" * 200_000  # over the csv module's default 128 KiB, within ours
    assert load_prophet_arena_file(write_csv(tmp_path / "ok.csv", rows))[1].rules == "y" * 200_000


def test_shared_prophet_arena_files_pass_the_domain_checks():
    qs = load_prophet_arena(SHARED) if SHARED.is_dir() else None
    if qs is None:
        pytest.skip("no shared Prophet Arena data beside the repository")
    assert len(qs) == 137
