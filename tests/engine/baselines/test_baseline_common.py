"""Shared helpers of the baseline memories: z-scores, top-k, JSON parsing, records, modes."""

import numpy as np
import pytest

from engine.baselines.common import Outcome, parse_json, resolve_extraction, str_array, texts_of, top_k, zscore
from engine.baselines.store import TEXT, MemoryTable, TableView
from engine.errors import InputError, StoreError


def test_zscore_matches_population_formula():
    x = np.array([0.9, 0.8, 0.6])
    mean = sum(x) / 3
    sd = (sum((v - mean) ** 2 for v in x) / 3) ** 0.5
    assert np.allclose(zscore(x), [(v - mean) / sd for v in x])
    assert zscore(np.array([0.5, 0.5])).tolist() == [0.0, 0.0]
    assert zscore(np.array([0.7])).tolist() == [0.0]


def test_top_k_orders_by_score_then_index_and_respects_mask():
    s = np.array([0.2, 0.9, 0.9, 0.5])
    assert top_k(s, 3).tolist() == [1, 2, 3]
    assert top_k(s, 10, s >= 0.5).tolist() == [1, 2, 3]
    assert top_k(s, 2, np.zeros(4, bool)).tolist() == []


@pytest.mark.parametrize(
    "text, want",
    [
        ('[{"a": 1}]', [{"a": 1}]),
        ('sure: ```json\n{"memory": []}\n``` done', {"memory": []}),
        ('noise {"x": 2} tail', {"x": 2}),
        ("no json here", None),
        ("", None),
    ],
)
def test_parse_json(text, want):
    assert parse_json(text) == want


class _Model:
    """A backend without the capability attribute: a model, which answers any prompt."""

    name, model = "vllm", "m"

    def generate(self, requests):
        return []


def test_resolve_extraction_reads_the_capability_not_the_name():
    from engine.game24.simulated_policy import simulated_backend
    from engine.llm.base import MeteredBackend
    from engine.llm.structured import ConstraintSwitch

    sim = simulated_backend()
    assert resolve_extraction("auto", sim) == "rule"
    assert resolve_extraction("auto", MeteredBackend(sim)) == "rule"  # through the meter
    assert resolve_extraction("auto", _Model()) == "llm"
    assert resolve_extraction("auto", MeteredBackend(ConstraintSwitch(_Model()))) == "llm"
    renamed = _Model()
    renamed.name = "simulated"  # a model that happens to be called "simulated" is still a model
    assert resolve_extraction("auto", renamed) == "llm"
    assert resolve_extraction("rule", _Model()) == "rule"
    assert resolve_extraction("llm", sim) == "llm"
    with pytest.raises(InputError, match="extraction must be one of"):
        resolve_extraction("magic", _Model())
    with pytest.raises(InputError, match="takes the backend, not a name"):
        resolve_extraction("auto", "simulated")


def test_outcome_validates_task_and_reward():
    with pytest.raises(InputError, match="Outcome.task"):
        Outcome(key="e", seed=0, task=" ", attempts=(), success=False, reward=-1.0)
    with pytest.raises(InputError, match="Outcome.reward"):
        Outcome(key="e", seed=0, task="t", attempts=(), success=False, reward=float("nan"))


def test_text_arrays_round_trip_and_empty_is_unicode():
    assert str_array([]).dtype.kind == "U"
    assert texts_of(str_array(["a b", "c"])) == ["a b", "c"]


def test_memory_table_append_delete_snapshot():
    t = MemoryTable({"txt": TEXT, "q": "f8"}, 2)
    ids = t.append(np.eye(2, dtype=np.float32), txt=["a", "b"], q=[0.1, 0.2])
    assert ids.tolist() == [0, 1]
    assert t.delete([0, 7]) == 1
    ids2 = t.append(np.eye(2, dtype=np.float32)[:1], txt=["c"], q=[0.3])
    assert ids2.tolist() == [2]  # ids are never reused
    snap = t.snapshot()
    assert snap["id"].tolist() == [1, 2] and snap["txt"].tolist() == ["b", "c"] and snap["txt"].dtype.kind == "U"
    view = TableView(snap, {"txt": TEXT, "q": "f8"}, 2)
    assert view.text("txt", 1) == "c"
    assert t.rows([2]).tolist() == [1]
    with pytest.raises(StoreError, match="unknown memory ids"):
        t.rows([0])
    with pytest.raises(InputError, match="missing"):
        t.append(np.eye(2, dtype=np.float32)[:1], txt=["d"])
    with pytest.raises(InputError, match=r"embedding must have shape"):
        t.append(np.ones((1, 3), np.float32), txt=["d"], q=[0.0])
    with pytest.raises(InputError, match="snapshot lacks"):
        TableView({"id": snap["id"]}, {"txt": TEXT}, 2)


def test_cosine_scores_do_not_depend_on_the_batch(rng):
    from engine.baselines.common import cosine_scores

    index = rng.standard_normal((50, 16)).astype(np.float32)
    queries = rng.standard_normal((7, 16)).astype(np.float32)
    full = cosine_scores(index, queries)
    for i in range(7):
        assert np.array_equal(full[i], cosine_scores(index, queries[i : i + 1])[0])
    with pytest.raises(InputError, match="embedding widths differ"):
        cosine_scores(index, queries[:, :8])
