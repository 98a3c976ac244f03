"""Finance ToE's node index (toe.index_min): same records where exact, checkpoint with the store, rebuilds."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.executor import LocalExecutor
from engine.finance.config import ProtocolConfig, SamplingConfig, ToEConfig
from engine.finance.methods import StreamContext, stream_episodes
from engine.finance.simulated import simulated_backend
from engine.finance.synthetic import SyntheticConfig, eval_days, generate_market
from engine.finance.toe import PipeToE, _FastView
from engine.store import ExperienceStore
from engine.store import persistence as P

ROOT = Path(__file__).resolve().parents[3]

# a method whose store holds n directions under one (industry, factor) prefix, its node index synced
BUILD = """
import numpy as np
from engine.embed import embedder_from_table
from engine.finance.config import ProtocolConfig, SamplingConfig, ToEConfig
from engine.finance.methods import StreamContext
from engine.finance.synthetic import SyntheticConfig, generate_market
from engine.finance.toe import PipeToE, _FastView
from engine.store import ExperienceStore

MARKET = generate_market(SyntheticConfig(n_industries=2, n_days=40, seed=0))
EMB = embedder_from_table(None)


def method():
    ctx = StreamContext(MARKET, ProtocolConfig(horizons=MARKET.horizons), SamplingConfig(), 0, EMB)
    return PipeToE(ctx, [35], ToEConfig(index_min=1, lam=-1.0))


def grow(m, n):
    have = m.store.n_experiences
    ind = MARKET.industries[0]
    m.store.add_paths([[ind, "Macroeconomy", f"direction {r}: rates, credit and the {r % 7}th sector"]
                       for r in range(have, n)], created=np.zeros(n - have))
    view = _FastView(ExperienceStore.from_snapshot(m.store.snapshot()), m._text_cache, m._dir_cache)
    fnode = int(m.store.paths[0, 1])
    return view, fnode, m._candidates(view, fnode, EMB.embed(["central bank cuts rates"])[0])
"""
ns: dict = {}
exec(compile(BUILD, "toe_index_build", "exec"), ns)  # the same code the killed subprocess runs


def _method(market, embedder, days, **toe):
    ctx = StreamContext(market, ProtocolConfig(horizons=market.horizons), SamplingConfig(), 0, embedder)
    return PipeToE(ctx, days, ToEConfig(**toe), n_channels=len(market.truth["channels"]))


def _records(method, market, days):
    n = market.n_industries
    out = LocalExecutor().run(method, stream_episodes(days, n, 0), lambda: simulated_backend(0), round_size=n)
    return json.dumps([{k: v for k, v in r.record.items() if not k.endswith("_s")} for r in out])  # NaN-safe


def _answers(m, view, fnode, queries):
    return [m._candidates(view, fnode, q).tolist() for q in queries]


def test_index_gives_the_brute_force_records_where_exact(small_market, embedder):
    """Every prefix through the node index (index_min = 1; prefixes of a few directions, where the graph
    finds them all) gives the records of the exact product: the index changes speed, not results."""
    days = eval_days(small_market)[:25]
    exact = _method(small_market, embedder, days, index_min=0, lam=0.3)
    indexed = _method(small_market, embedder, days, index_min=1, lam=0.3)
    assert _records(exact, small_market, days) == _records(indexed, small_market, days)
    assert exact.node_index.subtrees() == [] and indexed.node_index.subtrees()  # the switch: off vs used
    np.testing.assert_array_equal(exact.store.reliability, indexed.store.reliability)
    np.testing.assert_array_equal(exact.store.hit, indexed.store.hit)
    np.testing.assert_array_equal(exact.store.recall, indexed.store.recall)


def test_crossover_switch_below_and_above_index_min():
    m = ns["method"]()
    m.node_index.min_size = 50
    view, fnode, _ = ns["grow"](m, 49)
    assert m.node_index.subtrees() == []  # 49 directions: brute force
    view, fnode, _ = ns["grow"](m, 50)
    assert m.node_index.subtrees() == [fnode] and len(m.node_index.index(fnode)) == 50


def test_checkpoint_reloads_the_index_and_rebuilds_a_missing_or_mismatched_one(tmp_path):
    a = ns["method"]()
    view, fnode, _ = ns["grow"](a, 300)
    queries = ns["EMB"].embed([f"news {i} on rates and credit" for i in range(20)])
    want = _answers(a, view, fnode, queries)
    a.save_state(tmp_path)

    b = ns["method"]()
    b.load_state(tmp_path)
    assert b.node_index_dropped == [] and b.node_index.last_row(fnode) == 299
    assert _answers(b, view, fnode, queries) == want and b.node_index.builds == []  # loaded, not rebuilt

    ck = P.checkpoint_dir(tmp_path / "store")
    extra = ck / "extras" / f"node_index.{fnode}"
    manifest = json.loads((ck / "manifest.json").read_text())

    def reseal():
        manifest["files"] = {f: d for f, d in manifest["files"].items() if (ck / f).exists()}
        for f in manifest["files"]:
            manifest["files"][f] = {"bytes": (ck / f).stat().st_size, "sha256": P.sha256_file(ck / f)}
        (ck / "manifest.json").write_text(json.dumps(manifest))

    # an index that does not match the store (another prefix's rows): dropped, then rebuilt from the store
    other = ns["method"]()
    ns["grow"](other, 120)
    other.node_index.index(fnode).save(extra, tag={**a.node_index.tag, "subtree": fnode, "last": 299})
    reseal()
    c = ns["method"]()
    c.load_state(tmp_path)
    assert len(c.node_index_dropped) == 1 and "does not match its node table" in c.node_index_dropped[0]
    assert c.node_index.subtrees() == []
    assert _answers(c, view, fnode, queries) == want and c.node_index.builds == [fnode]

    # a missing index (a checkpoint written before the node index): rebuilt on first use, same answers
    extra.unlink()
    manifest["extras"] = []
    reseal()
    d = ns["method"]()
    d.load_state(tmp_path)
    assert d.node_index_dropped == [] and d.node_index.subtrees() == []
    assert _answers(d, view, fnode, queries) == want and d.node_index.builds == [fnode]


def test_index_of_another_embedder_or_config_is_rebuilt(tmp_path):
    a = ns["method"]()
    ns["grow"](a, 40)
    a.save_state(tmp_path)
    b = ns["method"]()
    b.node_index.tag = {"embedder": "other"}
    from engine.finance.toe_index import embedder_tag

    b.ctx.embedder = type("Other", (), {"name": "other", "embed": lambda self, t: np.ones((len(t), 8), np.float32)})()
    b.load_state(tmp_path)
    assert len(b.node_index_dropped) == 1 and "does not match" in b.node_index_dropped[0]
    c = ns["method"]()
    from dataclasses import replace

    c.node_index.config = replace(c.node_index.config, M=8)
    c.load_state(tmp_path)
    assert len(c.node_index_dropped) == 1 and "this run uses" in c.node_index_dropped[0]
    assert embedder_tag(ns["EMB"]) == a.node_index.tag


@pytest.mark.parametrize("fault, rows", [("TOE_INDEX_FAULT=graph", 300), ("TOE_INDEX_FAULT=header", 300),
                                         ("TOE_STORE_FAULT=manifest", 300), ("TOE_STORE_FAULT=current", 500)])
def test_kill_during_an_index_save_leaves_a_matching_index(tmp_path, fault, rows):
    """SIGKILL inside the index writer or the store's commit: the checkpoint that loads is the previous one
    with its own index, or (killed after the commit) the new one with its own; never a mismatch."""
    script = BUILD + textwrap.dedent(f"""
        import os, sys
        m = method()
        grow(m, 300)
        m.save_state(sys.argv[1])
        grow(m, 500)
        key, value = {fault!r}.split("=")
        os.environ[key] = value
        m.save_state(sys.argv[1])
        raise SystemExit("the fault did not fire")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    b = ns["method"]()
    b.load_state(tmp_path)
    assert b.store.n_experiences == rows
    assert b.node_index_dropped == [] and b.node_index.builds == []
    fresh = ns["method"]()
    view, fnode, _ = ns["grow"](fresh, rows)  # the same rows indexed from scratch
    assert b.node_index.last_row(fnode) == rows - 1
    queries = ns["EMB"].embed([f"news {i} on credit" for i in range(10)])
    assert _answers(b, view, fnode, queries) == _answers(fresh, view, fnode, queries)
    assert b.node_index.builds == []


def test_bad_index_settings_are_refused():
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"toe.index_min must be >= 0 \(0 = no node index\), got -1"):
        ToEConfig(index_min=-1)
    with pytest.raises(ConfigError, match="toe.index_ef must be >= 1, got 0"):
        ToEConfig(index_ef=0)
    assert ToEConfig().index_min == 128  # the measured crossover (benchmarks/results/finance_retrieval.md)
