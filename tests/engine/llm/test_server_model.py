"""The server model's timing (continuous batching on one modelled engine), on fixed inputs and a fake clock."""

import pytest

from engine.errors import ConfigError
from engine.llm.base import Completion, MeteredBackend, Request, Response, answered_by, answers_any_prompt
from engine.llm.config import load_llm_config
from engine.llm.factory import make_backend
from engine.llm.server_model import (
    REFERENCES, ServerModelBackend, ServerModelParams, ServerProfile, find_server, plan_call,
)

from server_fakes import TOY, FakeClock  # noqa: E402  (tests/engine/llm/server_fakes.py)


class FixedBackend:
    """Answers every request with ``n`` completions of the given token counts (texts unused by the model)."""

    name = "fixed"
    model = "fixed-model"
    answers_any_prompt = False

    def __init__(self, tokens, prompt_tokens=10):
        self.tokens, self.prompt_tokens = list(tokens), prompt_tokens

    def generate(self, requests):
        out = []
        for i, req in enumerate(requests):
            comps = tuple(Completion(text=f"t{i}.{j}", completion_tokens=self.tokens[i]) for j in range(req.n))
            out.append(Response(completions=comps, prompt_tokens=self.prompt_tokens, latency_s=0.0,
                                backend="fixed", model=self.model))
        return out


def test_one_sequence_is_prefill_plus_its_decode_steps():
    plan = plan_call(TOY, [100], [[5]])
    # prefill 100 / 1000 = 0.1 s, then 5 steps with b=1: 5 x 0.011
    assert plan.duration_s == pytest.approx(0.1 + 5 * 0.011)
    assert plan.finish_s == pytest.approx((0.155,))
    assert plan.decode_tokens == 5 and plan.prompt_tokens == 100 and plan.max_in_flight == 1


def test_two_sequences_share_steps_and_the_short_one_leaves_first():
    plan = plan_call(TOY, [0, 0], [[2], [5]])
    # 2 steps at b=2 (0.012 each), then 3 at b=1 (0.011 each)
    assert plan.finish_s == pytest.approx((0.024, 0.024 + 0.033))
    assert plan.max_in_flight == 2


def test_a_third_sequence_waits_for_a_free_slot_and_prefills_when_admitted():
    plan = plan_call(TOY, [0, 0, 50], [[1], [4], [2]])
    # step 1 at b=2 (0.012): request 0 leaves; request 2 admitted: prefill 0.05; then b=2 for 2 steps (0.024):
    # request 2 done at 0.086 and request 1 has 1 token left: one step at b=1 (0.011)
    assert plan.finish_s == pytest.approx((0.012, 0.097, 0.086))
    assert plan.prefill_s == pytest.approx(0.05)


def test_n_samples_prefill_once_and_the_request_ends_with_its_last_sequence():
    plan = plan_call(TOY, [100], [[1, 3]])
    assert plan.prefill_s == pytest.approx(0.1)
    assert plan.finish_s == pytest.approx((0.1 + 0.012 + 2 * 0.011,))


def test_per_sequence_rate_falls_and_engine_rate_rises_with_concurrency():
    ref = REFERENCES["llama3.1-8b-h100"]
    per_seq = [1 / ref.step_s(b) for b in (1, 4, 16)]
    engine = [b / ref.step_s(b) for b in (1, 4, 16)]
    assert per_seq == sorted(per_seq, reverse=True) and engine == sorted(engine)
    # the fit reproduces the source's TPOT at concurrency 1 and 16 (6.48 ms, 10.94 ms)
    assert ref.step_s(1) == pytest.approx(6.48e-3, rel=0.01)
    assert ref.step_s(16) == pytest.approx(10.94e-3, rel=0.01)
    a100 = REFERENCES["llama3.1-8b-a100"]
    assert 1 / a100.step_s(1) == pytest.approx(75, rel=0.01)
    assert 8 / a100.step_s(8) == pytest.approx(6.6 * 75, rel=0.01)


def test_backend_sleeps_the_plan_keeps_books_and_reports_the_inner_label():
    clock = FakeClock()
    server = ServerModelBackend(FixedBackend([2, 5], prompt_tokens=0), TOY, clock=clock)
    llm = MeteredBackend(server)
    out = llm.generate([Request(prompt="a"), Request(prompt="b")])
    assert clock.slept == pytest.approx([0.057])
    assert [r.latency_s for r in out] == pytest.approx([0.024, 0.057])
    assert [r.texts for r in out] == [["t0.0"], ["t1.0"]]  # the inner backend's texts, untouched
    st = server.server_stats()
    assert st["calls"] == 1 and st["requests"] == 2 and st["decode_tokens"] == 7
    assert st["busy_s"] == pytest.approx(0.057)
    # work: 7 tokens at the peak rate 2 / 0.012 s
    assert st["work_s"] == pytest.approx(7 / (2 / 0.012))
    assert server.utilization(0.057) == pytest.approx(st["work_s"] / 0.057)
    assert answered_by(llm) == ("fixed", "fixed-model") and answers_any_prompt(llm) is False
    assert find_server(llm) is server


def test_a_full_batch_all_the_time_is_full_utilization():
    clock = FakeClock()
    server = ServerModelBackend(FixedBackend([4, 4, 4, 4], prompt_tokens=0), TOY, clock=clock)
    server.generate([Request(prompt=str(i)) for i in range(4)])
    assert server.utilization(sum(clock.slept)) == pytest.approx(1.0)


def test_time_scale_shortens_sleeps_and_keeps_utilization():
    clock = FakeClock()
    server = ServerModelBackend(FixedBackend([2, 5], prompt_tokens=20), TOY, time_scale=0.1, clock=clock)
    server.generate([Request(prompt="a"), Request(prompt="b")])
    full = plan_call(TOY, [20, 20], [[2], [5]]).duration_s
    assert clock.slept == pytest.approx([0.1 * full])
    st = server.server_stats()
    assert st["busy_s"] == pytest.approx(0.1 * full)
    unscaled = (7 / TOY.peak_tokens_per_s + 0.04) / full
    assert server.utilization(st["busy_s"]) == pytest.approx(unscaled)


def test_config_builds_a_server_model_over_the_simulated_policy():
    cfg = load_llm_config({"backend": "server_model",
                           "server_model": {"reference": "llama3.1-8b-a100", "max_num_seqs": 4, "time_scale": 0.5}})
    backend = make_backend(cfg, policy="engine.game24.simulated_policy:policy_for")
    assert isinstance(backend, ServerModelBackend)
    assert backend.profile.max_num_seqs == 4
    assert backend.profile.decode_step_s == REFERENCES["llama3.1-8b-a100"].decode_step_s
    assert backend.time_scale == 0.5
    assert answered_by(backend)[0] == "simulated"  # results stay labelled simulated


@pytest.mark.parametrize("table, match", [
    ({"reference": "gpt-9"}, "reference must be one of"),
    ({"time_scale": 0}, "time_scale must be > 0"),
    ({"max_num_seqs": -2}, "max_num_seqs must be >= 0"),
    ({"decode_step_per_seq_s": -0.5}, "decode_step_per_seq_s must be >= 0"),
    ({"slots": 3}, "unknown key"),
])
def test_bad_server_model_keys_are_refused(table, match):
    with pytest.raises(ConfigError, match=match):
        load_llm_config({"backend": "server_model", "server_model": table})


def test_replay_texts_need_a_trace():
    with pytest.raises(ConfigError, match="llm.replay.path must name a trace file when "
                                          "llm.server_model.backend = 'replay'"):
        load_llm_config({"backend": "server_model", "server_model": {"backend": "replay"}})


def test_overrides_replace_only_the_keys_given():
    prof = ServerModelParams(decode_step_per_seq_s=0.0).profile()
    ref = REFERENCES["llama3.1-8b-h100"]
    assert prof.decode_step_per_seq_s == 0.0 and prof.decode_step_s == ref.decode_step_s
    assert prof.max_num_seqs == ref.max_num_seqs
