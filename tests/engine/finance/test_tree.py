import math

import numpy as np
import pytest

from engine.errors import InputError, PersistenceError, StoreError
from engine.finance.tree import ExperienceTree


def _tree():
    t = ExperienceTree((10, 20, 40))
    f1 = t.prefix("Retail", "Policy planning")
    f2 = t.prefix("Retail", "Company fundamentals")
    a, _ = t.add(f1, "Subsidies lift demand", 0)
    b, _ = t.add(f1, "Subsidies lift demand in the near term", 1)
    c, _ = t.add(f2, "Price cuts hurt margins", 1)
    return t, f1, f2, a, b, c


def test_prefixes_are_shared_and_equal_texts_reuse_the_experience():
    t, f1, f2, a, b, c = _tree()
    assert t.prefix("Retail", "Policy planning") == f1
    assert t.parent[f1] == t.parent[f2]  # one industry node
    e, created = t.add(f1, "  subsidies   LIFT demand ", 5)
    assert (e, created) == (a, False)
    assert t.n_nodes == 1 + 1 + 2 + 3
    assert t.directions(f1).tolist() == [a, b]
    assert t.path(c) == ("Retail", "Company fundamentals", "Price cuts hurt margins")
    np.testing.assert_array_equal(t.q[a], [1.0, 1.0, 1.0])  # q0 for a new path


def test_formula_update_matches_eq_a6():
    t, *_ , a, b, c = _tree()
    t.count_hit([a, a, a])
    t.formula_update([a, a, b], [0, 0, 2], [0.05, -0.02, 0.3])
    q = 1.0
    for r in (0.05, -0.02):
        q = min(2, max(0, q + 10 * (1 - (q - 1) ** 2) / (1 + math.log(1 + 3)) * r))
    assert t.q[a, 0] == pytest.approx(q)
    assert t.q[b, 2] == 2.0  # clipped to the upper bound (n_hit = 0: step 10 * 0.3)
    assert t.q[c].tolist() == [1.0, 1.0, 1.0]


def test_delta_update_clips():
    t, *_, a, b, c = _tree()
    t.delta_update([a, a], [1, 1], [-0.7, -0.7])
    assert t.q[a, 1] == 0.0


def test_merge_keeps_counts_consistent():
    t, f1, f2, a, b, c = _tree()
    t.count_recall([a, a, b, b, b, c])
    t.count_hit([a, b, b, c])
    t.formula_update([b], [0], [0.02])
    before_hit, before_recall = t.hit.sum(), t.recall.sum()
    qa, qb = t.q[a].copy(), t.q[b].copy()
    t.merge(a, b)
    assert t.n_experiences == 3 and t.n_active == 2
    assert t.hit.sum() == before_hit and t.recall.sum() == before_recall
    assert t.hit[a] == 3 and t.recall[a] == 5
    np.testing.assert_allclose(t.q[a], (1 * qa + 2 * qb) / 3)  # hit-weighted
    assert t.resolve(b) == a
    assert t.directions(f1).tolist() == [a]
    assert np.all(t.hit[t.active] <= t.recall[t.active])
    # adding the merged text again lands on the surviving experience
    assert t.add(f1, "Subsidies lift demand in the near term", 9) == (a, False)
    assert len(t.rows()["eid"]) == 2


def test_merge_errors():
    t, f1, f2, a, b, c = _tree()
    with pytest.raises(StoreError, match="not siblings"):
        t.merge(a, c)
    with pytest.raises(StoreError, match="into itself"):
        t.merge(a, a)
    with pytest.raises(StoreError, match="unknown eid 99"):
        t.resolve(99)


def test_bad_updates_change_nothing():
    t, *_, a, b, c = _tree()
    q = t.q.copy()
    with pytest.raises(InputError, match="finite"):
        t.formula_update([a, b], [0, 0], [0.1, np.nan])
    with pytest.raises(InputError, match="horizon columns"):
        t.formula_update([a], [3], [0.1])
    with pytest.raises(StoreError, match="eids out of range"):
        t.count_hit([7])
    np.testing.assert_array_equal(t.q, q)


def test_csv_round_trip(tmp_path):
    t, f1, f2, a, b, c = _tree()
    t.count_recall([a, c, c])
    t.count_hit([c])
    t.formula_update([c], [1], [0.05])
    t.merge(a, b)
    t.save_csv(tmp_path / "tree.csv")
    u = ExperienceTree.load_csv(tmp_path / "tree.csv")
    assert u.horizons == (10, 20, 40) and u.n_active == 2
    rows_t, rows_u = t.rows(), u.rows()
    for col in ("industry", "factor", "analysis_direction", "q_h10", "q_h20", "q_h40", "recall", "hit"):
        assert rows_t[col] == rows_u[col]
    (tmp_path / "bad.csv").write_text("industry,factor\nA,B\n")
    with pytest.raises(PersistenceError, match="lacks column"):
        ExperienceTree.load_csv(tmp_path / "bad.csv")
    with pytest.raises(PersistenceError, match="does not exist"):
        ExperienceTree.load_csv(tmp_path / "none.csv")
