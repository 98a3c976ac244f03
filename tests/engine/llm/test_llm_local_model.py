"""Real llama.cpp with SmolLM2-135M: the local backend, and the openai backend over HTTP on 127.0.0.1."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("xllamacpp")

from engine.errors import BackendError  # noqa: E402
from engine.game24 import prompts as P  # noqa: E402
from engine.llm.base import Request  # noqa: E402
from engine.llm.openai_backend import OpenAIBackend  # noqa: E402

pytestmark = pytest.mark.local_model

REPO = Path(__file__).resolve().parents[3]


def _start_server(parallel=2):
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "llm_serve_local.py"), "--parallel", str(parallel),
         "--threads", "1", "--context", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("URL "):
            return proc, line.split()[1]
        if proc.poll() is not None:
            break
    proc.kill()
    pytest.fail("the llama.cpp server did not start")


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server():
    proc, url = _start_server()
    yield url
    _stop(proc)


def test_openai_backend_real_server_n_and_batch(server):
    with OpenAIBackend(server, max_concurrency=2, retries=0, timeout_s=120) as b:
        reqs = [
            Request(prompt=P.propose_prompt("4 9 10 13"), n=2, max_tokens=6, seed=1),
            Request(messages=[{"role": "user", "content": "Say hi."}], n=1, max_tokens=4, seed=2),
        ]
        out = b.generate(reqs)
    assert len(out) == 2 and len(out[0].completions) == 2 and len(out[1].completions) == 1
    assert all(r.prompt_tokens > 0 and r.backend == "openai" and r.latency_s > 0 for r in out)
    assert out[0].prompt_tokens > 100 > out[1].prompt_tokens  # the propose prompt is long
    assert all(0 < c.completion_tokens <= 6 for r in out for c in r.completions)
    assert out[1].completions[0].completion_tokens <= 4


def test_usage_covers_choices_auto_asks_the_server_and_cached_tokens_are_read(server):
    # llama.cpp's server reports one choice's completion tokens for n > 1: the probe finds it, and each
    # choice is then counted from its own text, never halved from a shared total
    with OpenAIBackend(server, max_concurrency=2, retries=0, timeout_s=120, usage_sums_choices=None) as b:
        prompt = P.propose_prompt("4 9 10 13")
        first = b.generate([Request(prompt=prompt, n=2, max_tokens=6, seed=1, temperature=1.0)])[0]
        assert b.usage_detected == "one" and b.usage_sums_choices is False
        assert [c.completion_tokens for c in first.completions if c.finish_reason == "length"] in ([], [6], [6, 6])
        again = b.generate([Request(prompt=prompt, n=1, max_tokens=4, seed=2)])[0]
    # the same long prompt again: the server answers most of it from its prefix cache, and says so
    assert again.cached_tokens is not None and 0 < again.cached_tokens <= again.prompt_tokens


def test_local_backend_counts_tokens_as_its_server_tokenizes():
    import json
    import urllib.request

    from engine.finance import prompts as F
    from engine.forecast import prompts as FP
    from engine.generic.method import prompt as generic_prompt
    from engine.llm.config import load_llm_config
    from engine.llm.factory import make_backend
    from engine.llm.tokenizer import label_of
    from engine.llm.tokens import count_tokens
    from engine.memory_budget import token_counter

    prompts = [P.propose_prompt("4 9 10 13"), P.value_prompt("4 9 10"), P.value_last_step_prompt("4 9 10 13", "(10 - 4) * (13 - 9) = 24"),
               P.answer_prompt("4 9 10 13", ["13 - 9 = 4 (left: 4 4 10)", "10 + 4 = 14 (left: 4 14)"]),
               F.sentiment_prompt("Banks", "Rates cut", "The central bank cut rates by 50 basis points."),
               F.route_prompt("Banks", ["rates", "credit"], "Rates cut", "The central bank cut rates."),
               F.merge_prompt("Banks", "rates", "Rate cuts lift loan demand.", "Lower rates raise lending volumes."),
               F.merge_factor_prompt("Banks", "rates", "monetary policy"),
               FP.main_system("2025-07-01"), FP.repair_prompt("the answer had no JSON object"),
               FP.subagent_user("/item/turn1_item1", "raw_data.json", "final_data.txt"),
               generic_prompt("Compute 17 * 23.", "Example 1 - Success: 2 + 2 = 4")]
    b = make_backend(load_llm_config({"llm": {"backend": "local", "parallel": 1, "threads": 1, "context": 1024}}))
    try:
        root = b.base_url[: -len("/v1")]

        def tokenize(text):
            req = urllib.request.Request(root + "/tokenize", data=json.dumps({"content": text}).encode(),
                                         headers={"Content-Type": "application/json"})
            return len(json.loads(urllib.request.urlopen(req, timeout=60).read())["tokens"])

        count = token_counter(b)
        assert [count(p) for p in prompts] == [tokenize(p) for p in prompts]
        assert any(count(p) != count_tokens(p) for p in prompts)  # the estimate was off
        assert label_of(b).startswith("server /tokenize")
    finally:
        b.close()


@pytest.mark.parametrize("limit", [1, 2])
def test_requests_in_flight_reach_the_configured_limit_at_the_server(server, limit):
    import json
    import urllib.request

    root, busy, done = server[: -len("/v1")], [], threading.Event()

    def watch():  # the server's own view: how many of its 2 slots are processing at once
        while not done.is_set():
            with urllib.request.urlopen(root + "/slots", timeout=10) as resp:
                busy.append(sum(bool(s.get("is_processing")) for s in json.loads(resp.read())))
            time.sleep(0.01)

    t = threading.Thread(target=watch)
    t.start()
    try:
        with OpenAIBackend(server, max_concurrency=limit, retries=0, timeout_s=120) as b:
            b.generate([Request(prompt=f"Write a long story about the number {i}.", max_tokens=48, seed=i,
                                temperature=1.0) for i in range(4)])
    finally:
        done.set()
        t.join()
    assert max(busy) == limit


def test_openai_backend_server_killed_mid_batch():
    proc, url = _start_server(parallel=2)
    b = OpenAIBackend(url, retries=1, backoff_s=0.1, backoff_max_s=0.2, timeout_s=60, max_concurrency=2)
    err = {}

    def run():
        try:
            b.generate([Request(prompt=f"Tell a long story number {i}.", max_tokens=400) for i in range(4)])
        except BackendError as exc:
            err["e"] = exc

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.5)
    proc.kill()
    proc.wait()
    t.join(60)
    assert not t.is_alive()
    assert "e" in err and url.split("//")[1] in str(err["e"])
    b.close()


def test_local_backend_generates():
    from engine.llm.config import load_llm_config
    from engine.llm.factory import make_backend
    from engine.llm.local_backend import default_model_path

    assert default_model_path().endswith(".gguf")
    b = make_backend(load_llm_config({"llm": {"backend": "local", "parallel": 2, "threads": 1, "context": 1024}}))
    try:
        assert b.base_url.startswith("http://127.0.0.1:")
        out = b.generate([
            Request(prompt="Input: 1 1 4 6\nPossible next steps:\n", n=2, max_tokens=5, seed=3),
            Request(messages=[{"role": "user", "content": "Name a color."}], max_tokens=4, temperature=0.0),
        ])
        assert [len(r.completions) for r in out] == [2, 1]
        assert all(r.backend == "local" and r.model.startswith("SmolLM2") for r in out)
        assert all(r.prompt_tokens > 0 for r in out)
        assert all(0 < c.completion_tokens <= 5 for r in out for c in r.completions)
        # greedy decoding repeats itself
        again = b.generate([Request(messages=[{"role": "user", "content": "Name a color."}], max_tokens=4,
                                    temperature=0.0)])
        assert again[0].texts == out[1].texts
    finally:
        b.close()
