"""MemoryOS (re-implementation): short-term pages, mid-term sessions with heat, retrieval of both.

Source: J. Kang et al., "Memory OS of AI Agent" (arXiv:2506.06326); code
BAI-LAB/MemoryOS@1d71706 ``memoryos-pypi/``: ``memoryos.py`` (``Memoryos``
defaults, ``add_memory``), ``short_term.py`` (deque, ``is_full``: len >=
capacity), ``updater.py`` (``process_short_term_to_mid_term``),
``mid_term.py`` (``compute_segment_heat``, ``insert_pages_into_session``,
``add_session``, ``search_sessions``, ``evict_lfu``), ``retriever.py``
(``_retrieve_mid_term_context``, ``retrieve_context`` defaults), ``utils.py``
(``compute_time_decay``, ``gpt_generate_multi_summary``), ``prompts.py``
(``MULTI_SUMMARY_*``). The PyPI package ``memoryos-pro`` requires
``faiss-gpu`` and sentence-transformers (torch), so it does not run here.

A page is one (user_input, agent_response) pair; here user_input = the search
query and agent_response = one evidence chunk. ``add``: while short-term
memory is full (``short_term_capacity`` 10) its oldest page moves to mid-term
memory: one multi-summary LLM call on the evicted pages gives at most two
(theme, keywords, content) summaries, and for EACH summary the pages join the
mid-term session with the best score ``cos(summary) + 1.0 x Jaccard(keywords)``
if it is >= ``mid_term_similarity_threshold`` (0.6), else a new session.
Session heat ``H = alpha N_visit + beta L_interaction + gamma R_recency``
(1, 1, 1; ``R = exp(-hours since last visit / 24)``); above
``mid_term_capacity`` (2000) sessions the least-frequently-accessed one goes.

``retrieve``: mid-term pages from the ``top_k_sessions`` (5) sessions most
similar to the query (session score >= 0.1), pages with cosine >= 0.1, the best
``top_k`` across sessions (``retrieval_queue_capacity`` 7); each session that
contributes a page gets ``N_visit + 1`` and its heat recomputed. The whole
short-term memory follows (MemoryOS puts it into every answer prompt).

Differences (docs/forecast_baselines.md): the long-term layer (user profile,
user and assistant knowledge, filled from sessions whose heat reaches 5) is
not built: it models a user's persona across conversations, and evidence
about a market has no user; the conversation-continuity and page meta-info LLM
calls are not made (pages of one search are chained in order); times are the
caller's ``when`` (the question's cutoff), not the wall clock.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from engine.baselines import prompts as baseline_prompts
from engine.baselines.common import Hit, parse_json
from engine.baselines.docmem import Job, first_sentence, keywords
from engine.config import check
from engine.llm.base import Request


@dataclass(frozen=True)
class MemoryOSConfig:
    """MemoryOS parameters (defaults: ``Memoryos.__init__``, ``mid_term.py``, ``retriever.retrieve_context``)."""

    top_k: int = 7  # retrieval_queue_capacity: mid-term pages returned
    short_term_capacity: int = 10
    mid_term_capacity: int = 2000
    mid_term_similarity_threshold: float = 0.6
    keyword_similarity_alpha: float = 1.0
    segment_similarity_threshold: float = 0.1
    page_similarity_threshold: float = 0.1
    top_k_sessions: int = 5
    heat_alpha: float = 1.0
    heat_beta: float = 1.0
    heat_gamma: float = 1.0
    recency_tau_hours: float = 24.0
    max_tokens: int = 300
    temperature: float = 0.7  # OpenAIClient.chat_completion's default

    def __post_init__(self):
        check(self.top_k >= 1, f"memoryos.top_k must be >= 1, got {self.top_k}")
        check(self.short_term_capacity >= 1, f"memoryos.short_term_capacity must be >= 1, got {self.short_term_capacity}")
        check(self.mid_term_capacity >= 1, f"memoryos.mid_term_capacity must be >= 1, got {self.mid_term_capacity}")
        check(self.top_k_sessions >= 1, f"memoryos.top_k_sessions must be >= 1, got {self.top_k_sessions}")
        check(self.recency_tau_hours > 0, f"memoryos.recency_tau_hours must be > 0, got {self.recency_tau_hours}")


def time_decay(event: datetime, now: datetime, tau_hours: float) -> float:
    """``utils.compute_time_decay``: ``exp(-delta_hours / tau)``."""
    return math.exp(-((now - event).total_seconds() / 3600.0) / tau_hours)


def segment_heat(session: dict, cfg: MemoryOSConfig, now: datetime) -> float:
    """``compute_segment_heat``: ``alpha N_visit + beta L_interaction + gamma R_recency`` (updates ``R_recency``)."""
    session["R_recency"] = time_decay(session["last_visit_time"], now, cfg.recency_tau_hours)
    return cfg.heat_alpha * session["N_visit"] + cfg.heat_beta * session["L_interaction"] + cfg.heat_gamma * session["R_recency"]


def jaccard(a, b) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a and b else 0.0


def page_text(page: dict) -> str:
    return f"User: {page['user_input']} Assistant: {page['agent_response']}"


def rule_summaries(text: str) -> list[dict]:
    """Rule multi-summary (simulated backend): one theme, its 3 keywords, the first sentence of the answers."""
    body = " ".join(line.split("Assistant: ", 1)[1] for line in text.splitlines() if line.startswith("Assistant: "))
    body = body or text
    kws = keywords(body, 3)
    return [{"theme": " ".join(kws[:2]) or "evidence", "keywords": kws, "content": first_sentence(body, 160)}]


def parse_summaries(text: str) -> list[dict]:
    data = parse_json(text)
    if isinstance(data, dict):
        data = data.get("summaries", [data])
    if not isinstance(data, list):
        return []
    return [d for d in data if isinstance(d, dict)][:2]


def simulated_reply(messages: list[dict]) -> str | None:
    if messages and messages[0].get("content") == baseline_prompts.render("memoryos_multi_summary_system"):
        return json.dumps(rule_summaries(messages[-1]["content"].split("Conversation content:\n", 1)[-1]))
    return None


class MemoryOSMemory:
    """Short-term deque and mid-term sessions of one MemoryOS instance."""

    name = "memoryos"

    def __init__(self, config: MemoryOSConfig | None = None, *, embedder):
        self.config = config or MemoryOSConfig()
        self.embedder = embedder
        self.short_term: deque[dict] = deque()
        self.sessions: dict[str, dict] = {}
        self.access_frequency: dict[str, int] = {}
        self.next_page = 0
        self.next_session = 0
        self.summaries: list[dict] = []  # audit: every multi-summary applied, with its source

    def _embed(self, text: str) -> np.ndarray:
        return self.embedder.embed([text])[0]

    def add(self, texts, *, mode: str = "rule", key: str = "", seed: int = 0, when: datetime | str = "",
            query: str = "") -> Job:
        cfg = self.config
        now = when if isinstance(when, datetime) else datetime(2000, 1, 1)
        added = 0
        for i, text in enumerate(texts):
            if len(self.short_term) >= cfg.short_term_capacity:  # add_memory: migrate BEFORE adding
                evicted = []
                while len(self.short_term) >= cfg.short_term_capacity:
                    evicted.append(self.short_term.popleft())
                joined = "\n".join(f"User: {p['user_input']}\nAssistant: {p['agent_response']}" for p in evicted)
                if mode == "llm":
                    req = Request(messages=({"role": "system", "content": baseline_prompts.render("memoryos_multi_summary_system")},
                                            {"role": "user", "content": baseline_prompts.render("memoryos_multi_summary_user", text=joined)}),
                                  max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=seed + i, episode=key or None)
                    (answer,) = yield [req]
                    found, source = parse_summaries(answer), "llm"
                else:
                    found, source = rule_summaries(joined), "rule"
                if not found:  # the original's fallback summary
                    found, source = [{"content": "General conversation segment from short-term memory.", "keywords": []}], "fallback"
                for s in found:
                    self.summaries.append({**s, "source": source})
                    self.insert_pages(str(s.get("content") or "General summary of recent interactions."),
                                      [str(k) for k in s.get("keywords", []) if isinstance(k, (str, int))], evicted, now)
            page = {"page_id": f"page_{self.next_page}", "user_input": query, "agent_response": str(text), "timestamp": now}
            self.next_page += 1
            page["page_embedding"] = self._embed(page_text(page))
            self.short_term.append(page)
            added += 1
        return {"pages": added}

    def add_session(self, summary: str, pages: list[dict], kws: list[str], now: datetime) -> str:
        sid = f"session_{self.next_session}"
        self.next_session += 1
        sess = {"id": sid, "summary": summary, "summary_keywords": list(kws), "summary_embedding": self._embed(summary),
                "details": [dict(p, page_keywords=list(kws)) for p in pages], "L_interaction": len(pages),
                "R_recency": 1.0, "N_visit": 0, "timestamp": now, "last_visit_time": now, "access_count_lfu": 0}
        sess["H_segment"] = segment_heat(sess, self.config, now)
        self.sessions[sid] = sess
        self.access_frequency[sid] = 0
        if len(self.sessions) > self.config.mid_term_capacity:  # evict_lfu
            lfu = min(self.access_frequency, key=self.access_frequency.get)
            self.sessions.pop(lfu, None)
            self.access_frequency.pop(lfu, None)
        return sid

    def insert_pages(self, summary: str, kws: list[str], pages: list[dict], now: datetime) -> str:
        """``insert_pages_into_session``: join the best session if its score >= threshold, else a new one."""
        cfg = self.config
        if not self.sessions:
            return self.add_session(summary, pages, kws, now)
        vec = self._embed(summary)
        best, best_score = None, -1.0
        for sid, sess in self.sessions.items():
            score = float(sess["summary_embedding"] @ vec) + cfg.keyword_similarity_alpha * jaccard(sess["summary_keywords"], kws)
            if score > best_score:
                best, best_score = sid, score
        if best is not None and best_score >= cfg.mid_term_similarity_threshold:
            sess = self.sessions[best]
            sess["details"] += [dict(p, page_keywords=list(p.get("page_keywords") or kws)) for p in pages]
            sess["L_interaction"] += len(pages)
            sess["last_visit_time"] = now
            sess["H_segment"] = segment_heat(sess, cfg, now)
            return best
        return self.add_session(summary, pages, kws, now)

    def search_pages(self, query: str, now: datetime) -> list[tuple[float, dict]]:
        """``search_sessions`` + ``_retrieve_mid_term_context``: the best ``top_k`` (score, page) pairs."""
        cfg = self.config
        if not self.sessions:
            return []
        q = self._embed(query)
        sids = list(self.sessions)
        sims = np.array([float(self.sessions[s]["summary_embedding"] @ q) for s in sids])
        order = np.argsort(-sims, kind="stable")[: min(cfg.top_k_sessions, len(sids))]
        pages: list[tuple[float, int, dict]] = []
        for rank in order:
            sess = self.sessions[sids[rank]]
            if sims[rank] < cfg.segment_similarity_threshold:  # query keywords are empty in the original: score = cosine
                continue
            matched = [(float(p["page_embedding"] @ q), p) for p in sess["details"]]
            matched = [(s, p) for s, p in matched if s >= cfg.page_similarity_threshold]
            if matched:
                sess["N_visit"] += 1
                sess["last_visit_time"] = now
                sess["access_count_lfu"] += 1
                self.access_frequency[sess["id"]] = sess["access_count_lfu"]
                sess["H_segment"] = segment_heat(sess, cfg, now)
                for s, p in matched:
                    pages.append((s, len(pages), p))
        pages.sort(key=lambda t: (-t[0], t[1]))
        return [(s, p) for s, _, p in pages[: cfg.top_k]]

    def retrieve(self, query: str, when: datetime | None = None) -> list[Hit]:
        now = when or datetime(2000, 1, 1)
        out = [Hit(int(p["page_id"].split("_")[1]), p["agent_response"], s, {"layer": "mid-term"})
               for s, p in self.search_pages(query, now)]
        out += [Hit(int(p["page_id"].split("_")[1]), p["agent_response"], 0.0, {"layer": "short-term"}) for p in self.short_term]
        return out

    def texts(self) -> list[str]:
        mid = [p["agent_response"] for s in self.sessions.values() for p in s["details"]]
        return mid + [p["agent_response"] for p in self.short_term]


__all__ = ["MemoryOSConfig", "MemoryOSMemory", "segment_heat", "time_decay"]
