from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from engine.embed import EmbedConfig, make_embedder
from engine.errors import InputError
from engine.forecast.data import load_prophet_arena
from engine.forecast.search import CorpusSearch, CutoffGuard, SearchResult, corpus_from_questions

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
WORDS = ["inflation", "tariff", "election", "storm", "earnings", "goal", "rate", "vote"]


def _corpus(n, seed, embed=False):
    rng = np.random.default_rng(seed)
    docs = [SearchResult(i, f"doc {i}", f"https://x/{i}", " ".join(rng.choice(WORDS, 6)),
                         T0 + timedelta(days=int(rng.integers(0, 100)))) for i in range(n)]
    return CorpusSearch(docs, make_embedder(EmbedConfig()) if embed else None)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), day=st.integers(-5, 105), k=st.integers(1, 12))
def test_never_returns_document_after_cutoff(seed, day, k):
    cs = _corpus(40, seed)
    cutoff = T0 + timedelta(days=day)
    hits = cs.search("inflation rate vote", cutoff, k)
    assert all(h.available_at <= cutoff for h in hits)
    n_avail = sum(d.available_at <= cutoff for d in cs.docs)
    assert len(hits) == min(k, n_avail)


def test_hybrid_with_embeddings_respects_cutoff():
    cs = _corpus(60, 3, embed=True)
    for day in (0, 10, 50, 99):
        cutoff = T0 + timedelta(days=day)
        hits = cs.search("storm earnings", cutoff, 8)
        assert all(h.available_at <= cutoff for h in hits)


def test_question_sources_do_not_leak_into_earlier_questions(pa_folder):
    qs = sorted(load_prophet_arena(pa_folder), key=lambda q: q.snapshot_time)
    cs = corpus_from_questions(qs)
    first, last = qs[0], qs[-1]
    hits = cs.search(last.title, first.cutoff, 50)
    assert {h.origin for h in hits} <= {q.qid for q in qs if q.snapshot_time <= first.cutoff}
    assert any(h.origin == last.qid for h in cs.search(last.title, last.cutoff, 50))


def test_guard_drops_late_and_undated_results():
    class Leaky:
        def search(self, query, cutoff, k):
            return [SearchResult(0, "old", "u0", "c", T0), SearchResult(1, "new", "u1", "c", T0 + timedelta(days=9)),
                    SearchResult(2, "undated", "u2", "c", None)]

    g = CutoffGuard(Leaky())
    assert [h.title for h in g.search("q", T0 + timedelta(days=1), 4)] == ["old"] and g.dropped == 2


def test_bad_inputs():
    with pytest.raises(InputError, match="at least one document"):
        CorpusSearch([])
    with pytest.raises(InputError, match="timezone-aware"):
        CorpusSearch([SearchResult(0, "t", "u", "c", datetime(2025, 1, 1))])
    cs = _corpus(3, 0)
    with pytest.raises(InputError, match="k must be >= 1"):
        cs.search("q", T0, 0)


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(WORDS + ["a", "b"]), min_size=1, max_size=12), min_size=1, max_size=30),
       query=st.lists(st.sampled_from(WORDS + ["a", "b", "unseen"]), min_size=0, max_size=8))
def test_okapi_scores_equal_rank_bm25_to_the_bit(docs, query):
    """The inverted index gives BM25Okapi's scores exactly: common words (negative idf, floored at epsilon x the
    mean idf), repeated and unknown query words included."""
    from rank_bm25 import BM25Okapi

    from engine.forecast.search import Okapi

    want = BM25Okapi(docs).get_scores(query)
    got = Okapi(docs).get_scores(query)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_okapi_scores_equal_rank_bm25_on_prophet_arena_sources(pa_folder):
    from rank_bm25 import BM25Okapi

    from engine.forecast.search import Okapi, tokenize

    qs = load_prophet_arena(pa_folder)
    cs = corpus_from_questions(qs)
    corpus = [tokenize(d.title + " " + d.content) or ["_"] for d in cs.docs]
    ref, ours = BM25Okapi(corpus), Okapi(corpus)
    for q in qs:
        assert ours.get_scores(tokenize(q.title)).tobytes() == ref.get_scores(tokenize(q.title)).tobytes()


def test_a_repeated_search_is_answered_from_the_memo_with_the_same_results(monkeypatch):
    """Every run of an experiment searches the same question at the same cutoff: the second asking is answered
    from the process's memo (equal results, a fresh list), keyed by query, cutoff and k, bounded, and not pickled
    with the corpus."""
    import pickle

    cs = _corpus(60, 5, embed=True)
    ref = _corpus(60, 5, embed=True)
    asked = []
    real = CorpusSearch._search
    monkeypatch.setattr(CorpusSearch, "_search", lambda self, *a: (asked.append(a), real(self, *a))[1])
    queries = [("storm earnings", T0 + timedelta(days=50), 4), ("storm earnings", T0 + timedelta(days=51), 4),
               ("storm earnings", T0 + timedelta(days=50), 5), ("vote", T0 + timedelta(days=50), 4)]
    first = [cs.search(*q) for q in queries]
    again = [cs.search(*q) for q in queries]
    assert len(asked) == len(queries)  # each key once
    assert first == again == [real(ref, *q) for q in queries] and first[0] is not again[0]
    again[0].clear()
    assert cs.search(*queries[0]) == first[0]  # the caller's list is its own
    copy = pickle.loads(pickle.dumps(cs))
    assert len(cs._memo) == 4 and len(copy._memo) == 0 and copy.search(*queries[0]) == first[0]
    monkeypatch.setattr(CorpusSearch, "MEMO", 2)
    small = _corpus(20, 5)
    for day in range(5):
        small.search("rate", T0 + timedelta(days=day), 3)
    assert len(small._memo) == 2
