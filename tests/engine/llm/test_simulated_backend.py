"""One simulated backend, SimulatedBackend(policy): the task supplies the policy, the engine knows no task."""

import functools
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.llm.base import MeteredBackend, Request, answered_by, answers_any_prompt
from engine.llm.config import LLMConfig
from engine.llm.factory import make_backend
from engine.llm.simulated import SimulatedBackend, SimulatedPolicy, apply_limits, prompt_text
from engine.tasks import builtin_tasks, load_task, policy_of

ROOT = Path(__file__).resolve().parents[3]


class Echo(SimulatedPolicy):
    """A policy whose answer shows what it was given: the prompt text, the seed and the sample index."""

    model = "echo-v1"

    def respond(self, request, seed, index):
        return f"{prompt_text(request)} | seed {seed} | sample {index}"


def test_every_response_is_labelled_simulated_with_the_policys_model():
    b = SimulatedBackend(Echo(), seed=7)
    (r,) = b.generate([Request(prompt="hi", n=2)])
    assert (b.name, r.backend, r.model) == ("simulated", "simulated", "echo-v1")
    assert r.texts == ["hi | seed 7 | sample 0", "hi | seed 7 | sample 1"]
    assert SimulatedBackend(Echo(), model="label").generate([Request(prompt="x")])[0].model == "label"
    assert answered_by(MeteredBackend(b)) == ("simulated", "echo-v1")


def test_the_request_seed_wins_and_a_chat_reads_its_last_user_message():
    b = SimulatedBackend(Echo(), seed=7)
    chat = Request(messages=({"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}), seed=3)
    assert b.generate([chat])[0].texts == ["q | seed 3 | sample 0"]


def test_answers_do_not_depend_on_the_batch():
    b = SimulatedBackend(Echo())
    reqs = [Request(prompt=f"p{i}", seed=i, n=2) for i in range(4)]
    alone = [b.generate([r])[0].texts for r in reqs]
    assert [r.texts for r in b.generate(list(reversed(reqs)))] == list(reversed(alone))


def test_stop_strings_and_max_tokens_cut_the_text():
    assert apply_limits("a b c d", ("c",), 10) == ("a b ", "stop", 2)
    assert apply_limits("one, two three", (), 2) == ("one,", "length", 2)
    (r,) = SimulatedBackend(Echo()).generate([Request(prompt="x y z", max_tokens=3)])
    assert r.texts == ["x y z"] and r.completions[0].finish_reason == "length"


def test_a_simulated_policy_answers_only_its_tasks_prompts():
    b = SimulatedBackend(Echo())
    assert not answers_any_prompt(b) and not answers_any_prompt(MeteredBackend(b))


def test_make_backend_needs_the_tasks_policy():
    cfg = LLMConfig(backend="simulated")
    with pytest.raises(ConfigError, match="simulated policy, and none was given"):
        make_backend(cfg)
    with pytest.raises(ConfigError, match="'module:attr'"):
        make_backend(cfg, policy="engine.game24.simulated_policy")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        make_backend(cfg, policy="engine.game24.simulated_policy:nope")
    with pytest.raises(ConfigError, match="must have respond"):
        make_backend(cfg, policy=object())
    assert make_backend(cfg, policy=Echo()).generate([Request(prompt="x")])[0].model == "echo-v1"


@pytest.mark.parametrize("task", sorted(builtin_tasks()))
def test_each_task_supplies_a_policy(task):
    spec = policy_of(task)
    assert spec == load_task(task).policy and ":" in spec
    b = make_backend(LLMConfig(backend="simulated", seed=2), policy=spec)
    assert isinstance(b, SimulatedBackend) and isinstance(b.policy, SimulatedPolicy)
    (r,) = b.generate([Request(prompt="hello", seed=1)])
    assert r.backend == "simulated" and r.model == b.policy.model and r.model.startswith("simulated-")


def test_the_policy_string_pickles_for_workers():
    factory = functools.partial(make_backend, LLMConfig(backend="simulated", seed=5), policy=policy_of("game24"))
    again = pickle.loads(pickle.dumps(factory))()
    from engine.game24.prompts import propose_prompt

    prompt = propose_prompt("4 9 10 13")
    texts = again.generate([Request(prompt=prompt, n=3)])[0].texts
    assert texts == factory().generate([Request(prompt=prompt, n=3)])[0].texts and "(left:" in texts[0]


def test_engine_llm_imports_no_task():
    code = ("import sys, engine.llm.factory, engine.llm.simulated, engine.llm.config\n"
            "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
            "(['engine', 'game24'], ['engine', 'finance'], ['engine', 'forecast'])))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.strip() == "[]"
