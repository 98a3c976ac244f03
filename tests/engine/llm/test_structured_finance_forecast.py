"""Answer shapes of the finance prompts and ForeDreamer's editor and critic (issue 20, item 1):
declared once in engine.llm.structured, attached to the requests the methods send, in each
backend's own request format, and read back by the same tolerant parsers."""

import json

import jsonschema
import pytest

from engine.finance import prompts as P
from engine.llm import structured as S


def _valid(c, obj) -> bool:
    try:
        jsonschema.validate(obj, c.schema)
        return True
    except jsonschema.ValidationError:
        return False


def test_finance_schemas_accept_what_the_parsers_read_and_refuse_the_rest():
    pred = {"reasoning": "r", "key_factor": "k", "sentiment": {"10": 0.5, "20": -1, "40": 0}, "confidence": 0.7}
    c = S.finance_predict([10, 20, 40])
    assert _valid(c, pred)
    assert P.parse_prediction(json.dumps(pred), [10, 20, 40]).sentiment == (0.5, -1.0, 0.0)
    assert not _valid(c, {**pred, "sentiment": {"10": 0.5, "20": 0.1}})  # a horizon missing
    assert not _valid(c, {**pred, "sentiment": {"10": 2, "20": 0, "40": 0}})  # out of [-1, 1]
    rr = S.finance_rerank([7, 3])
    assert _valid(rr, {"selected": [3], "new_direction": None})
    assert P.parse_rerank(json.dumps({"selected": [3], "new_direction": None}), [7, 3]) == ([3], None)
    assert not _valid(rr, {"selected": [5], "new_direction": None})  # not a listed candidate
    assert _valid(S.finance_rerank([]), {"selected": [], "new_direction": "a new direction"})
    assert not _valid(S.finance_rerank([]), {"selected": [1], "new_direction": None})
    up = S.finance_update([4], 0.0, 2.0)
    assert _valid(up, {"updates": [{"eid": 4, "reliability": 1.2}]})
    assert not _valid(up, {"updates": [{"eid": 4, "reliability": 2.5}]})
    assert P.parse_update(json.dumps({"updates": [{"eid": 4, "reliability": 1.2}]}), [4]) == {4: 1.2}
    assert _valid(S.FINANCE_SENTIMENT, {"sentiment": -1}) and not _valid(S.FINANCE_SENTIMENT, {"sentiment": 0.5})
    assert _valid(S.FINANCE_MERGE, {"merge": True, "text": "t"}) and not _valid(S.FINANCE_MERGE, {"merge": "yes", "text": ""})
    assert _valid(S.FINANCE_ROUTE, {"industry": "Banks", "factor": "Policy"})


def test_editor_and_critic_schemas():
    from engine.forecast.evolution import parse_suggestions

    sug = {"priority": 1, "operation": "add", "target_experience_id": "", "new_text": "x", "analysis": "a",
           "generality_assessment": "g", "expected_benefit": "b"}
    assert _valid(S.FORECAST_EDITOR, {"suggestions": [sug]})
    assert parse_suggestions(json.dumps({"suggestions": [sug]})) == [sug]
    assert not _valid(S.FORECAST_EDITOR, {"suggestions": [{**sug, "operation": "rewrite"}]})
    assert _valid(S.FORECAST_CRITIC, {"should_evolve": False, "analysis": "", "design_requirement": ""})


@pytest.mark.parametrize("fmt,field", [("response_format", "response_format"), ("vllm", "guided_json"),
                                       ("llamacpp", "json_schema")])
def test_finance_constraint_in_each_server_dialect(fmt, field):
    c = S.finance_predict([10, 20, 40])
    body = S.request_fields(c, fmt)
    schema = body[field]["json_schema"]["schema"] if fmt == "response_format" else body[field]
    assert schema["properties"]["sentiment"]["required"] == ["10", "20", "40"]


def test_the_finance_methods_attach_their_shapes():
    """Every request the finance methods send carries the shape of its prompt kind."""
    from engine.embed import embedder_from_table
    from engine.executor import LocalExecutor
    from engine.finance.config import FinanceConfig
    from engine.finance.experiment import build_market, build_method, evaluation_days
    from engine.finance.methods import StreamContext, stream_episodes
    from engine.finance.simulated import simulated_backend

    seen: dict[str, int] = {}

    class Spy:
        def __init__(self):
            self.inner = simulated_backend(0)
            self.name, self.model = self.inner.name, self.inner.model

        def generate(self, requests):
            for r in requests:
                kind = r.constraint.kind if r.constraint is not None else "none"
                seen[kind] = seen.get(kind, 0) + 1
            return self.inner.generate(requests)

    cfg = FinanceConfig()
    market = build_market(cfg)
    days = evaluation_days(market, cfg)[:12]
    for name in ("Baseline", "Pipe", "Pipe+ToE", "Pipe+ToE (LLM update)"):
        ctx = StreamContext(market, cfg.protocol, cfg.sampling, 0, embedder_from_table(None))
        LocalExecutor().run(build_method(name, ctx, days, cfg, 9), stream_episodes(days, market.n_industries, 0),
                            Spy, round_size=market.n_industries)
    assert "none" not in seen, seen
    for kind in ("finance_predict", "finance_sentiment", "finance_route", "finance_rerank", "finance_update"):
        assert seen.get(kind, 0) > 0, (kind, seen)
