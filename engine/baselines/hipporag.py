"""HippoRAG 2 (re-implementation): OpenIE knowledge graph + Personalized PageRank over passages.

Source: B. J. Gutiérrez et al., "From RAG to Memory: Non-Parametric Continual
Learning for Large Language Models" (HippoRAG 2, arXiv:2502.14802); code
OSU-NLP-Group/HippoRAG@c617143 ``src/hipporag/HippoRAG.py`` (``index``,
``add_fact_edges``, ``add_passage_edges``, ``add_synonymy_edges``,
``retrieve``, ``get_fact_scores``, ``rerank_facts``,
``graph_search_with_fact_entities``, ``run_ppr``), ``utils/misc_utils.py``
(``text_processing``, ``min_max_normalize``, ``extract_entity_nodes``),
``utils/config_utils.py`` (defaults), prompts ``prompts/templates/ner.py`` and
``triple_extraction.py``. The PyPI package ``hipporag`` pins torch 2.5.1 and
vLLM 0.6.6 (a CUDA stack), so it cannot run here with the engine's LLM.

Indexing (``index``): each new passage (de-duplicated by content, as the
original's hash ids) gets OpenIE: the one-shot NER prompt, then the
NER-conditioned triple prompt (two LLM steps; each a batched call under
:func:`engine.baselines.docmem.drive`). Triples with three elements are kept
(``filter_invalid_triples``), lower-cased and stripped of non-alphanumerics
(``text_processing``). Graph: phrase nodes (triple subjects and objects),
passage nodes; edges fact (subject-object, +1 per triple, both directions),
passage-phrase (1.0) and synonymy (phrase pairs with embedding cosine >=
``synonymy_edge_sim_threshold`` 0.8, at most ``synonymy_edge_topk`` neighbours
and 100 per phrase, phrases with more than two alphanumerics).

Retrieval (``retrieve``): fact scores = min-max normalised cosine of the query
with each fact's text ``str((s, p, o))``; the ``linking_top_k`` (5) best facts;
phrase weights = mean over those facts of the fact score divided by the number
of passages holding the phrase, top ``linking_top_k`` phrases kept; passage
weights = min-max normalised dense passage scores x ``passage_node_weight``
(0.05); Personalized PageRank (``damping`` 0.5) from these reset weights over
the undirected weighted graph; passages ranked by their PageRank. No fact at
all: the dense passage ranking (the original's fallback).

Differences (docs/forecast_baselines.md): the recognition-memory filter (an
LLM / DSPy reranker of the candidate facts) is not run, so the top facts go to
the graph search unfiltered; PageRank is a NumPy power iteration (tolerance
1e-12) instead of igraph's PRPACK, with dangling mass returned to the reset
distribution; facts keep their first-seen order instead of a Python ``set``'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from engine.baselines import prompts as baseline_prompts
from engine.baselines.common import Hit, parse_json
from engine.baselines.docmem import Job, capitalised_phrases
from engine.config import check
from engine.llm.base import Request


@dataclass(frozen=True)
class HippoRAGConfig:
    """HippoRAG 2 parameters (defaults: ``utils/config_utils.py`` BaseConfig)."""

    top_k: int = 5  # passages returned (the original's qa_top_k; retrieval_top_k 200 ranks them all)
    linking_top_k: int = 5
    passage_node_weight: float = 0.05
    damping: float = 0.5
    synonymy_edge_sim_threshold: float = 0.8
    synonymy_edge_topk: int = 2047
    max_tokens: int = 512  # OpenIE answer budget
    temperature: float = 0.0

    def __post_init__(self):
        check(self.top_k >= 1, f"hipporag.top_k must be >= 1, got {self.top_k}")
        check(self.linking_top_k >= 1, f"hipporag.linking_top_k must be >= 1, got {self.linking_top_k}")
        check(0.0 <= self.passage_node_weight <= 1.0,
              f"hipporag.passage_node_weight must be in [0, 1], got {self.passage_node_weight}")
        check(0.0 < self.damping < 1.0, f"hipporag.damping must be in (0, 1), got {self.damping}")
        check(-1.0 <= self.synonymy_edge_sim_threshold <= 1.0,
              f"hipporag.synonymy_edge_sim_threshold must be in [-1, 1], got {self.synonymy_edge_sim_threshold}")
        check(self.synonymy_edge_topk >= 1, f"hipporag.synonymy_edge_topk must be >= 1, got {self.synonymy_edge_topk}")


def text_processing(text: str) -> str:
    """``utils/misc_utils.py text_processing``: lower case, non-alphanumerics to spaces, stripped."""
    return re.sub("[^A-Za-z0-9 ]", " ", str(text).lower()).strip()


def min_max_normalize(x: np.ndarray) -> np.ndarray:
    """``utils/misc_utils.py min_max_normalize``: all ones when the range is 0."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    lo, hi = float(np.min(x)), float(np.max(x))
    if hi - lo == 0:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


def filter_invalid_triples(triples) -> list[list[str]]:
    """``utils/llm_utils.py filter_invalid_triples``: exactly three elements, unique, order kept."""
    out, seen = [], set()
    for t in triples if isinstance(triples, list) else []:
        if not isinstance(t, (list, tuple)) or len(t) != 3:
            continue
        t = [str(v) for v in t]
        if tuple(t) not in seen:
            seen.add(tuple(t))
            out.append(t)
    return out


def personalized_pagerank(weights: np.ndarray, reset: np.ndarray, damping: float, tol: float = 1e-12,
                          max_iter: int = 1000) -> np.ndarray:
    """PageRank ``p = (1 - d) r + d (W D^-1 p + dangling r)`` on a symmetric ``weights f8[n, n]``; ``r`` = normalised reset."""
    n = weights.shape[0]
    r = np.where(np.isnan(reset) | (reset < 0), 0.0, reset).astype(np.float64)
    if r.sum() <= 0:
        return np.full(n, 1.0 / max(n, 1))
    r = r / r.sum()
    deg = weights.sum(axis=0)
    dangling = deg <= 0
    trans = np.divide(weights, deg, out=np.zeros_like(weights), where=~dangling[None, :])  # column-stochastic
    p = r.copy()
    for _ in range(max_iter):
        nxt = (1.0 - damping) * r + damping * (trans @ p + p[dangling].sum() * r)
        if np.abs(nxt - p).sum() < tol:
            return nxt
        p = nxt
    return p


# --- prompts ---------------------------------------------------------------------------------


def ner_messages(passage: str) -> tuple[dict, ...]:
    r = baseline_prompts.render
    return ({"role": "system", "content": r("hipporag_ner_system")},
            {"role": "user", "content": r("hipporag_ner_example_input")},
            {"role": "assistant", "content": r("hipporag_ner_example_output")},
            {"role": "user", "content": passage})


def triple_messages(passage: str, entities: list[str]) -> tuple[dict, ...]:
    r = baseline_prompts.render
    example = r("hipporag_triple_frame", passage=r("hipporag_ner_example_input"),
                named_entity_json=r("hipporag_ner_example_output"))
    return ({"role": "system", "content": r("hipporag_triple_system")},
            {"role": "user", "content": example},
            {"role": "assistant", "content": r("hipporag_triple_example_output")},
            {"role": "user", "content": r("hipporag_triple_frame", passage=passage,
                                          named_entity_json=json.dumps({"named_entities": entities}))})


def rule_entities(passage: str) -> list[str]:
    """Rule NER (simulated backend): capitalised phrases and numbers of the passage."""
    return capitalised_phrases(passage)


def rule_triples(passage: str, entities: list[str]) -> list[list[str]]:
    """Rule triples (simulated backend): consecutive named entities of a passage, relation "appears with"."""
    return [[a, "appears with", b] for a, b in zip(entities, entities[1:])]


def parse_entities(text: str) -> list[str]:
    data = parse_json(text)
    ents = data.get("named_entities") if isinstance(data, dict) else None
    return [str(e) for e in ents] if isinstance(ents, list) else []


def parse_triples(text: str) -> list[list[str]]:
    data = parse_json(text)
    return filter_invalid_triples(data.get("triples") if isinstance(data, dict) else None)


def simulated_reply(messages: list[dict]) -> str | None:
    """The rule answers to the two OpenIE prompts, read from the rendered messages."""
    if not messages or messages[0].get("role") != "system":
        return None
    system, last = messages[0]["content"], messages[-1]["content"]
    if system == baseline_prompts.render("hipporag_ner_system"):
        return json.dumps({"named_entities": rule_entities(last)})
    if system == baseline_prompts.render("hipporag_triple_system"):
        passage = last.split("```", 2)[1].strip("\n") if last.count("```") >= 2 else last
        ents = parse_entities(last.rsplit("```", 1)[-1])
        return json.dumps({"triples": rule_triples(passage, ents)})
    return None


# --- the memory --------------------------------------------------------------------------------


class HippoRAGMemory:
    """One HippoRAG 2 index: passages, phrases, facts and the graph's edge statistics."""

    name = "hipporag"

    def __init__(self, config: HippoRAGConfig | None = None, *, embedder):
        self.config = config or HippoRAGConfig()
        self.embedder = embedder
        self.passages: list[str] = []
        self.passage_emb = np.zeros((0, embedder.dim), np.float32)
        self.phrases: list[str] = []  # phrase node texts (text_processing'd)
        self.phrase_emb = np.zeros((0, embedder.dim), np.float32)
        self.facts: list[tuple[str, str, str]] = []
        self.fact_emb = np.zeros((0, embedder.dim), np.float32)
        self.phrase_passages: dict[str, set[int]] = {}  # ent_node_to_chunk_ids
        self.edges: dict[tuple[str, str], float] = {}  # node_to_node_stats; nodes "p:<i>" (passage), "e:<phrase>"
        self.openie: list[dict] = []  # per passage: entities, triples, source ("llm" | "rule" | "rule-fallback")

    # --- indexing ------------------------------------------------------------------------
    def add(self, texts, *, mode: str = "rule", key: str = "", seed: int = 0, when: str = "") -> Job:
        cfg = self.config
        new = []
        for t in texts:
            t = str(t)
            if t not in self.passages and t not in new:  # hash-id de-duplication
                new.append(t)
        if not new:
            return {"passages": 0}
        if mode == "llm":
            ner_texts = yield [Request(messages=ner_messages(t), max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                       seed=seed + i, episode=key or None) for i, t in enumerate(new)]
            ents = [parse_entities(x) for x in ner_texts]
            tri_texts = yield [Request(messages=triple_messages(t, e), max_tokens=cfg.max_tokens,
                                       temperature=cfg.temperature, seed=seed + 1000 + i, episode=key or None)
                               for i, (t, e) in enumerate(zip(new, ents))]
            triples = [parse_triples(x) for x in tri_texts]
            sources = ["llm" if tr else "rule-fallback" for tr in triples]
            triples = [tr if tr else rule_triples(t, rule_entities(t)) for t, tr in zip(new, triples)]
        else:
            ents = [rule_entities(t) for t in new]
            triples = [rule_triples(t, e) for t, e in zip(new, ents)]
            sources = ["rule"] * len(new)
        self._index(new, ents, triples, sources)
        return {"passages": len(new), "facts": len(self.facts)}

    def _index(self, new, ents, triples, sources) -> None:
        cfg = self.config
        base = len(self.passages)
        self.passages += new
        self.passage_emb = np.concatenate([self.passage_emb, self.embedder.embed(new)])
        new_phrases, new_facts = [], []
        for i, (tr, ent, src) in enumerate(zip(triples, ents, sources)):
            pid = base + i
            clean = [[text_processing(v) for v in t] for t in tr]
            self.openie.append({"entities": list(ent), "triples": clean, "source": src})
            in_chunk = set()
            for s, p, o in clean:
                if (s, p, o) not in self.facts and (s, p, o) not in new_facts:
                    new_facts.append((s, p, o))
                for ph in (s, o):
                    in_chunk.add(ph)
                    if ph not in self.phrases and ph not in new_phrases:
                        new_phrases.append(ph)
                a, b = f"e:{s}", f"e:{o}"  # add_fact_edges: +1 both ways per triple
                self.edges[(a, b)] = self.edges.get((a, b), 0.0) + 1.0
                self.edges[(b, a)] = self.edges.get((b, a), 0.0) + 1.0
            for ph in in_chunk:
                self.phrase_passages.setdefault(ph, set()).add(pid)
                self.edges[(f"p:{pid}", f"e:{ph}")] = 1.0  # add_passage_edges
        if new_phrases:
            self.phrases += new_phrases
            self.phrase_emb = np.concatenate([self.phrase_emb, self.embedder.embed(new_phrases)])
        if new_facts:
            self.facts += new_facts
            self.fact_emb = np.concatenate([self.fact_emb, self.embedder.embed([str(f) for f in new_facts])])
        self._synonymy_edges()

    def _synonymy_edges(self) -> None:
        """``add_synonymy_edges``: kNN over all phrase nodes, cosine >= threshold, <= 100 per phrase."""
        cfg = self.config
        if not self.phrases:
            return
        sims = self.phrase_emb @ self.phrase_emb.T
        for i, ph in enumerate(self.phrases):
            if len(re.sub("[^A-Za-z0-9]", "", ph)) <= 2:
                continue
            order = np.argsort(-sims[i], kind="stable")[: cfg.synonymy_edge_topk]
            n = 0
            for j in order:
                score = float(sims[i, j])
                if score < cfg.synonymy_edge_sim_threshold or n > 100:
                    break
                if j != i and self.phrases[j] != "":
                    self.edges[(f"e:{ph}", f"e:{self.phrases[j]}")] = score
                    n += 1

    # --- retrieval ---------------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return [f"e:{p}" for p in self.phrases] + [f"p:{i}" for i in range(len(self.passages))]

    def graph(self) -> tuple[list[str], np.ndarray]:
        """Node names and the symmetric weight matrix of the undirected graph (multi-edges summed)."""
        names = self.nodes()
        at = {n: i for i, n in enumerate(names)}
        w = np.zeros((len(names), len(names)))
        for (a, b), v in self.edges.items():
            if a in at and b in at:
                w[at[a], at[b]] += v
                w[at[b], at[a]] += v
        return names, w

    def dense_scores(self, query: str) -> np.ndarray:
        q = self.embedder.embed([query])[0]
        return min_max_normalize(self.passage_emb @ q)

    def fact_scores(self, query: str) -> np.ndarray:
        if not self.facts:
            return np.zeros(0)
        q = self.embedder.embed([query])[0]
        return min_max_normalize(self.fact_emb @ q)

    def top_facts(self, scores: np.ndarray) -> list[int]:
        """``rerank_facts`` without the recognition filter: the ``linking_top_k`` best facts, best first."""
        k = self.config.linking_top_k
        if scores.size == 0:
            return []
        if scores.size <= k:
            return np.argsort(scores)[::-1].tolist()
        return np.argsort(scores)[-k:][::-1].tolist()

    def passage_scores(self, query: str) -> tuple[np.ndarray, list[int]]:
        """PageRank score per passage and the fact indices that seeded it ([] = dense fallback)."""
        cfg = self.config
        fscores = self.fact_scores(query)
        top = self.top_facts(fscores)
        dense = self.dense_scores(query)
        if not top:
            return dense, []
        names, w = self.graph()
        at = {n: i for i, n in enumerate(names)}
        phrase_w = np.zeros(len(names))
        occurs = np.zeros(len(names))
        for fi in top:
            s, _, o = self.facts[fi]
            for ph in (s.lower(), o.lower()):
                node = at.get(f"e:{ph}")
                if node is None:
                    continue
                score = float(fscores[fi])
                if self.phrase_passages.get(ph):
                    score /= len(self.phrase_passages[ph])
                phrase_w[node] += score
                occurs[node] += 1
        phrase_w = np.divide(phrase_w, occurs, out=np.zeros_like(phrase_w), where=occurs != 0)
        keep = np.argsort(-phrase_w, kind="stable")[: cfg.linking_top_k]  # get_top_k_weights
        mask = np.zeros(len(names), bool)
        mask[keep[phrase_w[keep] > 0]] = True
        phrase_w = np.where(mask, phrase_w, 0.0)
        passage_w = np.zeros(len(names))
        for i, d in enumerate(min_max_normalize(dense)):
            passage_w[at[f"p:{i}"]] = d * cfg.passage_node_weight
        pr = personalized_pagerank(w, phrase_w + passage_w, cfg.damping)
        return np.array([pr[at[f"p:{i}"]] for i in range(len(self.passages))]), top

    def retrieve(self, query: str) -> list[Hit]:
        if not self.passages:
            return []
        scores, top = self.passage_scores(query)
        order = np.argsort(-scores, kind="stable")[: self.config.top_k]
        seeds = [list(self.facts[i]) for i in top]
        return [Hit(int(i), self.passages[i], float(scores[i]), {"graph_seeds": seeds}) for i in order]

    def texts(self) -> list[str]:
        return list(self.passages)


__all__ = ["HippoRAGConfig", "HippoRAGMemory", "min_max_normalize", "personalized_pagerank", "text_processing"]
