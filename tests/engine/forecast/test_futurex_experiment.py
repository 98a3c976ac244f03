"""FutureX runner: items and documents files, scoring, leak-free split, cutoff, end-to-end simulated run."""

import json
import math
import random
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.cli import main as toe_main
from engine.config import load_toml
from engine.errors import ConfigError, InputError
from engine.forecast.agent import AgentConfig
from engine.forecast.evolution import GuideTree
from engine.forecast.futurex_config import load_futurex_config
from engine.forecast.futurex_corpus import load_futurex_documents
from engine.forecast.futurex_task import FutureXAccuracy, FutureXAgent
from engine.tasks import run
from engine.forecast.futurex_metrics import accuracy_row, first_option_answer, reference_rows, uniform_expected
from engine.forecast.futurex_tasks import (
    EXAMPLE_DOCS, EXAMPLE_ITEMS, QTYPES, answer_letters, futurex_split, is_correct, load_futurex_tasks, parse_task,
)
from engine.llm.base import Completion, Response
from engine.tasks import RunOptions

from .conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tasks():
    return load_futurex_tasks(EXAMPLE_ITEMS)


@pytest.fixture(scope="module")
def corpus():
    return load_futurex_documents(EXAMPLE_DOCS)


def _write(path: Path, objs) -> Path:
    path.write_text("\n".join(json.dumps(o) for o in objs) + "\n", encoding="utf-8")
    return path


def _item(**kw):
    base = {"id": "q1", "question": "Who wins?\nA. Red\nB. Blue", "end_time": "2026-01-10T00:00:00Z",
            "ground_truth": "B", "answer_requirements": "Choose exactly one option."}
    return {**base, **kw}


# --------------------------------------------------------------------------- shipped example


def test_example_files_cover_every_type_and_both_sides_of_each_cutoff(tasks, corpus):
    assert 12 <= len(tasks) <= 20 and len({t.qid for t in tasks}) == len(tasks)
    assert {t.qtype for t in tasks} == {"single_choice", "multi_choice", "ranking", "numerical"}
    raw = [json.loads(line) for line in EXAMPLE_ITEMS.read_text().splitlines()]
    assert all("fictional" in o["note"] and "not FutureX benchmark data" in o["note"] for o in raw)
    for t in tasks:  # the cutoff filter matters for every question: linked documents before AND after it
        linked = [corpus.docs[i] for i in corpus.linked[t.qid]]
        assert any(d.available_at <= t.cutoff for d in linked), t.qid
        assert any(d.available_at > t.cutoff for d in linked), t.qid


def test_type_inferred_without_type_field_matches_the_labels(tasks):
    for line in EXAMPLE_ITEMS.read_text().splitlines():
        obj = json.loads(line)
        labelled = parse_task(obj, "x").qtype
        obj.pop("type")
        assert parse_task(obj, "x").qtype == labelled, obj["id"]
    # the upstream field name "prompt" is accepted for "question"
    t = parse_task({"id": "p", "prompt": "Which?\nA. x\nB. y", "end_time": "2026-01-01", "ground_truth": "A"}, "x")
    assert t.question.startswith("Which?") and t.qtype == "single_choice" and t.options == ("x", "y")


# --------------------------------------------------------------------------- scoring


def test_answer_letters_forms():
    opts = ("Green Alliance", "Civic Union", "Harbour Party")
    assert answer_letters("b", opts) == ["B"] and answer_letters("\\textbf{B}", opts) == ["B"]
    assert answer_letters("B. Civic Union", opts) == ["B"]
    assert answer_letters("\\text{Civic Union}", opts) == ["B"]
    assert answer_letters("C > A > B", opts) == ["C", "A", "B"]
    assert answer_letters("A, C and B", opts) == ["A", "C", "B"]
    assert answer_letters("A C", opts) == ["A", "C"]
    assert answer_letters("D", opts) is None and answer_letters("Blue Party", opts) is None
    assert answer_letters(None, opts) is None and answer_letters("  ", opts) is None


def test_accuracy_equals_independent_computation(tasks):
    by_id = {t.qid: t for t in tasks}
    # fixed answers and their correctness worked out by hand from the example's ground truths
    fixed = {
        "fx-ex-01": ("b", True), "fx-ex-02": ("Postponed or cancelled", True), "fx-ex-03": ("B", False),
        "fx-ex-04": ("(A)", True), "fx-ex-06": ("D, A", True), "fx-ex-07": ("A", False),
        "fx-ex-08": ("B, C", False), "fx-ex-10": ("C > A > B", True), "fx-ex-11": ("A, B, C", False),
        "fx-ex-12": ("B, A, D, C", True), "fx-ex-13": ("2.10%", True), "fx-ex-14": ("3 goals", True),
        "fx-ex-15": ("150", False), "fx-ex-16": (None, False),
    }
    chosen = [by_id[q] for q in fixed]
    got = [is_correct(a, by_id[q]) for q, (a, _) in fixed.items()]
    assert got == [ok for _, ok in fixed.values()]
    row = accuracy_row("m", chosen, [float(g) for g in got], failed=1)
    for qtype in QTYPES:
        sel = [ok for q, (_, ok) in fixed.items() if by_id[q].qtype == qtype]
        if sel:
            assert row.accuracy(qtype) == pytest.approx(sum(sel) / len(sel))
        else:
            assert math.isnan(row.accuracy(qtype))
    assert row.accuracy() == pytest.approx(8 / 14) and row.failed == 1
    # ranking order matters (a sorted comparison would call this right); tolerance applies to numbers only
    assert not is_correct("A, B, C", by_id["fx-ex-10"])
    from engine.forecast.agent import Episode

    rank = by_id["fx-ex-10"]
    right = rank.ground_truth[0]
    assert Episode(rank, answer=right).correct()  # the agent's episodes score rankings the same way
    assert not Episode(rank, answer="A, B, C").correct()
    assert is_correct("150", by_id["fx-ex-15"], rel_tol=0.02) and not is_correct("152", by_id["fx-ex-15"], 0.02)
    with pytest.raises(InputError, match="2 scores for 3 tasks"):
        accuracy_row("m", chosen[:3], [1.0, 0.0])


def test_reference_rows(tasks):
    uni, first = reference_rows(tasks)
    t1 = next(t for t in tasks if t.qid == "fx-ex-01")  # 4 options
    t6 = next(t for t in tasks if t.qid == "fx-ex-06")  # 4 options, multi
    t12 = next(t for t in tasks if t.qid == "fx-ex-12")  # rank 4
    assert uniform_expected(t1) == 0.25 and uniform_expected(t6) == pytest.approx(1 / 15)
    assert uniform_expected(t12) == pytest.approx(1 / 24)
    assert first_option_answer(t12) == "A, B, C, D" and first_option_answer(
        next(t for t in tasks if t.qtype == "numerical")) is None
    assert uni.accuracy("numerical") == 0.0 and first.accuracy("numerical") == 0.0
    want = sum(t.ground_truth == ("A",) for t in tasks if t.qtype == "single_choice")
    assert first.correct["single_choice"] == want


# --------------------------------------------------------------------------- split and cutoff


def test_split_is_leak_free(tasks):
    ids = {t.qid for t in tasks}
    for seed in range(25):
        evo, ev = futurex_split(tasks, 4, seed)
        e, v = {t.qid for t in evo}, {t.qid for t in ev}
        assert len(e) == 4 and not e & v and e | v == ids
    assert futurex_split(tasks, 4, 3) == futurex_split(list(reversed(tasks)), 4, 3)  # file order is irrelevant
    # a repeated question under another id never reaches evaluation when its twin is in the pool
    twin = parse_task(_item(id="twin", question=tasks[0].question + "  ", ground_truth="B"), "x")
    for seed in range(25):
        evo, ev = futurex_split(list(tasks) + [twin], 5, seed)
        evo_text = {" ".join(t.question.split()).lower() for t in evo}
        assert not [t for t in ev if " ".join(t.question.split()).lower() in evo_text]
    with pytest.raises(InputError, match="data.n_evo = 16 leaves no evaluation items"):
        futurex_split(tasks, 16)


def test_cutoff_filter_never_returns_a_later_document(tasks, corpus):
    rng = random.Random(0)
    times = sorted({d.available_at for d in corpus.docs})
    cutoffs = [t.cutoff for t in tasks] + times + [x - timedelta(seconds=1) for x in times]
    queries = [t.question for t in tasks] + [d.content for d in corpus.docs]
    for cutoff in cutoffs:
        for q in rng.sample(queries, 4):
            hits = corpus.search(q, cutoff, k=len(corpus.docs))
            assert all(h.available_at <= cutoff for h in hits)
            assert len(hits) == sum(d.available_at <= cutoff for d in corpus.docs)
    for t in tasks:
        docs = corpus.question_documents(t.qid, t.cutoff)
        assert docs and all(d.available_at <= t.cutoff for d in docs)


class _Capture:
    name, model = "capture", "capture"

    def __init__(self):
        self.prompts = []

    def generate(self, requests):
        self.prompts += [r.messages[1]["content"] for r in requests]  # the task prompt
        return [Response((Completion("\\boxed{B}", 3),), 10, 0.0, "capture", "capture") for _ in requests]


def test_full_text_and_rag_prompts_hold_only_documents_before_the_cutoff(tasks, corpus, tmp_path):
    t = next(x for x in tasks if x.qid == "fx-ex-01")
    for mode in ("full_text", "rag"):
        llm = _Capture()
        (ep,) = FutureXAgent(llm, corpus, AgentConfig(mode=mode, top_k=8), tmp_path / mode).run([t])
        prompt = llm.prompts[0]
        assert "December poll of Lakemont voters" in prompt and "Evidence:" in prompt
        assert "Final count" not in prompt and "Looking back on the quarter" not in prompt
        assert prompt.index("Evidence:") < prompt.index("Final answer requirements:")
        assert ep.answer == "B" and FutureXAccuracy(corpus).correct(ep)


def test_accuracy_metric_ranks_higher_first():
    tree = GuideTree(lower_is_better=False)
    tree.add("g1", None, 0.25)
    tree.add("g2", "g1", 0.75)
    assert tree.best() == "g2"
    picks = [tree.sample_parent(random.Random(i)) for i in range(400)]
    assert picks.count("g2") > picks.count("g1")  # eq. 5: rank 1 (the higher accuracy) gets 2/3
    m = FutureXAccuracy(None)
    assert m.better(0.6, 0.5) and not m.better(0.5, 0.5) and m.sort_key(0.9) < m.sort_key(0.1)


# --------------------------------------------------------------------------- malformed input


def test_malformed_items_and_documents_name_the_problem(tmp_path):
    p = tmp_path / "items.jsonl"
    with pytest.raises(InputError, match="items.jsonl line 1: missing required field 'ground_truth'"):
        load_futurex_tasks(_write(p, [{k: v for k, v in _item().items() if k != "ground_truth"}]))
    with pytest.raises(InputError, match="line 1 field 'type': expected one of"):
        load_futurex_tasks(_write(p, [_item(type="essay")]))
    with pytest.raises(InputError, match=r"'ground_truth': 'C' is not a valid single_choice answer over options \['A', 'B'\]"):
        load_futurex_tasks(_write(p, [_item(ground_truth="C", type="single_choice")]))
    with pytest.raises(InputError, match="a ranking item needs options"):
        load_futurex_tasks(_write(p, [_item(question="Rank them", type="ranking", ground_truth="A, B")]))
    with pytest.raises(InputError, match="numerical item needs a number, got 'soon'"):
        load_futurex_tasks(_write(p, [_item(type="numerical", ground_truth="soon")]))
    with pytest.raises(InputError, match="line 2: id 'q1' already used at items.jsonl line 1"):
        load_futurex_tasks(_write(p, [_item(), _item()]))
    with pytest.raises(InputError, match="field 'options': expected a list of at least 2"):
        load_futurex_tasks(_write(p, [_item(options=["only"])]))
    p.write_text(json.dumps(_item()) + "\n{not json\n")
    with pytest.raises(InputError, match="items.jsonl line 2: not valid JSON"):
        load_futurex_tasks(p)
    with pytest.raises(InputError, match="end_time': expected an ISO-8601 timestamp"):
        load_futurex_tasks(_write(p, [_item(end_time="next week")]))
    d = tmp_path / "docs.jsonl"
    with pytest.raises(InputError, match="docs.jsonl line 1: missing required field 'available_at'"):
        load_futurex_documents(_write(d, [{"text": "x"}]))
    with pytest.raises(InputError, match="missing required field 'text'"):
        load_futurex_documents(_write(d, [{"available_at": "2026-01-01"}]))
    with pytest.raises(InputError, match="field 'question_ids': expected a list of question ids"):
        load_futurex_documents(_write(d, [{"text": "x", "available_at": "2026-01-01", "question_ids": "q1"}]))
    with pytest.raises(InputError, match="FutureX file .* does not exist"):
        load_futurex_tasks(tmp_path / "nope.jsonl")


def _config(**over):
    cfg = {"task": "futurex", "title": "t", "data": {"path": "example", "documents": "example", "n_evo": 4},
           "run": {"methods": ["foredreamer", "full_text", "rag"]}, "agent": {"top_k": 2},
           "llm": {"backend": "simulated"}}
    for section, values in over.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    return cfg


def test_malformed_config_names_the_problem(tmp_path):
    opts = RunOptions(config_path=tmp_path / "x.toml")
    with pytest.raises(ConfigError, match=r"futurex task needs a \[data\] table"):
        run({"task": "futurex"}, opts)
    with pytest.raises(ConfigError, match="data.path .*nope.jsonl.* is not a file .* \"example\""):
        run(_config(data={"path": str(tmp_path / "nope.jsonl")}), opts)
    with pytest.raises(ConfigError, match="data.documents .* is not a file"):
        run(_config(data={"documents": str(tmp_path / "d.jsonl")}), opts)
    with pytest.raises(ConfigError, match="run.methods must be a non-empty subset"):
        load_futurex_config(_config(run={"methods": ["oracle"]}))
    with pytest.raises(ConfigError, match="data.numeric_rel_tol must be a finite number >= 0, got -0.1"):
        load_futurex_config(_config(data={"numeric_rel_tol": -0.1}))
    with pytest.raises(ConfigError, match="unknown key.*'n_eval'.*valid keys"):
        load_futurex_config(_config(data={"n_eval": 3}))
    with pytest.raises(InputError, match="data.n_evo = 20 leaves no evaluation items"):
        run(_config(data={"n_evo": 20}), opts)


def test_shipped_config_parses():
    cfg = load_futurex_config(load_toml(ROOT / "configs" / "futurex.toml"))
    assert cfg.data.path == "example" and cfg.run.max_questions >= 1 and cfg.agent.turns == 2


# --------------------------------------------------------------------------- end to end (simulated)


def _episodes(out, method) -> list[dict]:
    """The method's records in ``episodes.parquet``, JSON columns decoded."""
    rows = [r for r in pq.read_table(out / "episodes.parquet").to_pylist() if r["method"] == method]
    for r in rows:
        for k in ("searches", "memories", "written"):
            if r.get(k) is not None:
                r[k] = json.loads(r[k])
    return rows


@needs_bwrap
def test_simulated_run_end_to_end(tasks, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(_config(), RunOptions(config_path=tmp_path / "x.toml", out=out)) == 0
    text = capsys.readouterr().out
    assert "FICTIONAL format example" in text and "| Full Text [simulated] |" in text
    assert "| ForeDreamer (seed guide, empty bank) [simulated] |" in text and "| RAG [simulated] |" in text
    assert "Search items after their question's cutoff: 0" in text
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "table.md").read_text().startswith("# ForeDreamer on FutureX: SIMULATED forecasting harness")
    meta = summary["meta"]
    evo, ev = set(meta["split"]["evo"]), set(meta["split"]["eval"])
    assert len(evo) == 4 and not evo & ev and evo | ev == {t.qid for t in tasks}
    assert meta["late_items"] == 0
    by_id = {t.qid: t for t in tasks}
    rows = {r["method"]: r for r in summary["methods"]}
    for method, name in (("foredreamer", "ForeDreamer (seed guide, empty bank) [simulated]"),
                         ("full_text", "Full Text [simulated]"), ("rag", "RAG [simulated]")):
        det = _episodes(out, method)
        assert {d["qid"] for d in det} == ev  # every evaluation item, no pool item
        hits = [is_correct(d["answer"], by_id[d["qid"]]) for d in det]
        assert [d["correct"] for d in det] == hits
        row = rows[name]
        assert sum(row["n"].values()) == len(ev)
        assert sum(row["correct"].values()) / len(ev) == pytest.approx(sum(hits) / len(hits))
    # ForeDreamer searched (turn 1) and every searched item traces to a folder with its raw_data.json
    fd = _episodes(out, "foredreamer")
    assert all(d["searches"] and d["memories"] for d in fd)


class _LeakyProvider:
    """A web-search stand-in that ignores the date filter: returns every example document, late ones first."""

    def __init__(self):
        docs = load_futurex_documents(EXAMPLE_DOCS).docs
        self.docs = sorted(docs, key=lambda d: d.available_at, reverse=True)
        self.calls = 0

    def search(self, query, cutoff, k):
        self.calls += 1
        return self.docs[: k + 30]


@needs_bwrap
def test_pluggable_search_provider_is_cutoff_guarded(tmp_path, capsys, monkeypatch):
    import sys
    import types

    mod = types.ModuleType("fx_test_provider")
    made = []
    mod.make = lambda: made.append(_LeakyProvider()) or made[-1]
    monkeypatch.setitem(sys.modules, "fx_test_provider", mod)
    cfg = _config(data={"search_provider": "fx_test_provider:make"}, run={"methods": ["foredreamer", "rag"],
                                                                         "max_questions": 3})
    assert run(cfg, RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "o")) == 0
    assert "fx_test_provider:make behind CutoffGuard" in capsys.readouterr().out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert made[0].calls > 0 and summary["meta"]["late_items"] == 0
    assert all(d["searches"] for d in _episodes(tmp_path / "o", "foredreamer"))
    with pytest.raises(ConfigError, match="must look like 'package.module:factory', got 'nomodule'"):
        run(_config(data={"search_provider": "nomodule"}), RunOptions(config_path=tmp_path / "x.toml"))
    with pytest.raises(ConfigError, match="'fx_test_provider:nothing' cannot be loaded"):
        run(_config(data={"search_provider": "fx_test_provider:nothing"}), RunOptions(config_path=tmp_path / "x.toml"))


def test_cli_runs_the_futurex_task(tmp_path, capsys):  # full_text only: no MemTool, no sandbox needed
    assert toe_main(["run", str(ROOT / "configs" / "futurex.toml"), "--out", str(tmp_path / "o"),
                     "--set", "llm.backend=simulated", "--set", "run.methods=[\"full_text\"]", "--no-progress"]) == 0
    assert "| Full Text [simulated] |" in capsys.readouterr().out


def test_memory_baseline_rows_on_futurex(tasks, tmp_path, capsys):
    cfg = _config(run={"methods": ["memrl", "flex", "rag"], "max_questions": 4}, memory={"top_k": 3})
    assert run(cfg, RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "o")) == 0
    text = capsys.readouterr().out
    assert "| MemRL (evidence) [simulated] |" in text and "| FLEX (evidence) [simulated] |" in text
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["meta"]["late_items"] == 0
    by_id = {t.qid: t for t in tasks}
    for method in ("memrl", "flex"):
        det = _episodes(tmp_path / "o", method)
        assert len(det) == 4 and all(d["written"] for d in det)  # evidence went through the baseline's memory
        assert [d["correct"] for d in det] == [is_correct(d["answer"], by_id[d["qid"]]) for d in det]
    with pytest.raises(ConfigError, match="memory.top_k must be an integer >= 1, got 0"):
        run(_config(run={"methods": ["memrl"]}, memory={"top_k": 0}), RunOptions(config_path=tmp_path / "x"))
    with pytest.raises(ConfigError, match=r"\[memory_baselines\] top_k: set by \[memory\]"):
        run(_config(run={"methods": ["memrl"]}, memory_baselines={"top_k": 3}), RunOptions(config_path=tmp_path / "x"))


@needs_bwrap
@pytest.mark.slow
def test_simulated_run_with_evolution_ranks_by_accuracy(tmp_path, capsys):
    cfg = _config(run={"methods": ["foredreamer"], "evolve": True, "max_questions": 2},
                  evolution={"iterations": 2, "top_k": 2, "items_per_example": 1}, agent={"top_k": 1})
    assert run(cfg, RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "o")) == 0
    text = capsys.readouterr().out
    assert "ForeDreamer evolved, top-1 by validation [simulated]" in text
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    evo = summary["meta"]["evolution"][""]
    assert [e["track"] for e in evo["log"]] == ["procedural", "textual"]
    vals = [t[2] for t in evo["top"]]
    assert vals == sorted(vals, reverse=True)  # accuracy: best (highest) validation first


# --------------------------------------------------------------------------- the real embedded model


@pytest.mark.local_model
@pytest.mark.slow
def test_local_model_answers_one_futurex_item(tasks, corpus, tmp_path):
    pytest.importorskip("xllamacpp")
    from engine.llm.base import MeteredBackend
    from engine.llm.config import load_llm_config
    from engine.llm.factory import make_backend

    t = next(x for x in tasks if x.qid == "fx-ex-01")
    llm = MeteredBackend(make_backend(load_llm_config({"backend": "local", "local": {"context": 4096, "parallel": 1}})))
    try:
        agent = FutureXAgent(llm, corpus, AgentConfig(mode="full_text", turns=1, context_chars=400, max_tokens=48,
                                                      answer_retries=0), tmp_path)
        (ep,) = agent.run([t])
    finally:
        llm.backend.close()
    assert ep.done and llm.meter.total.calls == 1 and llm.meter.total.completion_tokens > 0
    assert ep.raw_answer == ep.messages[-1]["content"]
    assert (ep.answer is None) == ep.failed  # a boxed answer is scored, anything else is counted failed
    assert isinstance(is_correct(ep.answer, t), bool)
