import numpy as np
import pytest

from engine.errors import ConfigError, InputError
from engine.finance.data import forward_excess_returns, load_market, save_market
from engine.finance.synthetic import SyntheticConfig, channel_truth, generate_market


def test_forward_excess_returns_by_hand():
    close = np.array([[100.0, 110.0, 121.0, 100.0]])
    bench = np.array([10.0, 10.0, 11.0, 12.0])
    a = forward_excess_returns(close, bench, (1, 2))
    assert a.shape == (1, 4, 2)
    assert a[0, 0, 0] == pytest.approx(0.10 - 0.0)
    assert a[0, 1, 1] == pytest.approx(100 / 110 - 1 - (12 / 10 - 1))
    assert np.isnan(a[0, 3, 0]) and np.isnan(a[0, 2, 1])


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_loader_round_trip(tmp_path, small_market, ext):
    news, prices = tmp_path / f"news.{ext}", tmp_path / f"prices.{ext}"
    save_market(small_market, news, prices)
    m = load_market(news, prices, small_market.horizons)
    assert m.industries == tuple(sorted(small_market.industries))
    order = [small_market.industries.index(x) for x in m.industries]
    np.testing.assert_allclose(m.alpha, small_market.alpha[order], equal_nan=True)
    assert len(m.news) == len(small_market.news)
    k = 5
    assert m.news.title[k] == small_market.news.title[k]
    assert m.news.day[k] == small_market.news.day[k]
    assert {m.industries[i] for i in m.news.industries[k]} == {small_market.industries[i] for i in small_market.news.industries[k]}


def test_loader_errors(tmp_path, small_market):
    news, prices = tmp_path / "news.csv", tmp_path / "prices.csv"
    save_market(small_market, news, prices)
    with pytest.raises(InputError, match="does not exist"):
        load_market(tmp_path / "nope.csv", prices)
    with pytest.raises(InputError, match="expected a .csv or .parquet"):
        load_market(tmp_path / "news.txt", prices) if (tmp_path / "news.txt").write_text("x") else None
    bad = tmp_path / "bad_prices.csv"
    bad.write_text("date,industry,close\n2025-01-02,Retail,1.0\n")
    with pytest.raises(InputError, match="missing column"):
        load_market(news, bad)
    bad.write_text("date,industry,close,benchmark_close\n2025-01-02,Retail,1.0,1\n2025-01-02,Retail,2.0,1\n")
    with pytest.raises(InputError, match="duplicate"):
        load_market(news, bad)
    bad.write_text("date,industry,close,benchmark_close\n2025-01-02,Retail,-1.0,1\n2025-01-03,Retail,2.0,1\n")
    with pytest.raises(InputError, match="close must be finite and > 0"):
        load_market(news, bad)
    bn = tmp_path / "bad_news.csv"
    bn.write_text("news_id,publish_time,title,content,industries,importance\n1,2025-01-02,t,c,Nowhere,9\n")
    with pytest.raises(InputError, match="unknown industry 'Nowhere'"):
        load_market(bn, prices)
    bn.write_text("news_id,publish_time,title,content,industries,importance\n1,2025-01-02,t,c,Retail,11\n")
    with pytest.raises(InputError, match="importance"):
        load_market(bn, prices)


def test_generator_is_seeded_and_exposes_truth():
    cfg = SyntheticConfig(n_industries=3, n_days=20, seed=5)
    a, b = generate_market(cfg), generate_market(cfg)
    np.testing.assert_array_equal(a.close, b.close)
    assert a.news.title == b.news.title
    c = generate_market(SyntheticConfig(n_industries=3, n_days=20, seed=6))
    assert not np.array_equal(a.close, c.close)
    t = a.truth
    roles = dict(zip(t["channels"], t["roles"]))
    rt = dict(zip(t["channels"], t["reading_truth"][:, 1]))
    assert roles["pricing"] == "misleading" and rt["pricing"] < 0  # the paper's price-cut example
    assert roles["subsidy"] == "predictive" and rt["subsidy"] > 0
    assert roles["buzz"] == "noise" and rt["buzz"] == 0
    assert set(np.unique(a.news.importance)) <= set(range(3, 11))
    assert np.array_equal(channel_truth((10, 20, 40))["true_sign"], t["true_sign"])


def test_true_effects_move_returns():
    """Averaged over many events, excess returns follow true_sign * polarity (not the intuitive reading)."""
    m = generate_market(SyntheticConfig(n_industries=4, n_days=400, events_per_day=3, daily_noise=0.002, seed=1))
    nw, t = m.news, m.truth
    major = nw.importance >= 8
    for c, name in enumerate(t["channels"]):
        sel = np.flatnonzero(major & (nw.channel == c) & (nw.day < m.n_days - 45))
        r = np.array([m.alpha[nw.industries[k][0], nw.day[k], 1] * nw.polarity[k] for k in sel])
        if t["true_sign"][c] == 0:
            assert abs(r.mean()) < 0.01, name
        else:
            assert np.sign(r.mean()) == t["true_sign"][c], name


def test_generator_config_errors():
    with pytest.raises(ConfigError, match="n_industries"):
        SyntheticConfig(n_industries=1)
    with pytest.raises(ConfigError, match="channels"):
        SyntheticConfig(channels=("nope",))
