"""MemRL: two-phase retrieval and the Q update against hand computation (arXiv 2601.03192)."""

import math
import statistics

import numpy as np
import pytest

from engine.baselines.memrl import MemRLConfig, MemRLMemory, q_update, rank_candidates
from engine.errors import ConfigError


def _memory(fixed_embedder, at_sim, sims_q, **cfg):
    """A MemRL memory whose row i has cosine sims_q[i][0] with the query 'q' and Q sims_q[i][1]."""
    vecs = {"q": (1.0, 0.0)}
    vecs.update({f"m{i}": at_sim(s) for i, (s, _) in enumerate(sims_q)})
    emb = fixed_embedder(vecs)
    mem = MemRLMemory(MemRLConfig(**cfg), embedder=emb)
    for i, (s, q) in enumerate(sims_q):
        mem.table.append(emb.embed([f"m{i}"]), intent=[f"m{i}"], experience=[f"exp{i}"], q=[q], visits=[0], source=["rule"])
    return mem


def test_q_update_formula():
    assert q_update(0.0, 1.0, 0.3) == pytest.approx(0.3)
    assert q_update(0.3, -1.0, 0.3) == pytest.approx(0.7 * 0.3 - 0.3)


def test_ranking_score_matches_hand_computation(fixed_embedder, at_sim):
    rows = [(0.9, -0.5), (0.8, 0.3), (0.6, 1.0), (0.4, 5.0)]  # the last is below delta = 0.5
    mem = _memory(fixed_embedder, at_sim, rows, select_k=3)
    hits = mem.reader(mem.snapshot()).retrieve(["q"])[0]
    sims, qs = [0.9, 0.8, 0.6], [-0.5, 0.3, 1.0]
    zs = [(s - statistics.mean(sims)) / statistics.pstdev(sims) for s in sims]
    zq = [(q - statistics.mean(qs)) / statistics.pstdev(qs) for q in qs]
    score = [0.5 * a + 0.5 * max(-3.0, min(3.0, b)) for a, b in zip(zs, zq)]
    want = sorted(range(3), key=lambda i: -score[i])
    assert [h.id for h in hits] == want
    assert [h.score for h in hits] == pytest.approx([score[i] for i in want], abs=1e-5)
    assert 3 not in [h.id for h in hits]  # Phase A filter: similarity 0.4 < 0.5


def test_phase_a_keeps_recall_k_most_similar_and_phase_b_selects(fixed_embedder, at_sim):
    rows = [(0.95 - 0.05 * i, 0.0) for i in range(7)]  # 7 candidates above 0.5, equal Q
    mem = _memory(fixed_embedder, at_sim, rows, recall_k=5, select_k=2)
    hits = mem.reader(mem.snapshot()).retrieve(["q"])[0]
    assert [h.id for h in hits] == [0, 1]  # z(Q) = 0, so similarity decides among the top 5
    mem2 = _memory(fixed_embedder, at_sim, [(0.9, -1.0), (0.85, -1.0), (0.8, -1.0), (0.75, 1.0), (0.7, -1.0), (0.65, 9.0)], recall_k=5, select_k=1)
    # Row 5 has the best Q but is 6th by similarity: Phase A drops it. Among the five left,
    # z(sim) = [1.41, 0.71, 0, -0.71, -1.41] and z(Q) = [-0.5, -0.5, -0.5, 2, -0.5]:
    # row 3 scores 0.5 * -0.71 + 0.5 * 2 = 0.65 > row 0's 0.5 * 1.41 - 0.25 = 0.46.
    assert [h.id for h in mem2.reader(mem2.snapshot()).retrieve(["q"])[0]] == [3]


def test_z_of_q_is_clipped_at_three():
    sim = np.full(11, 0.7)
    q = np.array([0.0] * 10 + [10.0])
    order, score = rank_candidates(sim, q, 0.5, 0.5, 3.0)
    assert math.sqrt(10) > 3.0
    assert score[10] == pytest.approx(0.5 * 3.0)
    assert order[0] == 10


def test_apply_updates_q_of_used_memories_in_episode_order(fixed_embedder, at_sim, make_outcome, simulated):
    mem = _memory(fixed_embedder, at_sim, [(0.9, 0.0)], alpha=0.3, add_similarity_threshold=0.99)
    emb = mem.embedder
    emb.vectors.update({"t1": emb.vectors["m0"], "t2": emb.vectors["m0"]})
    reader = mem.reader(mem.snapshot())
    ups = reader.observe([
        make_outcome("t1", ("a", True), retrieved=[0], key="1"),
        make_outcome("t2", ("b", False), retrieved=[0, 0], key="2"),
    ], simulated)
    assert ups[0]["reward"].tolist() == [1.0] and ups[1]["reward"].tolist() == [-1.0]
    mem.apply(ups)
    assert mem.table.data["q"][0] == pytest.approx(0.7 * 0.3 + 0.3 * -1.0)  # 0 -> 0.3 -> -0.09
    assert mem.table.data["visits"][0] == 2
    assert len(mem.table) == 1  # t1, t2 have the same intent vector as m0: not added again


def test_graded_outcome_reward_option(hashing, simulated):
    from engine.baselines.common import Outcome

    o = Outcome(key="1", seed=0, task="sector news", attempts=(), success=True, reward=0.25, retrieved=(0,))
    mem = MemRLMemory(MemRLConfig(use_outcome_reward=True), embedder=hashing)
    assert mem.reader(mem.snapshot()).observe([o], simulated)[0]["reward"].tolist() == [0.25]
    mem_bin = MemRLMemory(MemRLConfig(), embedder=hashing)
    assert mem_bin.reader(mem_bin.snapshot()).observe([o], simulated)[0]["reward"].tolist() == [1.0]


def test_new_memory_starts_at_q_init_and_rule_extraction_is_labelled(hashing, make_outcome, simulated):
    mem = MemRLMemory(MemRLConfig(q_init=0.0), embedder=hashing)
    ups = mem.reader(mem.snapshot()).observe([make_outcome("4 9 10 13", ("10 - 4 = 6; Answer: (10 - 4) * (13 - 9) = 24", True))], simulated)
    mem.apply(ups)
    snap = mem.snapshot()
    assert snap["q"].tolist() == [0.0] and snap["source"].tolist() == ["rule"]
    assert snap["experience"][0].startswith("Task: 4 9 10 13. Succeeded with:")
    hits = mem.reader(snap).retrieve(["4 9 10 13", "zzz qqq"])
    assert [h.id for h in hits[0]] == [0] and hits[1] == []


def test_llm_extraction_is_one_batch_with_episode_keys(hashing, make_outcome, scripted):
    llm = scripted(lambda r: "1. pair numbers to make 6 and 4\n2. multiply" if "4 9" in r.prompt else "")
    mem = MemRLMemory(MemRLConfig(extraction="auto"), embedder=hashing)
    outs = [make_outcome("4 9 10 13", ("x", True), key="7"), make_outcome("1 1 1 1", ("y", False), key="8")]
    ups = mem.reader(mem.snapshot()).observe(outs, llm)
    assert len(llm.batches) == 1 and [r.episode for r in llm.batches[0]] == ["7", "8"]
    assert "Outcome: failure" in llm.batches[0][1].prompt
    assert ups[0]["source"].tolist() == ["llm"] and "multiply" in ups[0]["experience"][0]
    assert ups[1]["source"].tolist() == ["rule-fallback"] and ups[1]["experience"][0].startswith("Task: 1 1 1 1. Failed")


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"select_k": 6}, "select_k"),
        ({"sim_threshold": 2.0}, "sim_threshold"),
        ({"extraction": "x"}, "extraction"),
        ({"z_clip": 0.0}, "z_clip"),
    ],
)
def test_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        MemRLConfig(**kw)
