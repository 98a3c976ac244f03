"""MemRL against MemTensor/MemRL@7c3beba: retrieve_query scoring, Q updates, key attachment, what is stored."""

import math

import numpy as np
import pytest

from engine.baselines.memrl import (
    MemRLConfig,
    MemRLMemory,
    adjustment_content,
    hybrid_scores,
    memory_context,
    procedure_content,
    q_update,
    trajectory_text,
)
from engine.errors import ConfigError

MU, SIGMA = 0.1856827586889267, 0.09407906234264374  # rl_hle_config.yaml sim_norm_mean / sim_norm_std


def _memory(fixed_embedder, at_sim, rows, **cfg):
    """Key i has cosine rows[i][0] with the query 'q'; each key holds the memories with Qs rows[i][1:]."""
    vecs = {"q": (1.0, 0.0)}
    vecs.update({f"k{i}": at_sim(r[0]) for i, r in enumerate(rows)})
    emb = fixed_embedder(vecs)
    mem = MemRLMemory(MemRLConfig(**cfg), embedder=emb)
    for i, (_, *qs) in enumerate(rows):
        key = int(mem.keys.append(emb.embed([f"k{i}"]), text=[f"k{i}"])[0])
        for q in qs:
            mem.table.append(np.zeros((1, 1), np.float32), key=[key], kind=["procedure"], content=[f"c{i}/{q}"], script=[""],
                             trajectory=[""], success=[1], q=[q], visits=[0], source=["rule"])
    return mem


def test_defaults_are_the_hle_config():
    c = MemRLConfig()
    assert (c.recall_k, c.select_k, c.sim_threshold, c.add_similarity_threshold) == (5, 3, 0.5, 0.90)
    assert (c.alpha, c.gamma, c.success_reward, c.failure_reward, c.q_min_threshold) == (0.3, 0.0, 1.0, -1.0, -10.0)
    assert (c.sim_norm_mean, c.sim_norm_std, c.q_init_success, c.q_init_failure) == (MU, SIGMA, 1.0, 0.0)


def test_q_update_arithmetic():
    assert q_update(0.0, 1.0, 0.3) == pytest.approx(0.3)
    assert q_update(1.0, -1.0, 0.3) == pytest.approx(0.4)
    assert q_update(0.5, 1.0, 0.3, gamma=0.5, next_max_q=2.0) == pytest.approx(0.7 * 0.5 + 0.3 * 2.0)


def test_similarity_z_uses_the_fixed_statistics_not_the_candidates():
    cfg = MemRLConfig()
    one = hybrid_scores(np.array([0.6]), np.array([0.0]), cfg)
    assert one[0] == pytest.approx(0.5 * (0.6 - MU) / SIGMA)  # one candidate: z(Q) = 0 (std taken as 1)
    two = hybrid_scores(np.array([0.6, 0.9]), np.array([0.0, 0.0]), cfg)
    assert two[0] == pytest.approx(one[0])  # adding a candidate does not move the first one's similarity term


def test_q_z_over_candidates_is_clipped_at_three():
    cfg = MemRLConfig()
    q = np.array([0.0] * 10 + [10.0])
    s = hybrid_scores(np.full(11, 0.7), q, cfg)
    assert math.sqrt(10) > 3.0 and s[10] == pytest.approx(0.5 * (0.7 - MU) / SIGMA + 0.5 * 3.0)


def test_retrieval_order_hand_computed(fixed_embedder, at_sim):
    # keys (sim, Qs...): k0 holds two memories; k3 is below sim_threshold 0.5; q = -20 is below q_min_threshold -10
    rows = [(0.9, -0.5, 1.0), (0.8, 0.3), (0.6, -20.0), (0.4, 5.0)]
    mem = _memory(fixed_embedder, at_sim, rows, select_k=3)
    hits = mem.reader(mem.snapshot()).retrieve(["q"])[0]
    cand_sim = np.array([0.9, 0.9, 0.8, 0.6])
    cand_q = np.array([-0.5, 1.0, 0.3, -20.0])  # Q statistics include the filtered one, as retrieve_query does
    zq = np.clip((cand_q - cand_q.mean()) / cand_q.std(), -3, 3)
    score = 0.5 * (cand_sim - MU) / SIGMA + 0.5 * zq
    want = sorted(range(3), key=lambda i: -score[i])  # the 4th (q -20) is filtered out
    assert [h.id for h in hits] == want
    assert [h.score for h in hits] == pytest.approx([score[i] for i in want], abs=1e-5)
    assert "c3/5.0" not in [h.text for h in hits]  # below sim_threshold: never a candidate


def test_recall_k_counts_keys_and_select_k_memories(fixed_embedder, at_sim):
    rows = [(0.95 - 0.05 * i, 0.0) for i in range(7)]
    mem = _memory(fixed_embedder, at_sim, rows, recall_k=5, select_k=2)
    hits = mem.reader(mem.snapshot()).retrieve(["q"])[0]
    assert [h.id for h in hits] == [0, 1]
    mem2 = _memory(fixed_embedder, at_sim, [(0.9, 0.0), (0.85, 0.0), (0.8, 0.0), (0.75, 0.0), (0.7, 0.0), (0.65, 99.0)], recall_k=5, select_k=1)
    assert [h.id for h in mem2.reader(mem2.snapshot()).retrieve(["q"])[0]] == [0]  # key 5 (best Q) is 6th: not recalled


def test_what_is_stored_success_and_failure(hashing, make_outcome, scripted):
    llm = scripted(lambda r: "1. subtract\n2. multiply" if "High-level script:" in r.messages[-1]["content"] else "I guessed.")
    mem = MemRLMemory(MemRLConfig(extraction="llm"), embedder=hashing)
    ok = make_outcome("4 9 10 13", ("13 - 9 = 4; Answer: (13 - 9) * (10 - 4) = 24", True), key="1")
    bad = make_outcome("1 1 1 1", ("1 + 1 = 2", False), key="2")
    ups = mem.reader(mem.snapshot()).observe([ok, bad], llm)
    assert len(llm.batches) == 1 and [r.episode for r in llm.batches[0]] == ["1", "2"]
    assert "This task failed." in llm.batches[0][1].messages[0]["content"] and llm.batches[0][1].temperature == 0.3
    mem.apply(ups)
    snap = mem.snapshot()
    traj = trajectory_text(ok)
    assert traj == "QUESTION\n4 9 10 13\n\nSOLUTION\n13 - 9 = 4; Answer: (13 - 9) * (10 - 4) = 24\n"
    assert snap["mem_content"][0] == procedure_content("4 9 10 13", "1. subtract\n2. multiply", traj)
    assert snap["mem_content"][0].startswith("Task: 4 9 10 13\n\nSCRIPT:\n1. subtract") and "TRAJECTORY:\nQUESTION" in snap["mem_content"][0]
    assert snap["mem_content"][1] == adjustment_content("1 1 1 1", "I guessed.", trajectory_text(bad))
    assert snap["mem_kind"].tolist() == ["procedure", "adjustment"]
    assert snap["mem_q"].tolist() == [1.0, 0.0]  # hle_runner: q_value 1.0 if solved else 0.0
    assert snap["mem_script"][0] == "1. subtract\n2. multiply" and snap["mem_trajectory"][1] == trajectory_text(bad)


def test_near_duplicate_task_is_attached_to_the_existing_key(fixed_embedder, at_sim, make_outcome, simulated):
    emb = fixed_embedder({"a": (1.0, 0.0), "a2": at_sim(0.95), "b": at_sim(0.6)})
    mem = MemRLMemory(MemRLConfig(), embedder=emb)
    mem.apply(mem.reader(mem.snapshot()).observe([make_outcome("a", ("x", True))], simulated))
    mem.apply(mem.reader(mem.snapshot()).observe([make_outcome("a2", ("y", False)), make_outcome("b", ("z", True))], simulated))
    snap = mem.snapshot()
    assert snap["key_text"].tolist() == ["a", "b"]  # a2 (cos 0.95 >= 0.90) filed under a; b (0.6) has its own key
    assert snap["mem_key"].tolist() == [0, 0, 1] and len(snap["mem_id"]) == 3 and mem.attached == 1
    hits = mem.reader(snap).retrieve(["a"])[0]
    assert sorted(h.id for h in hits) == [0, 1, 2]  # both memories of key a are candidates, with a's similarity


def test_q_update_of_used_memories_in_episode_order(fixed_embedder, at_sim, make_outcome, simulated):
    mem = _memory(fixed_embedder, at_sim, [(0.9, 0.0)])
    mem.embedder.vectors.update({"t1": mem.embedder.vectors["k0"], "t2": mem.embedder.vectors["k0"]})
    ups = mem.reader(mem.snapshot()).observe([
        make_outcome("t1", ("a", True), retrieved=[0], key="1"),
        make_outcome("t2", ("b", False), retrieved=[0, 0], key="2"),
    ], simulated)
    mem.apply(ups)
    row = mem.table.rows([0])[0]
    assert mem.table.data["q"][row] == pytest.approx(0.7 * 0.3 + 0.3 * -1.0)  # 0 -> 0.3 -> -0.09; a repeated id counts once
    assert mem.table.data["visits"][row] == 2


def test_prompt_block_splits_successes_and_failures():
    assert memory_context(["A", "B", "C"], [True, False, True]) == (
        "=== Successful Memories ===\nA\n\nC\n\n=== Failed Memories (for caution) ===\nB")
    assert memory_context(["B"], [False]) == "=== Failed Memories (for caution) ===\nB"


def test_threshold_report_counts_reachable_queries(fixed_embedder, at_sim, make_outcome, simulated):
    emb = fixed_embedder({"a": (1.0, 0.0), "far": at_sim(0.2), "near": at_sim(0.7)})
    mem = MemRLMemory(MemRLConfig(), embedder=emb)
    mem.apply(mem.reader(mem.snapshot()).observe([make_outcome("a", ("x", True))], simulated))
    mem.apply(mem.reader(mem.snapshot()).observe([make_outcome("far", ("y", True)), make_outcome("near", ("z", True))], simulated))
    rep = mem.threshold_report()
    assert rep["episodes"] == 2 and rep["reaching"] == 1 and rep["fraction_reaching"] == 0.5  # the first had no keys


def test_earlier_update_format_still_applies(hashing):
    mem = MemRLMemory(MemRLConfig(), embedder=hashing)
    mem.apply([{"used": np.zeros(0, np.int64), "reward": np.zeros(1), "intent": np.array(["chunk one"]),
                "experience": np.array(["chunk one"]), "source": np.array(["evidence"])}])
    hits = mem.reader(mem.snapshot()).retrieve(["chunk one"])[0]
    assert [h.text for h in hits] == ["chunk one"]


@pytest.mark.parametrize("kw, match", [({"alpha": 0.0}, "alpha"), ({"sim_threshold": 2.0}, "sim_threshold"),
                                       ({"extraction": "x"}, "extraction"), ({"z_clip": 0.0}, "z_clip"),
                                       ({"sim_norm_std": 0.0}, "sim_norm_std"), ({"recall_k": 0}, "recall_k")])
def test_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        MemRLConfig(**kw)
