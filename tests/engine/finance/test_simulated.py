
import pytest

from engine.errors import ConfigError
from engine.finance import prompts as P
from engine.finance.channels import CHANNELS, direction_text
from engine.finance.simulated import PRIOR, SimulatedFinanceParams, simulated_backend
from engine.llm.base import Request

NEWS = P.NewsLine("2025-03-03", 9, "Retail firms cut selling prices",
                  "Changes in selling prices move the profit earned on each unit sold.")


def _predict(exp_q=None, seed=0, idx_n=1):
    exps = ()
    if exp_q is not None:
        exps = (P.ExperienceLine(1, ("Retail", "Company fundamentals", CHANNELS[1].direction), (exp_q,) * 3),)
    prompt = P.predict_prompt("Retail", "2025-03-03", (10, 20, 40), [NEWS], exps)
    resp = simulated_backend(seed, SimulatedFinanceParams(noise=0.0, p_misread=0.0)).generate(
        [Request(prompt=prompt, n=idx_n)])
    return [P.parse_prediction(t, (10, 20, 40)) for t in resp[0].texts]


def test_deterministic_per_prompt_seed_and_sample():
    prompt = P.predict_prompt("Retail", "2025-03-03", (10, 20, 40), [NEWS])
    pol = simulated_backend(1)
    a = pol.generate([Request(prompt=prompt, n=3)])[0].texts
    b = pol.generate([Request(prompt="### TASK: SENTIMENT\nx"), Request(prompt=prompt, n=3)])[1].texts
    assert a == b  # not a function of the batch
    c = simulated_backend(2).generate([Request(prompt=prompt, n=3)])[0].texts
    assert a != c and len(set(a)) == 3
    g = [simulated_backend(s).generate([Request(prompt=prompt, temperature=0.0)])[0].texts[0] for s in (1, 2)]
    assert g[0] == g[1]
    assert pol.generate([Request(prompt=prompt)])[0].backend == "simulated"


def test_prior_is_right_on_some_channels_and_wrong_on_others():
    roles = {c.name: c.role for c in CHANNELS}
    for c in CHANNELS:
        if roles[c.name] == "predictive":
            assert PRIOR[c.name] == c.true_sign
        elif roles[c.name] == "misleading":
            assert PRIOR[c.name] == -c.true_sign
        else:
            assert c.true_sign == 0
    # price cut read as negative (the intuitive, wrong reading)
    pred = _predict()[0]
    assert all(s < 0 for s in pred.sentiment)


def test_reliability_scales_the_reading():
    low, mid, high = (_predict(q)[0].sentiment[0] for q in (0.0, 1.0, 2.0))
    assert low == pytest.approx(0.0, abs=1e-9) and high < mid < 0


def test_every_prompt_kind_parses():
    pol = simulated_backend(0)
    route = P.route_prompt("Retail", ["Macroeconomy", "Policy planning"], NEWS.title, NEWS.content)
    rerank = P.rerank_prompt("Retail", "Company fundamentals", NEWS.title, NEWS.content,
                             [(4, CHANNELS[1].direction), (7, CHANNELS[0].direction)])
    rerank_none = P.rerank_prompt("Retail", "Company fundamentals", NEWS.title, NEWS.content, [(7, CHANNELS[0].direction)])
    merge = P.merge_prompt("Retail", "Company fundamentals", CHANNELS[1].direction, CHANNELS[1].direction + " in the near term")
    sent = P.sentiment_prompt("Retail", NEWS.title, NEWS.content)
    upd = P.update_prompt("Retail", "2025-03-03", 20, 0.4, -0.02, -0.008, [(4, ("Retail", "F", "d"), 1.2)])
    params = SimulatedFinanceParams(p_misread=0, p_misroute=0, p_miss=0, p_spurious=0, p_merge_error=0)
    texts = [r.texts[0] for r in simulated_backend(0, params).generate(
        [Request(prompt=p) for p in (route, rerank, rerank_none, merge, sent, upd)])]
    assert P.parse_route(texts[0]) == "Company fundamentals"
    assert P.parse_rerank(texts[1], [4, 7]) == ([4], None)
    sel, new = P.parse_rerank(texts[2], [7])
    assert sel == [] and new.startswith(direction_text(CHANNELS[1], "Retail"))  # the industry's analyst writes it
    assert P.parse_merge(texts[3]) == (True, direction_text(CHANNELS[1], "Retail"))
    assert P.parse_sentiment(texts[4]) == -1
    assert 0.0 <= P.parse_update(texts[5], [4])[4] < 1.2
    assert pol.generate([Request(prompt="hello")])[0].texts == [""]


def test_params_are_validated():
    with pytest.raises(ConfigError, match="p_misread"):
        SimulatedFinanceParams(p_misread=1.5)
    with pytest.raises(ConfigError, match="noise"):
        SimulatedFinanceParams(noise=-1)


def test_parsers_are_defensive():
    assert P.first_json("noise {not json} ```json\n{\"a\": {\"b\": 1}}\n``` tail") == {"a": {"b": 1}}
    assert P.parse_prediction("garbage", (10,)) is None
    assert P.parse_prediction('{"sentiment": {"10": 3}, "confidence": -2}', (10,)).sentiment == (1.0,)
    assert P.parse_prediction('{"sentiment": {"10": 0.2}, "confidence": -2}', (10,)).confidence == 0.0
    assert P.parse_prediction('{"sentiment": {"20": 0.2}}', (10,)) is None
    assert P.parse_prediction('{"sentiment": {"10": NaN}}', (10,)) is None
    assert P.parse_rerank('{"selected": [1, "x", 99, 1], "new_direction": "null"}', [1, 2]) == ([1], None)
    assert P.parse_merge('{"merge": "yes"}') is None
    assert P.parse_update('{"updates": [{"eid": 1, "reliability": 5}, {"eid": 8}]}', [1]) == {1: 2.0}
    assert P.parse_route("") is None and P.parse_sentiment("{}") is None
