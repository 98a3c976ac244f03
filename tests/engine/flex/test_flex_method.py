"""FLEX as a method: TF-IDF retrieval within the domain, recency, de-duplication, archival, validation, plateaus."""

import numpy as np
import pytest

from engine.baselines.common import Attempt, Outcome
from engine.embed import HashingEmbedder
from engine.errors import ConfigError
from engine.flex.memory import FlexConfig, FlexMemory, estimate_difficulty, extract_techniques
from engine.flex.tfidf import tfidf_matrix, tfidf_similarity
from engine.flex.tracking import PlateauRule, detect_plateau


class _Rule:  # a backend that cannot answer memory prompts: rule reflection
    name, model, answers_any_prompt = "simulated", "s", False

    def generate(self, requests):
        raise AssertionError("rule extraction sends nothing")


def _outcome(key, task, ok, domain="", verified=None):
    verified = ok if verified is None else verified
    return Outcome(key=key, seed=0, task=task, attempts=(Attempt(f"attempt for {task}", verified),), success=ok,
                   reward=1.0 if ok else -1.0, domain=domain)


def _episodes(mem):
    """The episode tag of each active record (a record's key is the tag, the seed and a problem digest)."""
    return [k.split("|")[0] for k in mem.snapshot()["key"].tolist()]


def _fill(mem, outcomes):
    mem.apply(mem.reader(mem.snapshot()).observe(outcomes, _Rule()))


def test_tfidf_matches_scikit_learn():
    sk = pytest.importorskip("sklearn.feature_extraction.text")
    texts = ["the cat sat on the mat", "dogs and cats", "a mat for the dog", "quantum chromodynamics", "cat cat cat"]
    want = sk.TfidfVectorizer(max_features=5).fit_transform(texts).toarray()
    np.testing.assert_allclose(tfidf_matrix(texts, 5), want, atol=1e-12)
    np.testing.assert_allclose(tfidf_matrix(texts, 100), sk.TfidfVectorizer(max_features=100).fit_transform(texts).toarray())


def test_retrieval_filters_by_domain_then_ranks_by_tfidf():
    mem = FlexMemory(FlexConfig(k=3), embedder=HashingEmbedder(32))
    _fill(mem, [_outcome("a", "integrate the polynomial", True, "math"),
                _outcome("b", "sort the linked list", True, "code"),
                _outcome("c", "factor the polynomial quickly", False, "math"),
                _outcome("d", "prove the lemma", True, "math")])
    hits = mem.reader(mem.snapshot()).retrieve(["polynomial roots"], domains=["math"])[0]
    assert [h.extra["problem"] for h in hits] == ["integrate the polynomial", "factor the polynomial quickly",
                                                  "prove the lemma"]  # code is filtered out; ties by library order
    # the seed fits TF-IDF on the domain's problems plus the query
    sims = tfidf_similarity("polynomial roots", ["integrate the polynomial", "factor the polynomial quickly",
                                                 "prove the lemma"])
    assert [h.score for h in hits] == pytest.approx(list(sims)) and sims[0] > sims[1] > sims[2] == 0
    assert mem.reader(mem.snapshot()).retrieve(["x"], domains=["biology"]) == [[]]


def test_recency_weighting_prefers_newer_records():
    cfg = dict(k=3, retrieval="tfidf")
    tasks = ["alpha beta", "alpha beta", "gamma delta"]
    plain, recent = FlexMemory(FlexConfig(**cfg), embedder=HashingEmbedder(32)), \
        FlexMemory(FlexConfig(**cfg, recency_half_life=1.0), embedder=HashingEmbedder(32))
    for mem in (plain, recent):
        _fill(mem, [_outcome(str(i), t, True) for i, t in enumerate(tasks)])
    first = lambda m: m.reader(m.snapshot()).retrieve(["alpha beta"])[0][0]  # noqa: E731
    assert first(plain).id == 0 and first(recent).id == 1  # equal similarity: the newer one wins
    assert first(recent).score == pytest.approx(0.5)  # age 1 record at half-life 1


def test_dedup_archives_the_older_near_duplicate_and_max_records_the_oldest(tmp_path):
    path = tmp_path / "lib.jsonl"
    mem = FlexMemory(FlexConfig(dedup_threshold=0.99, max_records=2, library=str(path)), embedder=HashingEmbedder(64))
    _fill(mem, [_outcome("1", "compute 3 + 4", True), _outcome("2", "compute 5 + 9", True)])
    _fill(mem, [_outcome("3", "compute 3 + 4", True)])  # the same problem, the same outcome
    assert mem.archived["duplicate"] == 1 and sorted(_episodes(mem)) == ["2", "3"]
    _fill(mem, [_outcome("4", "something else entirely", False)])
    assert mem.archived["max_records"] == 1 and _episodes(mem) == ["3", "4"]
    reload = FlexMemory(FlexConfig(library=str(path)), embedder=HashingEmbedder(64))
    assert _episodes(reload) == ["3", "4"] and reload.next_step == 4


def test_validation_rejects_a_success_no_checker_verified():
    mem = FlexMemory(FlexConfig(), embedder=HashingEmbedder(32))
    _fill(mem, [_outcome("1", "p one", True, verified=False), _outcome("2", "p two", True)])
    assert mem.rejected == 1 and _episodes(mem) == ["2"]
    off = FlexMemory(FlexConfig(validate=False), embedder=HashingEmbedder(32))
    _fill(off, [_outcome("1", "p one", True, verified=False)])
    assert off.rejected == 0 and len(off.table) == 1


def test_the_seeds_record_rules():
    assert estimate_difficulty("w " * 49) == "easy" and estimate_difficulty("w " * 50) == "medium"
    assert estimate_difficulty("w " * 200) == "hard"
    assert extract_techniques("Split it, then use recursion and a greedy pass") == ["divide-and-conquer", "recursion",
                                                                                     "greedy"]


def _curve(per_window, window=10):
    """Outcomes with ``c`` successes in each window of ``window`` (spread over the window)."""
    out = []
    for c in per_window:
        w = np.zeros(window)
        w[np.linspace(0, window - 1, c).astype(int) if c else []] = 1.0
        out.append(w)
    return np.concatenate(out)


def test_plateau_fires_on_a_flat_curve_and_not_on_a_rising_one():
    rule = PlateauRule(window=10, min_gain=0.05, patience=2)
    rising = _curve([1, 3, 5, 7, 9])  # +0.2 every window
    learned = _curve([1, 5, 7, 7, 7, 7])  # learns, then stops improving after the third window
    assert detect_plateau(rising, rule) is None
    assert detect_plateau(learned, rule) == 50  # windows 4 and 5 gained 0 < 0.05: declared at episode 50
    assert detect_plateau(np.ones(15), rule) is None  # one full window: nothing to compare
    assert detect_plateau(learned, PlateauRule(window=10, min_gain=0.05, patience=3)) == 60


@pytest.mark.parametrize("kw, match", [({"retrieval": "bm25"}, "flex.retrieval must be tfidf or embedding"),
                                       ({"dedup_threshold": 1.5}, r"flex.dedup_threshold must be in \[0, 1\]"),
                                       ({"recency_half_life": -1.0}, "flex.recency_half_life must be >= 0"),
                                       ({"window": 0}, "flex.window must be >= 1")])
def test_config_errors_name_the_key(kw, match):
    with pytest.raises(ConfigError, match=match):
        FlexConfig(**kw)
