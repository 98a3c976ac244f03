"""OpenAI backend against a tiny http.server fake: retries, errors, n fan-out, chat, timeouts."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.errors import BackendError, InputError
from engine.llm.base import Request
from engine.llm.openai_backend import OpenAIBackend


class Fake:
    """Scripted server: ``script`` is a list of actions consumed per POST; then it answers normally."""

    def __init__(self, honour_n=True):
        self.script = []
        self.honour_n = honour_n
        self.seen = []
        self.lock = threading.Lock()
        self.release = threading.Event()  # "hang" actions answer only once this is set (at close)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.seen.append((self.path, body, self.headers.get("Authorization")))
                    action = fake.script.pop(0) if fake.script else "ok"
                if isinstance(action, tuple) and action[0] == "sleep":
                    time.sleep(action[1])
                    action = "ok"
                if action == "hang":  # no answer until the test ends: the client's timeout must fire
                    fake.release.wait()
                    action = "ok"
                if isinstance(action, int):
                    payload = json.dumps({"error": {"message": f"scripted {action}"}}).encode()
                    self.send_response(action)
                    if action == 429:
                        self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if action == "garbage":
                    payload = b"<html>oops</html>"
                else:
                    n = body.get("n", 1) if fake.honour_n else 1
                    chat = "messages" in body
                    src = body["messages"][-1]["content"] if chat else body["prompt"]
                    choices = []
                    for i in range(n):
                        text = f"echo {src} #{i} seed={body.get('seed')}"
                        c = {"index": i, "finish_reason": "stop"}
                        c.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
                        choices.append(c)
                    payload = json.dumps({"choices": choices, "model": "fake-model",
                                          "usage": {"prompt_tokens": 7, "completion_tokens": 5 * n}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.handle_error = lambda *a: None  # clients that timed out leave broken pipes
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    f = Fake()
    yield f
    f.close()


def _backend(url, **kw):
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("backoff_max_s", 0.05)
    return OpenAIBackend(url, "fake-model", **kw)


def test_batch_in_order_with_counts(fake):
    b = _backend(fake.url, max_concurrency=3, api_key="sk-1")
    reqs = [Request(prompt=f"p{i}", n=2, seed=10 * i, max_tokens=9) for i in range(5)]
    out = b.generate(reqs)
    assert [r.texts[0].split()[1] for r in out] == [f"p{i}" for i in range(5)]
    assert all(len(r.completions) == 2 and r.prompt_tokens == 7 and r.completion_tokens == 10 for r in out)
    assert all(r.backend == "openai" and r.model == "fake-model" and r.latency_s > 0 for r in out)
    path, body, auth = fake.seen[0]
    assert path == "/v1/completions" and auth == "Bearer sk-1"
    assert body["max_tokens"] == 9 and body["n"] == 2 and body["model"] == "fake-model"
    b.close()


def test_retries_on_429_and_5xx_then_succeeds(fake):
    fake.script = [429, 500, 503]
    b = _backend(fake.url, retries=3, max_concurrency=1)
    out = b.generate([Request(prompt="hello")])
    assert out[0].texts == ["echo hello #0 seed=None"]
    assert len(fake.seen) == 4


def test_gives_up_after_retries_naming_the_endpoint(fake):
    fake.script = [502] * 10
    b = _backend(fake.url, retries=2, max_concurrency=1)
    with pytest.raises(BackendError, match=r"127\.0\.0\.1:\d+/v1/completions failed after 3 attempt\(s\): HTTP 502"):
        b.generate([Request(prompt="a"), Request(prompt="b")])


def test_client_error_is_not_retried(fake):
    fake.script = [400]
    b = _backend(fake.url, retries=5, max_concurrency=1)
    with pytest.raises(BackendError, match="HTTP 400 from http://"):
        b.generate([Request(prompt="a")])
    assert len(fake.seen) == 1


def test_non_json_body_is_retried(fake):
    fake.script = ["garbage"]
    out = _backend(fake.url, retries=1).generate([Request(prompt="x")])
    assert out[0].texts[0].startswith("echo x")


def test_timeout_retries_then_fails(fake):
    fake.script = ["hang", "hang"]  # a server that never answers (until the test ends): no race with the clock
    b = _backend(fake.url, retries=1, timeout_s=0.2, max_concurrency=1)
    with pytest.raises(BackendError, match="timed out after 0.2s"):
        b.generate([Request(prompt="slow")])
    assert len(fake.seen) == 2  # the first attempt and its one retry, each timed out


def test_server_down_fails_clearly():
    b = _backend("http://127.0.0.1:9/v1", retries=1)
    with pytest.raises(BackendError, match=r"cannot reach http://127\.0\.0\.1:9/v1/completions"):
        b.generate([Request(prompt="x")])


def test_fan_out_when_server_ignores_n():
    f = Fake(honour_n=False)
    try:
        b = _backend(f.url)
        out = b.generate([Request(prompt="q", n=3, seed=5)])
        assert [t.split()[-1] for t in out[0].texts] == ["seed=5", "seed=6", "seed=7"]
        assert b.server_ignores_n
        f.seen.clear()
        b.generate([Request(prompt="q", n=2, seed=1)])
        assert [body["n"] for _, body, _ in f.seen] == [1, 1]  # fans out directly now
        # "never" trusts the server: fewer completions than asked come back as they are
        assert len(_backend(f.url, fan_out_n="never").generate([Request(prompt="q", n=2)])[0].completions) == 1
    finally:
        f.close()


def test_always_fan_out_and_chat(fake):
    b = _backend(fake.url, fan_out_n="always", api="chat")
    out = b.generate([Request(prompt="hi", n=2), Request(messages=[{"role": "user", "content": "yo"}])])
    assert out[0].texts == ["echo hi #0 seed=None"] * 2 and out[1].texts == ["echo yo #0 seed=None"]
    assert {p for p, _, _ in fake.seen} == {"/v1/chat/completions"}
    assert all(body["n"] == 1 for _, body, _ in fake.seen)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"api": "responses"}, "api must be"),
        ({"fan_out_n": "sometimes"}, "fan_out_n must be"),
        ({"max_concurrency": 0}, "max_concurrency must be"),
        ({"retries": -1}, "retries must be"),
        ({"timeout_s": 0}, "timeout_s must be"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(InputError, match=match):
        OpenAIBackend("http://127.0.0.1:9/v1", **kwargs)
    with pytest.raises(InputError, match="base_url must start"):
        OpenAIBackend("127.0.0.1:9")


def test_non_request_rejected(fake):
    with pytest.raises(InputError, match=r"requests\[0\] must be a Request"):
        _backend(fake.url).generate(["prompt"])


def _text(body):
    return body["messages"][-1]["content"] if "messages" in body else body["prompt"]


def test_extra_body_reaches_every_request_and_usage_of_one_choice_is_estimated(fake):
    from engine.llm.config import load_llm_config

    cfg = load_llm_config({"backend": "openai", "model": "fake-model", "openai": {
        "base_url": fake.url, "extra_body": {"top_k": 20, "min_p": 0.1}, "usage_covers_choices": "one", "retries": 0}})
    b = OpenAIBackend.from_config(cfg)
    out = b.generate([Request(prompt="p0", n=2, max_tokens=9), Request(prompt="p1", max_tokens=9)])
    bodies = [body for _, body, _ in fake.seen]
    assert all(body["top_k"] == 20 and body["min_p"] == 0.1 for body in bodies)
    # the two requests are sent concurrently, so the server may see them in either order
    (first,) = [body for body in bodies if _text(body) == "p0"]
    assert first["n"] == 2 and first["max_tokens"] == 9  # the request's own fields are the engine's
    # the fake reports 5 tokens per choice summed (10 for n = 2); "one" means the server counted one choice,
    # so each choice's count is estimated from its text instead of splitting 10
    est = [c.completion_tokens for c in out[0].completions]
    summed = OpenAIBackend.from_config(load_llm_config({"backend": "openai", "model": "fake-model",
                                                        "openai": {"base_url": fake.url, "retries": 0}}))
    split = [c.completion_tokens for c in summed.generate([Request(prompt="p0", n=2, max_tokens=9)])[0].completions]
    assert sum(split) == 10 and est != split


@pytest.mark.parametrize("table, match", [
    ({"openai": {"extra_body": {"temperature": 0}}}, r"llm.openai.extra_body sets \['temperature'\]"),
    ({"vllm": {"engine_kwargs": {"dtype": "half"}}}, r"llm.vllm.engine_kwargs sets \['dtype'\].*use llm.vllm.dtype"),
    ({"vllm": {"engine_kwargs": {"seed": 1}}}, r"llm.vllm.engine_kwargs sets \['seed'\].*use llm.seed"),
    ({"openai": {"usage_covers_choices": "some"}}, "llm.openai.usage_covers_choices must be one of"),
    ({"openai": {"extra_body": [1]}}, "llm.openai.extra_body must be a table"),
])
def test_passed_through_settings_are_checked(table, match):
    from engine.errors import ConfigError
    from engine.llm.config import load_llm_config

    with pytest.raises(ConfigError, match=match):
        load_llm_config({"backend": "openai", **table})


def test_engine_kwargs_reach_vllm_llm(monkeypatch):
    """With vLLM absent here, a stand-in module records what vllm.LLM(...) is given."""
    import sys
    import types

    from engine.llm import vllm_backend
    from engine.llm.config import load_llm_config

    seen = {}
    fake_vllm = types.SimpleNamespace(LLM=lambda **kw: seen.update(kw) or object())
    monkeypatch.setattr(vllm_backend, "require", lambda module, extra: fake_vllm)
    monkeypatch.setitem(sys.modules, "vllm", None)  # EngineArgs check skipped: no vLLM to ask
    cfg = load_llm_config({"backend": "vllm", "model": "/models/m", "vllm": {"engine_kwargs": {
        "max_num_seqs": 64, "enable_prefix_caching": True, "quantization": "awq"}}})
    vllm_backend.VLLMBackend.from_config(cfg)
    assert seen["max_num_seqs"] == 64 and seen["enable_prefix_caching"] is True and seen["quantization"] == "awq"
    assert seen["model"] == "/models/m" and seen["dtype"] == "auto"


class _UsageServer:
    """An in-process transport whose usage for n > 1 covers ``covers`` choices (1 or n), cut at max_tokens."""

    endpoint = "fake://usage"

    def __init__(self, covers_all: bool, cached=None):
        self.covers_all, self.cached, self.seen = covers_all, cached, []

    def post(self, path, payload, timeout):
        self.seen.append(payload)
        n, k = payload.get("n", 1), payload["max_tokens"]
        usage = {"prompt_tokens": 20, "completion_tokens": k * n if self.covers_all else k}
        if self.cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached}
        return {"choices": [{"index": i, "text": "x " * k, "finish_reason": "length"} for i in range(n)],
                "usage": usage}


@pytest.mark.parametrize("covers_all, want", [(True, "all"), (False, "one")])
def test_usage_covers_choices_auto_probes_once(covers_all, want):
    server = _UsageServer(covers_all)
    b = OpenAIBackend(server, "m", usage_sums_choices=None)
    b.generate([Request(prompt="p", n=1, max_tokens=3)])
    assert not server.seen[0].get("n", 1) > 1 and b.usage_detected == ""  # no n > 1 yet: nothing asked
    out = b.generate([Request(prompt="p", n=2, max_tokens=6)])
    b.generate([Request(prompt="p", n=3, max_tokens=6)])
    probes = [p for p in server.seen if p["max_tokens"] == OpenAIBackend.PROBE_TOKENS]
    assert len(probes) == 1 and probes[0]["n"] == 2  # asked once, before the first n > 1 request
    assert b.usage_detected == want and b.usage_sums_choices is covers_all
    assert [c.completion_tokens for c in out[0].completions] == [6, 6]  # each choice cut at 6: never halved


def test_usage_probe_that_cannot_tell_keeps_the_sum_and_says_why():
    class Unclear(_UsageServer):
        def post(self, path, payload, timeout):
            out = super().post(path, payload, timeout)
            out["usage"]["completion_tokens"] = 5
            return out

    b = OpenAIBackend(Unclear(True), "m", usage_sums_choices=None)
    b.generate([Request(prompt="p", n=2, max_tokens=6)])
    assert b.usage_sums_choices is True and b.usage_detected.startswith("all (assumed: 5 completion tokens")


def test_cached_tokens_are_read_and_metered():
    from engine.llm.base import MeteredBackend, usage_fields

    b = MeteredBackend(OpenAIBackend(_UsageServer(True, cached=16), "m"))
    out = b.generate([Request(prompt="p", max_tokens=2, episode="e1"), Request(prompt="q", max_tokens=2, episode="e1")])
    assert [r.cached_tokens for r in out] == [16, 16]
    assert usage_fields(b.meter.per_episode["e1"]) == {"cached_tokens": 32, "cache_prompt_tokens": 40}
    plain = MeteredBackend(OpenAIBackend(_UsageServer(True), "m"))
    plain.generate([Request(prompt="p", max_tokens=2, episode="e1")])
    assert usage_fields(plain.meter.per_episode["e1"]) == {}  # not reported: the record is unchanged
