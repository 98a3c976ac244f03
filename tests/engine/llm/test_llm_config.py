"""[llm] config validation and the backend factory."""

import pytest

from engine.errors import ConfigError, PersistenceError
from engine.llm.base import LLMBackend, Request
from engine.llm.config import LLMConfig, OpenAISettings, ReplaySettings, load_llm_config
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
        ({"openai": {"bogus": 1}}, r"unknown key\(s\) 'bogus' in \[llm.openai\]"),
        ({"openai": {"max_concurrency": 0}}, "llm.openai.max_concurrency must be >= 1"),
        ({"openai": {"timeout_s": 0}}, "llm.openai.timeout_s must be > 0"),
        ({"openai": {"retries": -1}}, "llm.openai.retries must be >= 0"),
        ({"openai": {"backoff_s": 5.0, "backoff_max_s": 1.0}}, "llm.openai.backoff_max_s must be >="),
        ({"local": {"threads": 0}}, "llm.local.threads must be >= 1"),
        ({"local": {"parallel": 0}}, "llm.local.parallel must be >= 1"),
        ({"local": {"timeout_s": -1}}, "llm.local.timeout_s must be > 0"),
        ({"openai": {"base_url": "localhost:8000"}}, "llm.openai.base_url must start with http"),
        ({"openai": {"api": "responses"}}, "llm.openai.api must be one of"),
        ({"replay": {"mode": "loose"}}, "llm.replay.mode must be one of"),
        ({"backend": "replay"}, "llm.replay.path must name a trace file"),
        ({"vllm": {"gpu_memory_utilization": 1.5}}, "llm.vllm.gpu_memory_utilization must be in"),
        ({"simulated": {"p_malformed": 2}}, "p_malformed must be in"),
        ({"simulated": {"nope": 2}}, "unknown key"),
        ({"openai": {"api_key_env": " "}}, "llm.openai.api_key_env must name"),
        ({"openai": 3}, "llm.openai must be a table"),
        ({"backend": "server_model", "server_model": {"backend": "replay"}}, "llm.replay.path must name"),
    ],
)
def test_bad_config(table, match):
    with pytest.raises(ConfigError, match=match):
        load_llm_config(table)


# every flat name of earlier versions, a value for it, and where it lands
FLAT = {
    "base_url": "http://h:1/v1", "api_key_env": "K", "fan_out_n": "never", "max_concurrency": 7,
    "connect_timeout_s": 3.0, "backoff_s": 0.1, "backoff_max_s": 30.0, "on_error": "record",
    "structured_format": "vllm", "extra_body": {"top_k": 5}, "usage_covers_choices": "one", "metrics_url": "auto",
    "metrics_interval_s": 2.0, "api": "chat", "timeout_s": 9.0, "retries": 1, "threads": 3, "parallel": 2,
    "context": 512, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.5, "dtype": "half", "max_model_len": 4096,
    "enforce_eager": True, "engine_kwargs": {"max_num_seqs": 8}, "replay_path": "t.arrow", "replay_mode": "passthrough",
    "replay_backend": "openai", "server_backend": "replay",
}


def test_every_flat_name_is_read_into_its_table():
    from engine.llm.config import FLAT_KEYS

    assert set(FLAT) == set(FLAT_KEYS)  # a new flat name gets a value here


@pytest.mark.parametrize("flat", sorted(FLAT))
def test_a_flat_name_of_earlier_versions_sets_its_tables_key(flat):
    from engine.llm.config import FLAT_KEYS

    cfg = load_llm_config({"llm": {flat: FLAT[flat]}})
    for section, key in FLAT_KEYS[flat]:
        assert getattr(getattr(cfg, section), key) == FLAT[flat]
    assert cfg == load_llm_config({"llm": {s: {k: FLAT[flat]} for s, k in FLAT_KEYS[flat]}})  # nothing else moved
    assert not hasattr(cfg, flat)  # read into its table, not kept flat


def test_a_flat_name_and_its_tables_key_must_agree():
    cfg = load_llm_config({"llm": {"base_url": "http://a/v1", "openai": {"base_url": "http://a/v1", "retries": 0}}})
    assert cfg.openai.base_url == "http://a/v1" and cfg.openai.retries == 0  # equal values: fine, the table kept
    with pytest.raises(ConfigError, match=r"llm.threads = 1 and llm.local.threads = 4 are both set.*earlier name"):
        load_llm_config({"llm": {"threads": 1, "local": {"threads": 4}}})
    with pytest.raises(ConfigError, match="llm.timeout_s = 5 and llm.local.timeout_s = 6"):  # a shared name: each table
        load_llm_config({"llm": {"timeout_s": 5, "local": {"timeout_s": 6}}})


def test_a_run_folders_config_names_the_tables():
    """The resolved [llm] (a run folder's config.toml) holds each backend's table, no flat name."""
    from engine.config import to_dict

    table = to_dict(load_llm_config({"llm": {"backend": "local", "threads": 1, "replay_path": "x"}}))
    assert table["local"]["threads"] == 1 and table["replay"]["path"] == "x"
    assert not set(table) & set(FLAT)
    assert load_llm_config(table) == load_llm_config({"llm": {"backend": "local", "local": {"threads": 1},
                                                              "replay": {"path": "x"}}})


def test_make_backend_rejects_non_config():
    with pytest.raises(ConfigError, match="expects an LLMConfig"):
        make_backend({"backend": "simulated"})


def test_factory_builds_openai_and_replay(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test")
    b = make_backend(LLMConfig(backend="openai", model="m",
                               openai=OpenAISettings(base_url="http://127.0.0.1:9/v1", api_key_env="MY_KEY")))
    assert b.name == "openai" and b.transport.client.api_key == "sk-test" and b.endpoint == "http://127.0.0.1:9/v1"
    with pytest.raises(PersistenceError, match="does not exist"):
        make_backend(LLMConfig(backend="replay", replay=ReplaySettings(path=str(tmp_path / "none.arrow"))))
    passthrough = LLMConfig(backend="replay", replay=ReplaySettings(str(tmp_path / "t.arrow"), mode="passthrough"))
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


def test_an_override_replaces_a_value_whichever_name_the_file_or_the_override_used():
    from engine.config import apply_overrides
    from engine.llm.config import ALIASES

    def load(file_llm, *sets):
        return load_llm_config(apply_overrides({"llm": file_llm}, sets, ALIASES))

    assert load({"openai": {"base_url": "http://a/v1"}}, "llm.base_url=http://b/v1").openai.base_url == "http://b/v1"
    assert load({"base_url": "http://a/v1"}, "llm.openai.base_url=http://b/v1").openai.base_url == "http://b/v1"
    assert load({"replay_mode": "passthrough", "replay_path": "t"}, "llm.replay.mode=strict").replay.mode == "strict"
    both = load({"local": {"timeout_s": 5}}, "llm.timeout_s=7")  # a shared name sets both tables
    assert both.local.timeout_s == 7 and both.openai.timeout_s == 7
    deep = load({}, "llm.extra_body.top_k=4")  # a key inside an earlier name's table
    assert deep.openai.extra_body == {"top_k": 4}
    with pytest.raises(ConfigError, match="llm.threads = 1 and llm.local.threads = 2 are both set"):
        load({"threads": 1, "local": {"threads": 2}})  # within the file itself: refused, naming both
