"""Every task's LLM factory compares by value: an executor handed an equal one keeps its workers."""

import pickle
from dataclasses import replace

from engine.llm.config import LLMConfig
from engine.llm.factory import BackendFactory


def _equal_and_distinct(make, same_args, other_args):
    a, b, c = make(*same_args), make(*same_args), make(*other_args)
    assert a is not b and a == b
    assert a != c
    assert pickle.loads(pickle.dumps(a)) == a


def test_backend_factory_compares_cfg_and_policy_by_value():
    cfg = LLMConfig()
    assert BackendFactory(cfg, "m:p") == BackendFactory(replace(cfg), "m:p")
    assert BackendFactory(cfg, "m:p") != BackendFactory(replace(cfg, seed=1), "m:p")
    assert BackendFactory(cfg, "m:p") != BackendFactory(cfg, "m:q")


def test_game24_and_generic_factories_are_equal_for_equal_settings():
    from engine.game24.experiment import llm_factory as g24
    from engine.generic.task import llm_factory as generic

    for make in (g24, generic):
        _equal_and_distinct(make, (LLMConfig(), 0), (LLMConfig(), 1))
    backend = g24(LLMConfig(), 0)()
    assert backend.generate is not None


def test_finance_and_forecast_factories_are_equal_for_equal_settings():
    from engine.finance.config import FinanceConfig
    from engine.finance.experiment import FinanceLLMFactory
    from engine.forecast.run_support import ForecastLLM

    cfg = FinanceConfig()
    _equal_and_distinct(FinanceLLMFactory, (LLMConfig(), cfg, 0), (LLMConfig(), cfg, 1))
    _equal_and_distinct(ForecastLLM, (LLMConfig(),), (LLMConfig(seed=3),))
