"""[llm] config validation and the backend factory."""

import pytest

from engine.config import from_dict
from engine.errors import ConfigError, PersistenceError
from engine.llm.base import LLMBackend, Request
from engine.llm.config import LLMConfig, load_llm_config
from engine.llm.factory import make_backend


def test_defaults_and_nested_simulated_table():
    cfg = load_llm_config({"llm": {"backend": "simulated", "seed": 4, "simulated": {"p_solvable_move": 0.25}}})
    assert cfg.seed == 4 and cfg.simulated.p_solvable_move == 0.25
    b = make_backend(cfg, policy="engine.game24.simulated_policy:policy_for")
    assert isinstance(b, LLMBackend) and b.name == "simulated" and b.seed == 4
    assert b.policy.params.p_solvable_move == 0.25  # the task's policy reads [llm.simulated]
    assert b.generate([Request(prompt="x")])[0].backend == "simulated"


@pytest.mark.parametrize(
    "table, match",
    [
        ({"backend": "gpt"}, "llm.backend must be one of"),
        ({"bogus": 1}, "unknown key"),
        ({"max_concurrency": 0}, "llm.max_concurrency must be >= 1"),
        ({"timeout_s": 0}, "llm.timeout_s must be > 0"),
        ({"retries": -1}, "llm.retries must be >= 0"),
        ({"backoff_s": 5.0, "backoff_max_s": 1.0}, "llm.backoff_max_s must be >="),
        ({"threads": 0}, "llm.threads must be >= 1"),
        ({"parallel": 0}, "llm.parallel must be >= 1"),
        ({"base_url": "localhost:8000"}, "llm.base_url must start with http"),
        ({"api": "responses"}, "llm.api must be one of"),
        ({"replay_mode": "loose"}, "llm.replay_mode must be one of"),
        ({"backend": "replay"}, "llm.replay_path must name a trace file"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in"),
        ({"simulated": {"p_malformed": 2}}, "p_malformed must be in"),
        ({"simulated": {"nope": 2}}, "unknown key"),
        ({"api_key_env": " "}, "api_key_env must name"),
    ],
)
def test_bad_config(table, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(LLMConfig, table, "llm")


def test_make_backend_rejects_non_config():
    with pytest.raises(ConfigError, match="expects an LLMConfig"):
        make_backend({"backend": "simulated"})


def test_factory_builds_openai_and_replay(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test")
    b = make_backend(LLMConfig(backend="openai", base_url="http://127.0.0.1:9/v1", api_key_env="MY_KEY", model="m"))
    assert b.name == "openai" and b.transport.client.api_key == "sk-test" and b.endpoint == "http://127.0.0.1:9/v1"
    with pytest.raises(PersistenceError, match="does not exist"):
        make_backend(LLMConfig(backend="replay", replay_path=str(tmp_path / "none.arrow")))
    passthrough = LLMConfig(backend="replay", replay_path=str(tmp_path / "t.arrow"), replay_mode="passthrough")
    with pytest.raises(ConfigError, match="simulated policy"):  # the wrapped simulated backend needs one too
        make_backend(passthrough)
    rec = make_backend(passthrough, policy="engine.game24.simulated_policy:policy_for")
    assert rec.name == "replay" and rec.inner.name == "simulated"


def test_vllm_missing_extra_is_named():
    try:
        import vllm  # noqa: F401
    except ImportError:
        from engine.errors import MissingExtraError

        with pytest.raises(MissingExtraError, match=r"\[vllm\]"):
            make_backend(LLMConfig(backend="vllm", model="some/model"))
    else:  # pragma: no cover - vllm installed
        pytest.skip("vllm is installed here")
