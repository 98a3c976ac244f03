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
from pathlib import Path

import pytest

from engine import templates
from engine.errors import ConfigError

REFS = Path(__file__).parent / "prompt_refs"


def _ref(name: str):
    spec = importlib.util.spec_from_file_location(f"prompt_ref_{name}", REFS / f"{name}_v0.py")
    mod = importlib.util.module_from_spec(spec)
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
        assert B.render("memrl_procedure", task=a, outcome=b, trajectory=c) == old.PROCEDURE_PROMPT.format(
            task=a, outcome=b, trajectory=c)
        assert B.render("reme_success", task=a, attempt=b) == old.SUCCESS_PROMPT.format(task=a, attempt=b)
        assert B.render("reme_failure", task=a, attempt=b) == old.FAILURE_PROMPT.format(task=a, attempt=b)
        assert B.render("reme_comparative", task=a, success=b, failure=c) == old.COMPARATIVE_PROMPT.format(
            task=a, success=b, failure=c)
        assert B.render("flex_success_reflection", problem=a, solution=b) == old.SUCCESS_REFLECTION.format(
            problem=a, solution=b)
        assert B.render("flex_failure_reflection", problem=a, solution=b, ground_truth=c) == \
            old.FAILURE_REFLECTION.format(problem=a, solution=b, ground_truth=c)
