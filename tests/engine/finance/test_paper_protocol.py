"""The FinEvolveBench protocol as the ToE paper specifies it (appendix "Hyperparameters", "Fairness controls",
"Tree Representation"): leaf retrieval threshold, pre-test initialization, one feedback signal, date bounds,
merges that keep the merged text and merge factors, the path-CSV start, the news cap and the aggregate report."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.errors import ConfigError
from engine.executor import LocalExecutor
from engine.finance.config import MemoryConfig, ProtocolConfig, SamplingConfig, ToEConfig, load_finance_config
from engine.finance.experiment import build_market, day_plan
from engine.finance.methods import PipeMemory, StreamContext, feedback, retained_news, stream_episodes
from engine.finance.report import relative_improvement
from engine.finance.simulated import simulated_backend
from engine.finance.synthetic import eval_days
from engine.tasks import run
from engine.finance.toe import PipeToE, _FastView, leader_clusters
from engine.store import APPLIED, ExperienceStore, normalized_key
from engine.tasks import RunOptions

from .test_toe import Scripted

BASE = "Government subsidies stimulate end demand and lift sales volumes"
VARIANTS = [BASE, BASE + " in the near term", BASE + " in the short term"]


def _ctx(market, embedder, **protocol):
    return StreamContext(market, ProtocolConfig(horizons=market.horizons, **protocol), SamplingConfig(), 0, embedder)


def _toe(market, embedder, days, n_pretest=0, **toe):
    return PipeToE(_ctx(market, embedder), days, ToEConfig(**toe), n_channels=len(market.truth["channels"]),
                   n_pretest=n_pretest)


def _drive(method, llm, days, n):
    return LocalExecutor().run(method, stream_episodes(days, n, 0), lambda: llm, round_size=n)


def _view(method):
    return _FastView(ExperienceStore.from_snapshot(method.store.snapshot()), method.factor_into)


# --------------------------------------------------------------------------- retrieval: k1, then lam
def test_leaf_threshold_excludes_a_low_similarity_leaf(small_market, embedder):
    m = _toe(small_market, embedder, eval_days(small_market)[:5])
    ind = small_market.industries[0]
    close, far = BASE, "Sell-side rating changes steer institutional positioning"
    paths = [[ind, "Policy planning", close], [ind, "Policy planning", far]]
    rows = m.store.add_paths(paths, keys=[[normalized_key(t) for t in p] for p in paths])
    fnode = int(m.store.paths[rows[0], 1])
    news = embedder.embed([BASE + " after the new budget"])[0]
    sims = embedder.embed([close, far]) @ news
    assert sims[0] >= 0.8 > sims[1]  # the far leaf is below lambda = 0.8
    np.testing.assert_array_equal(m._candidates(_view(m), fnode, news), rows[:1])
    loose = _toe(small_market, embedder, eval_days(small_market)[:5], lam=-1.0)
    loose.store = m.store
    np.testing.assert_array_equal(loose._candidates(_view(loose), fnode, news), rows)  # no threshold: both
    first = _toe(small_market, embedder, eval_days(small_market)[:5], lam=-1.0, k1=1)
    first.store = m.store
    np.testing.assert_array_equal(first._candidates(_view(first), fnode, news), rows[:1])  # k1 at the first level


def test_merge_threshold_is_its_own_key():
    assert ToEConfig().lam == 0.8 and ToEConfig().merge_threshold == 0.8 and ToEConfig().k1 == 8
    with pytest.raises(ConfigError, match="toe.merge_threshold must be a cosine"):
        ToEConfig(merge_threshold=1.5)


# --------------------------------------------------------------------------- merges
def test_merge_keeps_the_text_the_merger_writes(small_market, embedder):
    merged = "Subsidy policy shifts end demand"
    days = eval_days(small_market)[:12]
    m = _toe(small_market, embedder, days)
    res = _drive(m, Scripted(lambda p, n: json.dumps({"selected": [], "new_direction": VARIANTS[n % 3]}),
                             merge=True, merge_text=merged), days, small_market.n_industries)
    st = m.store
    assert sum(r.record["merges"] for r in res) > 0
    act = np.flatnonzero(st.active)
    texts = {st.path_texts(int(e))[-1] for e in act}
    assert merged in texts
    for e in np.flatnonzero(~st.active):  # every folded direction went (transitively) into the merged text's row
        assert st.path_texts(int(st.canonical([int(e)])[0]))[-1] == merged
    assert np.all(st.hit[~st.active] == 0) and np.all(st.hit <= st.recall)
    assert m.channel_hits[: st.n_experiences].sum() == st.hit.sum()


def test_merged_reliability_is_the_hit_weighted_mean(small_market, embedder):
    m = _toe(small_market, embedder, eval_days(small_market)[:5])
    ind = small_market.industries[0]
    paths = [[ind, "Policy planning", t] for t in (VARIANTS[0], VARIANTS[1], "Merged text")]
    a, b, t = m.store.add_paths(paths, keys=[[normalized_key(x) for x in p] for p in paths])
    m._grow_channel_hits()
    m.store.set_reliability([a, b], np.array([[1.6, 1.0, 0.4], [0.4, 1.0, 1.6]]))
    m.store.set_counts([a, b], [4, 2], [3, 1])
    m._merge_rows(a, b, t)
    np.testing.assert_allclose(m.store.reliability[t], (3 * np.array([1.6, 1.0, 0.4]) + np.array([0.4, 1.0, 1.6])) / 4)
    assert m.store.hit[t] == 4 and m.store.recall[t] == 6 and not m.store.active[[a, b]].any()


def test_factor_merge_routes_a_close_new_factor_to_the_known_one(small_market, embedder):
    days = eval_days(small_market)[:10]
    names = ["Policy planning", "Policy planning outlook"]

    def route(prompt):
        return names[sum(map(ord, prompt)) % 2]

    def rerank(p, n):
        return json.dumps({"selected": [], "new_direction": BASE})

    n = small_market.n_industries
    eps = stream_episodes(days, n, 0)
    for merge, present in ((True, False), (False, True)):
        m = _toe(small_market, embedder, days, merge_threshold=0.75)
        llm = Scripted(rerank, merge=merge)
        res = LocalExecutor().run(m, eps[: 2 * n], lambda: llm, round_size=n)  # "Policy planning" is known
        llm.route = route  # from now on half the news go to a close new factor
        res += LocalExecutor().run(m, eps[2 * n:], lambda: llm, round_size=n)
        texts = {m.store.node_text(n) for n in range(m.store.n_nodes)}
        assert ("Policy planning outlook" in texts) is present
        assert any("MERGE FACTOR" in b for b in llm.batches)
        if merge:
            assert sum(r.record["merges"] for r in res) > 0


# --------------------------------------------------------------------------- pre-test span and initialization
def test_pretest_clustering_induces_the_initial_hierarchy(small_market, embedder):
    days = eval_days(small_market)[:10]
    names = ["Policy planning", "Policy planning outlook"]
    m = _toe(small_market, embedder, days, n_pretest=6, merge=False, merge_threshold=0.75)
    llm = Scripted(lambda p, n: json.dumps({"selected": [], "new_direction": VARIANTS[n % 3]}),
                   route=lambda p: names[sum(map(ord, p)) % 2])
    ex = LocalExecutor()
    eps = stream_episodes(days, small_market.n_industries, 0)
    ex.run(m, eps[: 6 * small_market.n_industries], lambda: llm, round_size=small_market.n_industries)
    rep = m.init_report
    assert rep["init"] == "cluster" and rep["factor_merges"] > 0 and rep["direction_merges"] > 0
    st = m.store
    assert rep["experiences"] == int(st.active.sum()) < rep["paths_collected"]
    for i, inode in enumerate(m.industry_node.tolist()):
        for f in m._children(inode):
            kids = st.node_column("eid")[m._children(f)]
            assert int(st.active[kids[kids >= 0]].sum()) <= 1  # one direction per factor left
    assert not np.isin(m.route, list(m.factor_into)).any()  # nothing routes to a merged factor
    assert m.channel_hits[: st.n_experiences].sum() == st.hit.sum()


def test_leader_clusters():
    v = np.array([[1, 0], [0.9, np.sqrt(1 - 0.81)], [0, 1]], dtype=np.float64)
    assert leader_clusters(v, np.array([0.0, 5.0, 1.0]), 0.8) == [(1, [1, 0]), (2, [2])]
    assert leader_clusters(v, np.zeros(3), 0.95) == [(0, [0]), (1, [1]), (2, [2])]
    assert leader_clusters(np.zeros((0, 2)), np.zeros(0), 0.8) == []


def test_init_tree_loads_a_table_a1_path_csv(small_market, embedder, tmp_path):
    ind = small_market.industries[0]
    csv = tmp_path / "tree.csv"
    csv.write_text(
        "industry,factor,analysis_direction,q_h10,q_h20,q_h40,recall,hit,eid\n"
        f"{ind},Macroeconomy,Pricing capacity utilization from aggregate-demand cycles,1.6602,0.5981,0.9529,705,208,1049\n"
        f"{ind},Policy planning,Supply-side administrative constraints and capacity-entry barriers,1.1205,0.3548,0.2004,1125,602,1044\n")
    m = _toe(small_market, embedder, eval_days(small_market)[:5], init_tree=str(csv))
    st = m.store
    assert st.n_experiences == 2 and m.init_report["init"] == "init_tree"
    e = st.rows_of([1049])[0]
    np.testing.assert_allclose(st.reliability[e], [1.6602, 0.5981, 0.9529])
    assert st.hit[e] == 208 and st.recall[e] == 705
    fnode = _view(m).find(int(m.industry_node[0]), normalized_key("macroeconomy"))
    assert fnode == int(st.paths[e, 1])  # the run's routing finds the imported factor
    exported = tmp_path / "exported.csv"  # `toe store export` of a tree with a merge: the merged-away row is left out
    exported.write_text("industry,factor,analysis_direction,q_h10,q_h20,q_h40,recall,hit,eid,active,merged_into\n"
                        f"{ind},Macroeconomy,A,1.5,1,1,3,2,0,true,-1\n{ind},Macroeconomy,A soon,1,1,1,0,0,1,false,0\n")
    m2 = _toe(small_market, embedder, eval_days(small_market)[:5], init_tree=str(exported))
    assert m2.store.n_experiences == 1 and m2.store.path_texts(0)[-1] == "A" and m2.store.reliability[0, 0] == 1.5
    csv.write_text("industry,factor,analysis_direction,q_h10,q_h20,q_h40,recall,hit,eid\n"
                   "Nowhere,Macroeconomy,x,1,1,1,0,0,1\n")
    with pytest.raises(ConfigError, match="names industry 'Nowhere'"):
        _toe(small_market, embedder, eval_days(small_market)[:5], init_tree=str(csv))
    with pytest.raises(ConfigError, match="toe.init_tree must name a path CSV"):
        load_finance_config(dict(TINY, toe={"init_tree": str(tmp_path / "missing.csv")}))


TINY = {
    "task": "finance", "methods": ["Pipe", "Pipe+MemRL", "Pipe+ToE"], "seeds": [0],
    "synthetic": {"n_industries": 3, "n_days": 24, "events_per_day": 2.0, "seed": 2},
    "llm": {"backend": "simulated"}, "plots": False,
}


def test_memory_methods_initialize_from_the_same_pretest_span(tmp_path):
    market = build_market(load_finance_config(TINY))
    cand = [str(market.dates[d]) for d in eval_days(market)]
    cfg = dict(TINY, protocol={"pretest_start": cand[0], "pretest_end": cand[3], "start": cand[4]})
    assert run(cfg, RunOptions(config_path=Path("t.toml"), out=tmp_path, progress=False)) == 0
    meta = json.loads((tmp_path / "summary.json").read_text())["meta"]
    assert meta["pretest"] == {"first_day": cand[0], "last_day": cand[3], "n_days": 4,
                               "methods": ["Pipe+MemRL", "Pipe+ToE"]}
    assert meta["first_day"] == cand[4]
    assert meta["toe_init"]["Pipe+ToE"]["0"]["init"] == "cluster"
    assert meta["toe_init"]["Pipe+ToE"]["0"]["paths_collected"] > 0
    rec = pq.read_table(tmp_path / "episodes.parquet").to_pylist()
    pre = {m: sorted((r["day"], r["industry"]) for r in rec if r["method"] == m and r["day"] < 4)
           for m in TINY["methods"]}
    assert pre["Pipe"] == [] and pre["Pipe+MemRL"] == pre["Pipe+ToE"] == [(j, i) for j in range(4) for i in range(3)]


# --------------------------------------------------------------------------- one feedback signal
def test_one_feedback_definition_across_memory_methods(small_market, embedder):
    days = eval_days(small_market)
    n = small_market.n_industries
    alpha = small_market.alpha
    toe = _toe(small_market, embedder, days)
    memrl = PipeMemory(_ctx(small_market, embedder), days, "memrl", MemoryConfig())
    for method in (toe, memrl):
        _drive(method, simulated_backend(0), days, n)
        led = method.store.ledger if method is toe else method.ledger
        ok = led.column("status") == APPLIED
        ep, hz = led.column("episode")[ok], led.column("horizon")[ok]
        want = feedback(led.column("action")[ok], alpha[ep % n, days[ep // n], hz])
        np.testing.assert_allclose(led.column("reward")[ok], want)  # r = a_t * o_{t+h}, graded, per horizon
        assert set(hz.tolist()) == set(range(len(small_market.horizons)))


# --------------------------------------------------------------------------- dates
def test_dates_bound_the_evaluation_and_the_exploitation_start():
    market = build_market(load_finance_config(TINY))
    cand = [str(market.dates[d]) for d in eval_days(market)]
    cfg = load_finance_config(dict(TINY, protocol={"start": cand[2], "end": cand[9], "exploitation_start": cand[5]}))
    plan = day_plan(market, cfg)
    assert [str(market.dates[d]) for d in plan.evaluated] == cand[2:10]
    assert plan.n_pretest == 0 and plan.exploitation == 3
    assert day_plan(market, load_finance_config(TINY)).exploitation == len(cand) // 3  # default: first third
    for protocol, match in (
        ({"start": "2025-13-01"}, "protocol.start must be an ISO date"),
        ({"start": cand[5], "end": cand[2]}, r"protocol.start .* must be on or before protocol.end"),
        ({"pretest_start": cand[0]}, "must be given together"),
        ({"pretest_start": cand[0], "pretest_end": cand[5], "start": cand[3]}, "must be before protocol.start"),
        ({"start": cand[2], "exploitation_start": cand[2]}, "exploitation_start .* must fall after the first"),
        ({"start": "2030-01-01"}, "evaluable trading days in the evaluation span"),
    ):
        with pytest.raises(ConfigError, match=match):
            day_plan(market, load_finance_config(dict(TINY, protocol=protocol)))


# --------------------------------------------------------------------------- news cap
def test_no_news_cap_by_default_and_the_cap_counts_what_it_drops(small_market):
    full, dropped = retained_news(small_market, ProtocolConfig(horizons=small_market.horizons))
    assert dropped == {}
    capped, dropped = retained_news(small_market, ProtocolConfig(horizons=small_market.horizons, max_news=1))
    assert all(len(v) == 1 for v in capped.values())
    assert sum(dropped.values()) == sum(len(v) for v in full.values()) - len(capped) > 0


def test_relative_improvement_over_pipe():
    rows = [{"method": m, "horizon": h, "period": p, "tsIC": v} for m, h, p, v in (
        ("Pipe", 10, "Exploitation", 0.10), ("Pipe", 10, "Overall", 0.20),
        ("ToE", 10, "Exploitation", 0.15), ("ToE", 10, "Overall", 0.10),
        ("Mem", 10, "Exploitation", None), ("Mem", 10, "Overall", 0.30))]
    rel = relative_improvement(rows)
    assert rel["ToE"]["Exploitation"] == pytest.approx(0.5) and rel["ToE"]["Overall"] == pytest.approx(-0.5)
    assert rel["ToE"]["all"] == pytest.approx(0.0) and rel["ToE"]["n_settings"] == 2
    assert rel["Mem"]["Exploitation"] is None and rel["Mem"]["all"] == pytest.approx(0.5)
    assert relative_improvement([r for r in rows if r["method"] != "Pipe"]) == {}
