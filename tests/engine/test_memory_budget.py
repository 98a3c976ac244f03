"""The shared memory budget: [memory] top_k / max_experience_tokens, context-window fitting, the tables' column."""

import pytest

from engine.errors import ConfigError
from engine.llm.base import MeteredBackend
from engine.llm.config import LLMConfig, load_llm_config
from engine.llm.factory import known_context_window
from engine.llm.tokens import count_tokens
from engine.memory_budget import FitStats, MemoryBudget, context_window, fit_items, load_budget, room


@pytest.fixture
def hashing_embedder():
    from engine.embed import HashingEmbedder

    return HashingEmbedder(64)


def _block(items):
    return "\n".join(f"- {x}" for x in items)


def test_fit_keeps_the_longest_best_first_prefix_and_counts():
    items = [f"memory number {i} " + "word " * 10 for i in range(6)]  # 16 tokens each, 17 with "-"
    stats = FitStats()
    text, kept = fit_items(items, _block, 40, stats=stats)
    assert kept == items[:2] and text == _block(items[:2])  # the least relevant (last) items go first
    assert count_tokens(text) <= 40 < count_tokens(_block(items[:3]))
    assert (stats.blocks, stats.fitted, stats.dropped) == (1, 1, 4)
    text, kept = fit_items(items, _block, 10_000, stats=stats)  # fits: unchanged, not counted as cut
    assert kept == items and (stats.blocks, stats.fitted) == (2, 1)
    text, kept = fit_items(items, _block, 3, stats=stats)  # not even one item: nothing, never a cut item
    assert (text, kept) == ("", []) and stats.dropped == 10
    assert fit_items([], _block, 5) == ("", [])


class _Model:
    name, model = "m", "m"

    def __init__(self, window=None):
        if window is not None:
            self.context_window = window

    def generate(self, requests):
        return []


def test_context_window_is_read_through_wrappers_and_room_leaves_space():
    assert context_window(_Model()) is None
    wrapped = MeteredBackend(_Model(1000))
    assert context_window(wrapped) == 1000
    assert room(wrapped, rest_tokens=300, max_tokens=200) == 500
    assert room(wrapped, rest_tokens=300, max_tokens=200, cap=64) == 64
    assert room(wrapped, rest_tokens=900, max_tokens=200) == 0  # the prompt alone is too long: no experience
    assert room(_Model(), 300, 200) is None and room(_Model(), 300, 200, cap=64) == 64


def test_known_context_window_per_backend():
    assert known_context_window(load_llm_config({"backend": "local", "local": {"context": 4096}})) == 4096
    assert known_context_window(load_llm_config({"backend": "vllm", "vllm": {"max_model_len": 8192}})) == 8192
    assert known_context_window(LLMConfig(backend="openai")) == 0
    assert known_context_window(LLMConfig(backend="openai", context_window=32768)) == 32768
    with pytest.raises(ConfigError, match="llm.context_window must be 0"):
        LLMConfig(context_window=10)


def test_budget_section_validates():
    assert load_budget({}) == MemoryBudget()
    assert load_budget({"memory": {"top_k": 5}}).top_k == 5
    with pytest.raises(ConfigError, match="memory.top_k must be an integer >= 1, got 0"):
        load_budget({"memory": {"top_k": 0}})
    with pytest.raises(ConfigError, match="memory.max_experience_tokens must be an integer >= 16"):
        load_budget({"memory": {"max_experience_tokens": 8}})
    with pytest.raises(ConfigError, match="unknown key"):
        load_budget({"memory": {"k": 3}})


@pytest.mark.parametrize("name, key", [("mem0", "top_k"), ("memrl", "select_k"), ("reme", "top_k"), ("flex", "k")])
def test_every_baseline_takes_top_k_from_memory(name, key, hashing_embedder):
    from engine.game24.baseline_methods import make_baseline_hooks

    hooks = make_baseline_hooks(name, {}, embedder=hashing_embedder, budget=MemoryBudget(top_k=4))
    assert getattr(hooks.memory.config, key) == 4
    with pytest.raises(ConfigError, match=rf"\[{name}\] {key} is set for every memory method by \[memory\] top_k"):
        make_baseline_hooks(name, {key: 4}, embedder=hashing_embedder)


def _game24_run(tmp_path, *sets):
    import pandas as pd

    from engine.cli import main

    out = tmp_path / "run"
    args = ["run", "configs/game24.toml", "--set", 'methods=["tot","flex"]', "--set", "seeds=[0]",
            "--set", "protocol.warmup_sample=12", "--set", "protocol.test_limit=4", "--set", "report.plots=false",
            "--set", "protocol.round_size=4", "--out", str(out), "--no-progress", *sum((["--set", s] for s in sets), [])]
    assert main(args) == 0
    return pd.read_parquet(out / "episodes.parquet")


def test_game24_prompts_fit_the_context_window(tmp_path):
    """A small window cuts FLEX's block (least relevant examples first) and counts it; ToT's prompts are unchanged."""
    free = _game24_run(tmp_path / "a")
    tight = _game24_run(tmp_path / "b", "llm.context_window=330")
    f_free, f_tight = (d[d.method == "flex"] for d in (free, tight))
    assert (f_free.experience_fitted == 0).all() and f_free.experience_tokens.max() > 0
    assert f_tight.experience_fitted.sum() > 0
    assert f_tight.experience_tokens.mean() < f_free.experience_tokens.mean()
    t_free, t_tight = (d[d.method == "tot"] for d in (free, tight))
    assert (t_free.experience_tokens == 0).all()
    assert t_free.prompt_tokens.tolist() == t_tight.prompt_tokens.tolist()  # the task is never cut


def test_the_line_cached_prompt_count_equals_the_plain_count():
    """count_prompt_tokens sums cached per-line counts; the total must equal count_tokens on any text."""
    import random

    from engine.llm import tokens

    rng = random.Random(7)
    pieces = ["word", "x_1", "3.5", "--", "é", "\t", " ", "\n", "\r\n", "(a)", "{\"k\": 1}", "", "\u2028", "\x0c"]
    tokens._LINES.clear(); tokens._held[0] = 0
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert tokens.count_prompt_tokens(text) == count_tokens(text), repr(text)
    tokens._LINES.clear(); tokens._held[0] = 0
    big = "\n".join(f"line {k}" for k in range(tokens._MAX_LINES + 10))  # more lines than the cache holds
    assert tokens.count_prompt_tokens(big) == count_tokens(big)
    assert tokens.count_prompt_tokens("a b\nc") == count_tokens("a b\nc") == 3
