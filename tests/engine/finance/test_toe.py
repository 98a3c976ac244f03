import json

import numpy as np
import pytest

from engine.finance.config import ProtocolConfig, SamplingConfig, ToEConfig
from engine.finance.methods import StreamContext
from engine.finance.simulated import simulated_backend
from engine.finance.synthetic import eval_days
from engine.finance.toe import PipeToE
from engine.llm.base import Completion, Response


class Scripted:
    """A backend answering each prompt kind with a fixed function; records every batch."""

    name = "scripted"
    model = "scripted"

    def __init__(self, rerank, merge=True):
        self.rerank = rerank
        self.merge = merge
        self.batches: list[list[str]] = []
        self.n = 0

    def generate(self, requests):
        kinds = [r.prompt.split("\n", 1)[0].split(":", 1)[1].strip() for r in requests]
        self.batches.append(kinds)
        out = []
        for r, kind in zip(requests, kinds):
            self.n += 1
            if kind == "ROUTE":
                text = json.dumps({"factor": "Policy planning"})
            elif kind == "RERANK":
                text = self.rerank(r.prompt, self.n)
            elif kind == "MERGE":
                text = json.dumps({"merge": self.merge, "text": "x"})
            else:
                text = json.dumps({"sentiment": {"10": 0.5, "20": 0.5, "40": 0.5}, "confidence": 0.5})
            out.append(Response((Completion(text, 1),), 1, 0.0, self.name, self.model))
        return out


def _method(market, embedder, **toe):
    ctx = StreamContext(market, ProtocolConfig(horizons=market.horizons), SamplingConfig(), 0, embedder)
    return PipeToE(ctx, ToEConfig(**toe), n_channels=len(market.truth["channels"]))


def _candidate_ids(prompt):
    return [int(line[1:line.index("]")]) for line in prompt.split("\n") if line[:1] == "[" and "]" in line]


def test_proposer_adds_at_most_one_direction_per_expansion(small_market, embedder):
    def rerank(prompt, n):  # tries to add several directions at once, in several ways
        return (json.dumps({"selected": [], "new_direction": f"Direction {n} alpha",
                            "new_directions": [f"Direction {n} beta", f"Direction {n} gamma"]})
                + "\n" + json.dumps({"selected": [], "new_direction": f"Direction {n} delta"}))

    method = _method(small_market, embedder, merge=False)
    llm = Scripted(rerank)
    for d in eval_days(small_market)[:15].tolist():
        before = method.tree.n_experiences
        reranks_before = method.stats["prompts_rerank"]
        method.step(d, llm)
        added = method.tree.n_experiences - before
        assert added <= method.stats["prompts_rerank"] - reranks_before
    texts = [method.tree.text[int(n)] for n in method.tree.leaf]
    assert texts and all(t.endswith("alpha") for t in texts)


def test_no_new_direction_when_a_candidate_fits(small_market, embedder):
    def rerank(prompt, n):
        ids = _candidate_ids(prompt.split("Candidate analysis directions")[1])
        if ids:
            return json.dumps({"selected": ids[:1], "new_direction": f"Extra {n}"})
        return json.dumps({"selected": [], "new_direction": "Subsidies lift demand"})

    method = _method(small_market, embedder)
    for d in eval_days(small_market)[:15].tolist():
        method.step(d, Scripted(rerank))
    # one direction per (industry, factor) prefix: nothing extra once one exists
    assert method.tree.n_experiences == len({int(method.tree.parent[n]) for n in method.tree.leaf})


def test_merges_keep_tree_counts_consistent(small_market, embedder):
    base = "Government subsidies stimulate end demand and lift sales volumes"
    variants = [base, base + " in the near term", base + " in the short term"]
    vecs = embedder.embed(variants)
    assert (vecs @ vecs.T).min() >= 0.8  # near-duplicates under the hashing embedder

    def rerank(prompt, n):
        return json.dumps({"selected": [], "new_direction": variants[n % 3]})

    method = _method(small_market, embedder)
    llm = Scripted(rerank, merge=True)
    for d in eval_days(small_market)[:20].tolist():
        method.step(d, llm)
    t = method.tree
    assert method.stats["merges"] > 0
    assert t.n_active + method.stats["merges"] == t.n_experiences
    assert np.all(t.hit[~t.active] == 0) and np.all(t.recall[~t.active] == 0)
    assert np.all(t.hit[t.active] <= t.recall[t.active])
    assert method.channel_hits.sum() == t.hit.sum()  # every hit attributed once, merges included
    for f in {int(t.parent[t.leaf[e]]) for e in np.flatnonzero(t.active)}:
        assert len(t.directions(f)) == 1  # the near-duplicates were folded into one


def test_one_batched_call_per_stage_per_day(small_market, embedder):
    method = _method(small_market, embedder)
    sim = simulated_backend(0)

    class Recorder:
        name, model = sim.name, sim.model

        def __init__(self):
            self.batches = []

        def generate(self, requests):
            self.batches.append([r.prompt.split("\n", 1)[0] for r in requests])
            return sim.generate(requests)

    rec = Recorder()
    for d in eval_days(small_market).tolist():
        n0 = len(rec.batches)
        method.step(d, rec)
        kinds = [b[0] for b in rec.batches[n0:]]
        assert len(kinds) == len(set(kinds))  # at most one generate call per stage
        assert all(len(set(b)) == 1 for b in rec.batches[n0:])
    assert method.stats["prompts_predict"] > 0 and method.applied_updates > 0


def test_llm_updater_moves_reliability(small_market, embedder):
    ctx = StreamContext(small_market, ProtocolConfig(horizons=small_market.horizons), SamplingConfig(), 0, embedder)
    method = PipeToE(ctx, ToEConfig(), update="llm")
    llm = simulated_backend(0)
    for d in eval_days(small_market).tolist():
        method.step(d, llm)
    assert method.stats["prompts_update"] > 0
    assert np.any(method.tree.q[method.tree.active] != 1.0)
    with pytest.raises(ValueError, match="update must be"):
        PipeToE(ctx, ToEConfig(), update="magic")
