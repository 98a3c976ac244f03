"""FutureX evidence: a documents file loaded into a cutoff-aware corpus (BM25 + embeddings, or a web-search provider).

Documents file (JSONL or JSON list): ``text`` (alias ``content``),
``available_at`` (ISO-8601: when it became available), optional ``id``,
``title``, ``source`` (URL or name) and ``question_ids`` (the questions whose
Full Text row shows it; every document is searchable by every question, always
subject to the cutoff).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import InputError
from engine.forecast.data import parse_time, read_json_objects
from engine.forecast.search import CorpusSearch, CutoffGuard, SearchProvider, SearchResult



@dataclass
class FutureXCorpus:
    """Cutoff-aware search plus each question's linked documents (Full Text).

    ``search`` uses the local BM25 + embedding corpus over ``docs``, or, when
    ``provider`` is given (any :class:`SearchProvider`, e.g. a web-search API
    adapter), that provider wrapped in :class:`CutoffGuard`, which drops any
    result that is undated or later than the cutoff.
    """

    docs: list[SearchResult] = field(default_factory=list)
    linked: dict[str, list[int]] = field(default_factory=dict)  # question id -> doc ids
    embedder: object | None = None
    provider: SearchProvider | None = None

    def __post_init__(self):
        if self.provider is not None:
            self._search = CutoffGuard(self.provider)
        else:
            self._search = CorpusSearch(self.docs, self.embedder) if self.docs else None

    def search(self, query: str, cutoff, k: int = 4) -> list[SearchResult]:
        return self._search.search(query, cutoff, k) if self._search is not None else []

    def question_documents(self, qid: str, cutoff) -> list[SearchResult]:
        """The question's linked documents available at or before ``cutoff``, oldest first."""
        docs = [self.docs[i] for i in self.linked.get(qid, ()) if self.docs[i].available_at <= cutoff]
        return sorted(docs, key=lambda d: (d.available_at, d.doc_id))


def load_futurex_documents(path: str | Path, embedder=None) -> FutureXCorpus:
    """A documents file -> :class:`FutureXCorpus` (doc_id = position, ``origin`` = the document's id)."""
    docs, linked, ids = [], {}, {}
    for obj, where in read_json_objects(Path(path), "documents"):
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected an object, got {type(obj).__name__}")
        text = obj.get("text", obj.get("content"))
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: missing required field 'text' (the document body); expected text, "
                             "available_at and optionally id, title, source, question_ids")
        if "available_at" not in obj:
            raise InputError(f"{where}: missing required field 'available_at' (ISO-8601 time the document "
                             "became available)")
        at = parse_time(obj["available_at"], f"{where} field 'available_at'")
        did = str(obj.get("id", "") or f"doc-{len(docs) + 1}")
        if did in ids:
            raise InputError(f"{where}: document id {did!r} already used at {ids[did]}")
        ids[did] = where
        qids = obj.get("question_ids", [])
        if not isinstance(qids, list) or not all(isinstance(q, str) for q in qids):
            raise InputError(f"{where} field 'question_ids': expected a list of question ids, got {qids!r}")
        for q in qids:
            linked.setdefault(q, []).append(len(docs))
        docs.append(SearchResult(len(docs), str(obj.get("title", "") or ""), str(obj.get("source", "") or ""),
                                 text.strip(), at, 0.0, did))
    return FutureXCorpus(docs, linked, embedder)


