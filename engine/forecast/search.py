"""Cutoff-aware search: a local corpus (BM25 + embeddings) and the web-search provider interface.

The paper's Tavily web search (C.4: results restricted to content published
before the question's cutoff, top 4 per query) is not reachable here. The
local :class:`CorpusSearch` plays its role over source documents, each of which
carries ``available_at``, the time it became available. A query with cutoff
``tau`` only ever sees documents with ``available_at <= tau`` (paper eq. 1,
``Search(s_t, E_{<=tau_q})``); the filter is applied before ranking, so no
later document can enter the top-k. For Prophet Arena a source's availability
is its row's snapshot time, so one question's sources cannot leak into an
earlier question.

Ranking: BM25 (rank-bm25's Okapi scores, from an inverted index: :class:`Okapi`) and cosine similarity of embeddings
(engine.embed + engine.index.NodeIndex, labels = document ids), fused by
reciprocal rank (``1 / (60 + rank)`` summed over the two lists).

Real web search plugs in through :class:`SearchProvider`: anything with
``search(query, cutoff, k) -> list[SearchResult]``. :class:`CutoffGuard` wraps
any provider and drops results whose ``available_at`` is unknown or after the
cutoff, so a provider that ignores the date filter still cannot leak. A Tavily
or Firecrawl adapter is a class with that one method (call the API with its
end-date parameter, map each hit to a SearchResult with its published date).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Protocol, Sequence, runtime_checkable

import numpy as np

from engine.errors import InputError
from engine.forecast.data import Question
from engine.memo import Memo

_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class SearchResult:
    """One retrieved item, normalised (B.1): what goes into an item's raw_data.json."""

    doc_id: int
    title: str
    url: str
    content: str
    available_at: datetime
    score: float = 0.0
    origin: str = ""  # e.g. the submission_id whose sources held this document


@runtime_checkable
class SearchProvider(Protocol):
    """Any search backend: at most ``k`` results, each available at or before ``cutoff``."""

    def search(self, query: str, cutoff: datetime, k: int) -> list[SearchResult]: ...


class Okapi:
    """rank-bm25's ``BM25Okapi`` scores (its idf with the epsilon floor, k1 = 1.5, b = 0.75) from an inverted index.

    ``BM25Okapi.get_scores`` walks every document's term dict in Python for each query term (about 10 ms of a
    Prophet Arena question's 11 ms of CPU); here a term touches only the documents that hold it, with the same
    floating-point operations per document in the same order (a document without the term adds an exact 0.0
    there), so the scores are equal to the bit (tests/engine/forecast/test_search.py). The index is built from a
    ``BM25Okapi`` of the corpus, so the idf values and lengths are rank-bm25's own.
    """

    def __init__(self, corpus: Sequence[Sequence[str]]):
        from rank_bm25 import BM25Okapi

        ref = BM25Okapi(corpus)
        self.k1, self.b, self.avgdl, self.idf = ref.k1, ref.b, ref.avgdl, ref.idf
        self.doc_len = np.array(ref.doc_len)
        self.size = ref.corpus_size
        # postings in one CSR layout (term -> its slice of ids / tf): three arrays and a dict of ints pickle fast
        postings: dict[str, list[tuple[int, int]]] = {}
        for i, freqs in enumerate(ref.doc_freqs):
            for word, tf in freqs.items():
                postings.setdefault(word, []).append((i, tf))
        self.term = {w: k for k, w in enumerate(postings)}
        flat = [p for plist in postings.values() for p in plist]
        self.ids = np.array([i for i, _ in flat], dtype=np.int32)
        self.tf = np.array([tf for _, tf in flat], dtype=np.int32)  # converted to float exactly, as int64 is
        self.start = np.zeros(len(postings) + 1, dtype=np.int64)
        np.cumsum([len(plist) for plist in postings.values()], out=self.start[1:])

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """``f8[size]``: what ``BM25Okapi.get_scores(query)`` returns."""
        score = np.zeros(self.size)
        for q in query:
            idf = self.idf.get(q) or 0
            if not idf:  # rank-bm25 adds idf 0 x (...) = 0.0 to every document
                continue
            k = self.term[q]
            lo, hi = self.start[k], self.start[k + 1]
            ids, tf = self.ids[lo:hi], self.tf[lo:hi]
            score[ids] += idf * (tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * self.doc_len[ids] / self.avgdl)))
        return score


@dataclass
class CorpusSearch:
    """Local hybrid BM25 + embedding search with a hard availability cutoff.

    A search is a function of ``(query, cutoff, k)`` over a fixed corpus, so the last :attr:`MEMO` answers are
    kept per process (not pickled): every run of an experiment asks the same question's retrieval (the agent's
    RAG context searches the question text at its cutoff), and a worker serving many runs at once answered it
    once per run (a quarter of a Prophet Arena worker's samples at 32 workers)."""

    docs: list[SearchResult]
    embedder: object | None = None  # engine.embed Embedder; None = BM25 only
    _times: np.ndarray = field(init=False, repr=False)  # f8[n] POSIX seconds

    MEMO: ClassVar[int] = 4096  # answers kept per process (least recently used dropped first)

    def __post_init__(self):
        if not self.docs:
            raise InputError("CorpusSearch needs at least one document, got 0")
        for i, d in enumerate(self.docs):
            if d.doc_id != i:
                raise InputError(f"documents must have doc_id == position; docs[{i}].doc_id = {d.doc_id}")
            if d.available_at is None or d.available_at.tzinfo is None:
                raise InputError(f"docs[{i}].available_at must be a timezone-aware datetime, got {d.available_at!r}")
        self._times = np.array([d.available_at.timestamp() for d in self.docs], dtype=np.float64)
        self._bm25 = Okapi([tokenize(d.title + " " + d.content) or ["_"] for d in self.docs])
        self._index = None
        if self.embedder is not None:
            from engine.index import NodeIndex

            vecs = self.embedder.embed([d.title + "\n" + d.content for d in self.docs])
            self._index = NodeIndex(int(vecs.shape[1]))
            self._index.add(np.arange(len(self.docs), dtype=np.int64), vecs)
        self._memo = Memo(self.MEMO)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_memo"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._memo = Memo(self.MEMO)

    def available(self, cutoff: datetime) -> np.ndarray:
        """``i8[c]`` ids of documents available at or before ``cutoff``."""
        return np.flatnonzero(self._times <= cutoff.timestamp()).astype(np.int64)

    def search(self, query: str, cutoff: datetime, k: int = 4) -> list[SearchResult]:
        if k < 1:
            raise InputError(f"k must be >= 1, got {k}")
        if cutoff.tzinfo is None:
            raise InputError(f"cutoff must be timezone-aware, got {cutoff!r}")
        hits, _ = self._memo.get((query, cutoff.timestamp(), int(k)), lambda: tuple(self._search(query, cutoff, k)))
        return list(hits)

    def _search(self, query: str, cutoff: datetime, k: int) -> list[SearchResult]:
        cand = self.available(cutoff)
        if cand.size == 0:
            return []
        fused = np.zeros(len(self.docs), dtype=np.float64)
        bm = np.asarray(self._bm25.get_scores(tokenize(query) or ["_"]), dtype=np.float64)[cand]
        order = cand[np.argsort(-bm, kind="stable")]
        fused[order] += 1.0 / (60.0 + np.arange(1, order.size + 1))
        if self._index is not None:
            qv = self.embedder.embed([query])[0]
            ids, _ = self._index.search(qv, k=int(min(cand.size, max(4 * k, 16))), within=cand)
            ids = ids[ids >= 0]
            fused[ids] += 1.0 / (60.0 + np.arange(1, ids.size + 1))
        top = cand[np.argsort(-fused[cand], kind="stable")]
        out, seen = [], set()
        for i in top:
            d = self.docs[int(i)]
            key = d.url or d.content
            if key in seen:
                continue
            seen.add(key)
            out.append(SearchResult(d.doc_id, d.title, d.url, d.content, d.available_at, float(fused[i]), d.origin))
            if len(out) == k:
                break
        return out


@dataclass
class CutoffGuard:
    """Wraps any provider; drops results with unknown or later availability than the cutoff."""

    inner: SearchProvider
    dropped: int = 0

    def search(self, query: str, cutoff: datetime, k: int = 4) -> list[SearchResult]:
        out = []
        for r in self.inner.search(query, cutoff, k):
            if r.available_at is None or r.available_at > cutoff:
                self.dropped += 1
                continue
            out.append(r)
        return out[:k]


def corpus_from_questions(questions: Sequence[Question], embedder=None) -> CorpusSearch:
    """One document per source of every question; available at its row's snapshot time."""
    docs = []
    for q in questions:
        for s in q.sources:
            docs.append(SearchResult(len(docs), s.title, s.url, s.summary, q.snapshot_time, 0.0, q.qid))
    return CorpusSearch(docs, embedder)
