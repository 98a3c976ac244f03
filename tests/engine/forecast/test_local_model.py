"""The real embedded model (SmolLM2-135M through llama.cpp) drives the agent end to end on one question."""

import pytest

from engine.forecast.agent import AgentConfig, ForecastAgent
from engine.forecast.data import load_prophet_arena
from engine.llm.base import MeteredBackend
from engine.llm.config import load_llm_config

pytestmark = [pytest.mark.local_model, pytest.mark.slow]


def test_local_model_episode_completes(pa_folder, tmp_path):
    pytest.importorskip("xllamacpp")
    from engine.llm.factory import make_backend

    q = load_prophet_arena(pa_folder, ["Economics"])[0]
    llm = MeteredBackend(make_backend(load_llm_config({"backend": "local", "local": {"context": 4096, "parallel": 1}})))
    try:
        agent = ForecastAgent(llm, None, AgentConfig(mode="full_text", turns=1, context_chars=300, max_tokens=48,
                                                     answer_retries=0), tmp_path)
        (ep,) = agent.run([q])
    finally:
        llm.backend.close()
    assert ep.done and set(ep.probs) == set(q.markets)
    assert all(0.0 <= p <= 1.0 for p in ep.probs.values())
    assert llm.meter.total.calls == 1 and llm.meter.total.completion_tokens > 0
    assert ep.raw_answer == ep.messages[-1]["content"]
