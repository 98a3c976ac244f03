"""Prompt templates (engine/templates.py, engine/prompts/*.toml).

* Byte identity: with the shipped templates every prompt function returns exactly
  what the Python implementation before the templates returned; those
  implementations are kept verbatim in tests/engine/prompt_refs/*_v0.py.
* Load-time checks: a missing prompt (shipped set), an unknown prompt, a missing or
  unknown placeholder, bad TOML or Jinja syntax are refused with the file, prompt and
  placeholder named.
* Partial user files fall back to the shipped text prompt by prompt.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

from engine import templates
from engine.errors import ConfigError

REFS = Path(__file__).parent / "prompt_refs"


def _ref(name: str):
    spec = importlib.util.spec_from_file_location(f"prompt_ref_{name}", REFS / f"{name}_v0.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _shipped_templates():
    """Every test starts and ends with the shipped templates active."""
    saved = dict(templates._ACTIVE)
    templates._ACTIVE.clear()
    yield
    templates._ACTIVE.clear()
    templates._ACTIVE.update(saved)


WORDS = ["", "a", "x y", "  spaced  out  ", "line1\nline2", "tab\there", "{{ not a placeholder }}", "{% raw %}",
         "ünïcode – dash", "100%", "{braces}", "\\boxed{1}", "trailing\n\n"]


def _nums(rng):
    return " ".join(rng.choice(["1", "2", "13", "8/3", "2.5", "-4", "24"]) for _ in range(rng.randint(1, 4)))


def test_game24_prompts_are_byte_identical_to_the_python_ones():
    from engine.game24 import prompts as P

    old = _ref("game24")
    rng = random.Random(0)
    for _ in range(300):
        nums = _nums(rng)
        exp = rng.choice(WORDS + [None])
        steps = "\n".join(f"{rng.randint(1, 9)} + {rng.randint(1, 9)} = 3 (left: {_nums(rng)})"
                          for _ in range(rng.randint(0, 3)))
        steps_in = rng.choice([steps, steps.splitlines(), "  " + steps + "\n\n"])
        ans = rng.choice(["Answer: (1 + 2) * 8 = 24", "(4 + 4) * 3 = 24", "answer: 1", "  x  "])
        seq = [int(t) for t in rng.sample(range(1, 14), 4)]
        assert P.propose_prompt(nums, experience=exp) == old.propose_prompt(nums, experience=exp)
        assert P.propose_prompt(seq) == old.propose_prompt(seq)
        assert P.value_prompt(nums) == old.value_prompt(nums)
        assert P.value_last_step_prompt(nums, ans) == old.value_last_step_prompt(nums, ans)
        assert P.answer_prompt(nums, steps_in, experience=exp) == old.answer_prompt(nums, steps_in, experience=exp)


def _write(tmp_path, text, name="my.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_missing_placeholder_is_refused_naming_file_prompt_and_placeholder(tmp_path):
    import engine.game24.prompts  # noqa: F401  (registers the set)

    path = _write(tmp_path, "value = '''Judge these.\n'''\n")
    with pytest.raises(templates.TemplateError, match=r"my\.toml.*prompt 'value' lacks required placeholder\(s\) "
                                                      r"\['numbers'\]"):
        templates.use("game24", path)
    assert templates.active("game24").path == ""  # a refused file changes nothing


def test_unknown_placeholder_is_refused(tmp_path):
    import engine.game24.prompts  # noqa: F401

    path = _write(tmp_path, "value = '''{{ numbers }} {{ nmbers }}\n'''\n")
    with pytest.raises(ConfigError, match=r"prompt 'value' uses unknown placeholder\(s\) \['nmbers'\]"):
        templates.use("game24", path)


def test_unknown_prompt_name_bad_toml_and_bad_jinja_are_refused(tmp_path):
    import engine.game24.prompts  # noqa: F401

    with pytest.raises(ConfigError, match=r"unknown prompt\(s\) \['valu'\] for the game24 prompts"):
        templates.use("game24", _write(tmp_path, "valu = '{{ numbers }}'\n"))
    with pytest.raises(ConfigError, match="is not valid TOML"):
        templates.use("game24", _write(tmp_path, "value = \n"))
    with pytest.raises(ConfigError, match=r"prompt 'value' is not a valid Jinja2 template"):
        templates.use("game24", _write(tmp_path, "value = '{{ numbers '\n"))
    with pytest.raises(ConfigError, match="no template file"):
        templates.use("game24", tmp_path / "absent.toml")


def test_a_shipped_set_missing_a_prompt_is_refused(tmp_path, monkeypatch):
    import engine.game24.prompts  # noqa: F401

    monkeypatch.setattr(templates, "SHIPPED_DIR", tmp_path)
    _write(tmp_path, "value = '{{ numbers }}'\n", "game24.toml")
    with pytest.raises(ConfigError, match=r"missing prompt\(s\) \['answer', 'propose', 'value_last_step'\]"):
        templates.load("game24")


def test_partial_user_file_overrides_only_its_prompts(tmp_path):
    from engine.game24 import prompts as P

    shipped_propose = P.propose_prompt("1 2 3 4")
    path = _write(tmp_path, "value = '''Can {{ numbers }} make 24? Answer sure, likely or impossible.\n'''\n")
    got = templates.use("game24", path)
    assert got.custom == ("value",)
    assert P.value_prompt("1  2 3") == "Can 1 2 3 make 24? Answer sure, likely or impossible.\n"
    assert P.propose_prompt("1 2 3 4") == shipped_propose
    assert "value" in templates.simulated_warning([got])
    # a user file that repeats the shipped text is not "custom"
    same = _write(tmp_path, "value = '''" + templates.load("game24").sources["value"] + "'''\n", "same.toml")
    assert templates.load("game24", same).custom == ()


def test_strict_undefined_and_no_autoescape():
    from engine.game24 import prompts as P

    assert "<b>&" in P.propose_prompt("1 2", experience="<b>&")  # autoescape off
    with pytest.raises(Exception, match="numbers"):
        templates.active("game24").render("value")  # StrictUndefined: a missing value is an error


def test_prompt_sets_pickle_without_compiled_templates():
    import pickle

    from engine.game24 import prompts as P

    s = templates.active("game24")
    P.value_prompt("1 2")
    t = pickle.loads(pickle.dumps(s))
    assert t.sources == s.sources and t.render("value", numbers="3 4") == P.value_prompt("3 4")


def test_baseline_prompts_are_byte_identical_to_the_python_ones():
    from engine.baselines import prompts as B

    old = _ref("baselines")
    rng = random.Random(1)
    for _ in range(100):
        a, b, c = (rng.choice(WORDS) for _ in range(3))
        # MemRL's and ReMe's prompts are now the originals' text (tests/engine/baselines/test_baseline_prompts.py)
        assert B.render("flex_success_reflection", problem=a, solution=b) == old.SUCCESS_REFLECTION.format(
            problem=a, solution=b)
        assert B.render("flex_failure_reflection", problem=a, solution=b, ground_truth=c) == \
            old.FAILURE_REFLECTION.format(problem=a, solution=b, ground_truth=c)


def test_finance_prompts_are_byte_identical_to_the_python_ones():
    from engine.finance import prompts as F

    old = _ref("finance")
    rng = random.Random(2)
    for _ in range(200):
        w = lambda: rng.choice(WORDS)  # noqa: E731
        hs = rng.choice([(1,), (1, 5, 10), (10, 20)])
        factors = [w() for _ in range(rng.randint(0, 3))]
        cands = [(rng.randint(0, 999), w()) for _ in range(rng.randint(0, 3))]
        news = [F.NewsLine(w(), rng.choice([8, 9.5, 10.0]), w(), w()) for _ in range(rng.randint(0, 3))]
        onews = [old.NewsLine(n.day, n.importance, n.title, n.content) for n in news]
        exps = [(rng.randint(1, 3), (w(), w(), w()), tuple(rng.uniform(0, 2) for _ in hs))
                for _ in range(rng.randint(0, 2))]
        mems = [w() for _ in range(rng.randint(0, 2))]
        ind, fac, ti, co = w(), w(), w(), w()
        assert F.route_prompt(ind, factors, ti, co) == old.route_prompt(ind, factors, ti, co)
        assert F.rerank_prompt(ind, fac, ti, co, cands) == old.rerank_prompt(ind, fac, ti, co, cands)
        assert F.merge_prompt(ind, fac, ti, co) == old.merge_prompt(ind, fac, ti, co)
        assert F.predict_prompt(ind, "2024-01-02", hs, news, [F.ExperienceLine(*e) for e in exps], mems) == \
            old.predict_prompt(ind, "2024-01-02", hs, onews, [old.ExperienceLine(*e) for e in exps], mems)
        assert F.sentiment_prompt(ind, ti, co) == old.sentiment_prompt(ind, ti, co)
        ups = [(rng.randint(0, 99), (w(), w(), w()), rng.uniform(0, 2)) for _ in range(rng.randint(0, 3))]
        args = (ind, "2024-01-02", rng.choice([1, 5]), rng.uniform(-1, 1), rng.uniform(-0.1, 0.1),
                rng.uniform(-0.01, 0.01), ups)
        assert F.update_prompt(*args) == old.update_prompt(*args)


def test_forecast_prompts_are_byte_identical_to_the_python_ones():
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from engine.forecast import prompts as FP

    old = _ref("forecast")
    rng = random.Random(3)
    t0 = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)
    for _ in range(150):
        w = lambda: rng.choice(WORDS)  # noqa: E731
        bank = [(f"e{k}", w()) for k in range(rng.choice([0, 0, 1, 3]))]
        markets = tuple(f"m{k}{w()}" for k in range(rng.randint(1, 3)))
        quotes = [None, {}, {"yes_bid": 40, "yes_ask": 45}, {"yes_bid": None, "yes_ask": 3}, {"yes_bid": 1.5}]
        q = SimpleNamespace(markets=markets, market_data={m: rng.choice(quotes) for m in markets}, text=w(),
                            rules=w(), close_time=t0 + timedelta(days=3), snapshot_time=t0)
        args = (q, bank, rng.choice(["", w()]), w(), rng.random() < 0.5)
        assert FP.prophet_prompt(*args) == old.prophet_prompt(*args)
        item = SimpleNamespace(question=w(), answer_requirements=w())
        note = w()
        assert FP.futurex_prompt(item, bank, note) == old.futurex_prompt(item, bank, note)
        assert FP.experience_section(bank) == old.experience_section(bank)
        cutoff = w()
        assert FP.main_system(cutoff) == old.main_system(cutoff)
        guide = {"guide_name": w(), "prompt": w(), "tool_names": ["a"]}
        specs = [{"type": "function", "function": {"name": w()}}] * rng.randint(0, 2)
        assert FP.subagent_system(guide, specs) == old.subagent_system(guide, specs)
        x = (w(), w(), w())
        assert FP.subagent_user(*x) == old.subagent_user(*x)
        x = (bank, w(), w(), w(), rng.randint(1, 5))
        assert FP.editor_prompt(*x) == old.editor_prompt(*x)
        x = (guide, w(), w())
        assert FP.critic_prompt(*x) == old.critic_prompt(*x)
        x = (w(), w())
        assert FP.reuse_prompt(*x) == old.reuse_prompt(*x)
        assert FP.classifier_prompt(*x) == old.classifier_prompt(*x)
        x = (w(), w(), w())
        assert FP.generator_prompt(*x) == old.generator_prompt(*x)
        r = w()
        assert FP.explore_prompt(r) == old.explore_prompt(r)
        assert FP.repair_prompt(r) == old.REPAIR.format(problem=r)
    assert FP.FINAL_TURN == old.FINAL_TURN and FP.TOOL_CALL_HELP == old.TOOL_CALL_HELP
    assert FP.AUTHORING_COMMON == old.AUTHORING_COMMON


def test_docs_placeholder_tables_match_the_code():
    import re

    import engine.baselines.prompts as B
    import engine.finance.prompts as F
    import engine.forecast.prompts as FC
    import engine.game24.prompts as G

    doc = (Path(__file__).resolve().parents[2] / "docs" / "prompts.md").read_text()
    for mod in (G, F, FC, B):
        section = doc.split(f"#### `{mod.TEMPLATE_SET}`", 1)[1].split("####", 1)[0]
        rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", section, re.M))
        assert set(rows) == set(mod.PLACEHOLDERS), mod.TEMPLATE_SET
        for name, need in mod.PLACEHOLDERS.items():
            assert set(re.findall(r"`(\w+)`", rows[name])) == need, (mod.TEMPLATE_SET, name)


def test_set_override_reaches_the_prompts_table(tmp_path):
    from engine.config import apply_overrides
    from engine.game24.experiment import parse_config

    f = tmp_path / "p.toml"
    f.write_text("value = '{{ numbers }}'\n")
    exp = parse_config(apply_overrides({"task": "game24"}, [f"prompts.file={f}"]))
    assert exp.prompts.file == str(f)


def test_config_parsing_checks_the_template_files(tmp_path):
    """A bad file is refused when the config is parsed (so ``toe run --dry-run`` refuses it too)."""
    from engine.finance.config import load_finance_config
    from engine.game24.experiment import parse_config

    bad = _write(tmp_path, "predict = '''{{ industry }} {{ date }}'''\n", "bad_finance.toml")
    with pytest.raises(ConfigError, match=r"bad_finance\.toml.*prompt 'predict' lacks required placeholder\(s\) "
                                          r"\['experiences', 'horizons', 'memories', 'news', 'sentiment_example'\]"):
        load_finance_config({"prompts": {"file": str(bad)}})
    bad_b = _write(tmp_path, "reme_success = '''{{ task }} {{ attempt }} {{ outcome }}'''\n", "bad_b.toml")
    with pytest.raises(ConfigError, match=r"prompt 'reme_success' uses unknown placeholder\(s\) \['outcome'\]"):
        parse_config({"task": "game24", "prompts": {"baselines": str(bad_b)}})
    good = _write(tmp_path, "rerank = '''" + templates.load("finance").sources["rerank"] + "'''\n", "ok.toml")
    assert load_finance_config({"prompts": {"file": str(good)}}).prompts.file == str(good)
    assert templates.active("finance").path == ""  # parsing checks, it does not activate


# --- render_pair: a prompt and its text with some placeholders blanked, in one render where it can --------

_PAIR_VALUES = dict(industry="Banks", date="2024-01-02", horizons="5, 10", news="[1] (2024-01-02) rates up",
                    experiences="[news 1] Banks > Rates > up | reliability 5d=1.10",
                    memories="- a past call", sentiment_example='"5": <s>')


def _custom_set(predict: str) -> templates.PromptSet:
    shipped = templates.load("finance")
    return templates.PromptSet("finance", {**shipped.sources, "predict": predict}, "custom.toml", ("predict",))


@pytest.mark.parametrize("exps, mems", [("E", "M"), ("E", ""), ("", "M"), ("", "")])
def test_render_pair_equals_two_renders_on_the_shipped_predict_prompt(exps, mems):
    ps = templates.load("finance")
    values = {**_PAIR_VALUES, "experiences": exps and _PAIR_VALUES["experiences"], "memories": mems and "- m"}
    full, bare = ps.render_pair("predict", ("experiences", "memories"), **values)
    assert full == ps.render("predict", **values)
    assert bare == ps.render("predict", **{**values, "experiences": "", "memories": ""})
    assert ps._compiled[("pair", "predict", ("experiences", "memories"))] is not False  # the one-render path
    if exps:
        assert len(bare) < len(full)


@pytest.mark.parametrize("body", [
    "{{ experiences | length }} {% if experiences %}X{{ experiences }}{% endif %}",  # read outside its section
    "{% if experiences %}{% set n = 1 %}E{% endif %}{{ n | default(0) }}",  # a section that sets a variable
    "{% if experiences %}E{% else %}none{% endif %}",  # an else branch prints when blanked
])
def test_render_pair_falls_back_to_two_renders_where_one_cannot_be_cut(body):
    src = ("{{ industry }}{{ date }}{{ horizons }}{{ news }}{{ sentiment_example }}"
           "{% if memories %}{{ memories }}{% endif %}" + body)
    ps = _custom_set(src)
    full, bare = ps.render_pair("predict", ("experiences", "memories"), **_PAIR_VALUES)
    assert full == ps.render("predict", **_PAIR_VALUES)
    assert bare == ps.render("predict", **{**_PAIR_VALUES, "experiences": "", "memories": ""})
    assert ps._compiled[("pair", "predict", ("experiences", "memories"))] is False


def test_render_pair_with_a_marker_in_a_value_renders_twice():
    ps = templates.load("finance")
    values = {**_PAIR_VALUES, "news": "odd " + templates._BEGIN + " text"}
    full, bare = ps.render_pair("predict", ("experiences", "memories"), **values)
    assert full == ps.render("predict", **values)
    assert bare == ps.render("predict", **{**values, "experiences": "", "memories": ""})


def test_the_finance_prompt_pair_matches_the_prompt_functions():
    from engine.finance import prompts as P

    news = [P.NewsLine("2024-01-02", 9.0, "Rates up", "Central bank raises rates.")]
    exps = [P.ExperienceLine(1, ("Banks", "Rates", "Higher margins"), (1.1, 0.9))]
    args = ("Banks", "2024-01-02", (5, 10), news)
    assert P.predict_prompts(*args, exps, ["- m"]) == (P.predict_prompt(*args, exps, ["- m"]), P.predict_prompt(*args))


def test_loading_a_set_survives_another_threads_first_import_of_jinja2_meta(monkeypatch):
    """Threads of a worker load a set at once: one thread's ``import jinja2.meta`` puts the module in
    ``sys.modules`` before it sets ``jinja2.meta``; a thread checking templates in that window must not fail
    (a finance worker did: AttributeError: module 'jinja2' has no attribute 'meta')."""
    import sys

    import jinja2
    import jinja2.meta

    monkeypatch.delattr(jinja2, "meta")  # the window: the module loaded, the package attribute not yet set
    assert "jinja2.meta" in sys.modules
    assert templates.load("finance").name == "finance"
