"""Structured outputs: each backend's own request format carries the constraint; the switch turns it off."""

import json
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.errors import ConfigError
from engine.forecast.toolcalls import parse_prophet_answer
from engine.llm.base import Request
from engine.llm.config import load_llm_config
from engine.llm.openai_backend import OpenAIBackend
from engine.llm.replay import trace_key
from engine.llm.structured import (
    GAME24_STEP, GAME24_VALUE, Constraint, ConstraintSwitch, prophet_forecast, vllm_sampling_kwargs,
)

MARKETS = ["Above 3.5%", "Below 3.5%"]
ANSWER = json.dumps({"probabilities": {"Above 3.5%": 0.3, "Below 3.5%": 0.7}})


OWNER = {"name": None}


@pytest.fixture(scope="module")
def fake():
    """An OpenAI-compatible server on loopback that records every body and answers with a forecast."""
    seen = []
    owner = OWNER  # GET /v1/models says owned_by OWNER["name"] (None: no /models)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if owner["name"] is None or self.path != "/v1/models":
                self.send_error(404)
                return
            payload = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": owner["name"]}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            chat = "messages" in body
            choice = {"index": 0, "finish_reason": "stop",
                      **({"message": {"role": "assistant", "content": ANSWER}} if chat else {"text": ANSWER})}
            payload = json.dumps({"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    httpd.shutdown()


def _post(fake, fmt, constraint, chat=True):
    url, seen = fake
    seen.clear()
    req = Request(messages=({"role": "user", "content": "forecast"},), constraint=constraint) if chat else \
        Request(prompt="forecast", constraint=constraint)
    with OpenAIBackend(url, "m", retries=0, structured_format=fmt) as b:
        (resp,) = b.generate([req])
    (path, body), = (x for x in seen if x[1] is not None)
    return path, body, resp


def test_schema_is_the_shape_the_parser_accepts():
    c = prophet_forecast(MARKETS)
    assert c.schema["properties"]["probabilities"]["required"] == MARKETS
    assert c.schema["properties"]["probabilities"]["additionalProperties"] is False
    assert parse_prophet_answer(ANSWER, MARKETS)[0] == {"Above 3.5%": 0.3, "Below 3.5%": 0.7}
    with pytest.raises(ValueError, match="kind must be one of"):
        Constraint("nope", regex="x")


def test_openai_response_format(fake):
    c = prophet_forecast(MARKETS)
    path, body, resp = _post(fake, "response_format", c)
    assert path.endswith("/chat/completions")
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "prophet_forecast", "schema": c.schema, "strict": True}}
    assert parse_prophet_answer(resp.texts[0], MARKETS)[0] is not None
    # a regex-only constraint has no response_format form: refused, naming the kind and the ways out
    with pytest.raises(ConfigError, match=r"'game24_value' answer constraint .*llm\.openai\.structured_format.*"
                                          r'llm\.unconstrained = \["game24_value"\]'):
        _post(fake, "response_format", GAME24_VALUE, chat=False)
    assert fake[1] == []  # nothing was sent


@pytest.mark.parametrize("owner, field", [("vllm", "guided_regex"), ("llamacpp", "grammar"), ("sglang", "regex")])
def test_auto_speaks_the_servers_own_dialect(fake, owner, field):
    OWNER["name"] = owner
    try:
        _, body, _ = _post(fake, "auto", GAME24_STEP, chat=False)
        assert field in body and "response_format" not in body
        _, body, _ = _post(fake, "auto", prophet_forecast(MARKETS))
        assert ("response_format" in body) == (owner == "sglang")
    finally:
        OWNER["name"] = None


@pytest.mark.parametrize("owner", [None, "openai"])
def test_auto_on_a_server_that_speaks_only_the_openai_api_refuses_a_regex(fake, owner):
    OWNER["name"] = owner
    try:
        _, body, _ = _post(fake, "auto", prophet_forecast(MARKETS))
        assert body["response_format"]["type"] == "json_schema"
        with pytest.raises(ConfigError, match="cannot be sent"):
            _post(fake, "auto", GAME24_STEP, chat=False)
    finally:
        OWNER["name"] = None


def test_vllm_server_guided_fields(fake):
    c = prophet_forecast(MARKETS)
    _, body, _ = _post(fake, "vllm", c)
    assert body["guided_json"] == c.schema and body["structured_outputs"] == {"json": c.schema}
    _, body, _ = _post(fake, "vllm", GAME24_STEP, chat=False)
    assert body["guided_regex"] == GAME24_STEP.regex and "response_format" not in body


def test_llamacpp_server_fields(fake):
    c = prophet_forecast(MARKETS)
    _, body, _ = _post(fake, "llamacpp", c)
    assert body["grammar"] == c.grammar and "json_schema" not in body  # the bounded grammar, not the schema
    _, body, _ = _post(fake, "llamacpp", GAME24_VALUE, chat=False)
    assert body["grammar"] == GAME24_VALUE.grammar


def test_unconstrained_requests_send_no_fields(fake):
    _, body, _ = _post(fake, "response_format", None)
    assert not {"response_format", "guided_json", "json_schema", "grammar"} & set(body)


def test_switch_turns_constraints_off_globally_and_per_kind(fake):
    url, seen = fake
    c = prophet_forecast(MARKETS)
    reqs = [Request(prompt="a", constraint=c), Request(prompt="b", constraint=GAME24_VALUE)]
    for enabled, off, want in [(True, (), [True, True]), (False, (), [False, False]),
                               (True, ("game24_value",), [True, False])]:
        seen.clear()
        with OpenAIBackend(url, "m", retries=0, structured_format="llamacpp") as b:
            ConstraintSwitch(b, enabled, off).generate(reqs)
        got = {body["prompt"]: ("json_schema" in body or "grammar" in body) for _, body in seen}
        assert [got["a"], got["b"]] == want, (enabled, off)


def test_config_switch_validates_kinds():
    cfg = load_llm_config({"unconstrained": ["game24_value"], "openai": {"structured_format": "vllm"}})
    assert cfg.unconstrained == ("game24_value",) and cfg.structured is True
    with pytest.raises(ConfigError, match="unknown prompt kind"):
        load_llm_config({"unconstrained": ["forecast_json"]})
    with pytest.raises(ConfigError, match="llm.openai.structured_format"):
        load_llm_config({"openai": {"structured_format": "xml"}})


def test_replay_keys_record_the_constraint():
    plain = Request(prompt="p", seed=1)
    constrained = Request(prompt="p", seed=1, constraint=prophet_forecast(MARKETS))
    other = Request(prompt="p", seed=1, constraint=prophet_forecast(MARKETS[:1]))
    keys = {trace_key("local", "m", r, 0) for r in (plain, constrained, other)}
    assert len(keys) == 3


def test_vllm_sampling_kwargs_pick_the_installed_api():
    class Params:
        def __init__(self, **kw):
            self.kw = kw

    new = types.SimpleNamespace(sampling_params=types.SimpleNamespace(StructuredOutputsParams=Params))
    old = types.SimpleNamespace(sampling_params=types.SimpleNamespace(GuidedDecodingParams=Params))
    c = prophet_forecast(MARKETS)
    assert vllm_sampling_kwargs(new, c)["structured_outputs"].kw == {"json": c.schema}
    assert vllm_sampling_kwargs(old, GAME24_VALUE)["guided_decoding"].kw == {"regex": GAME24_VALUE.regex}
    assert vllm_sampling_kwargs(new, None) == {}


def test_vllm_request_objects():
    vllm = pytest.importorskip("vllm")
    c = prophet_forecast(MARKETS)
    sp = vllm.SamplingParams(max_tokens=8, **vllm_sampling_kwargs(vllm, c))
    carried = getattr(sp, "structured_outputs", None) or getattr(sp, "guided_decoding", None)
    assert carried is not None and carried.json == c.schema


@pytest.mark.local_model
def test_constrained_smollm2_forecast_parses_through_both_paths():
    pytest.importorskip("xllamacpp")
    from engine.llm.local_backend import LocalLlamaBackend

    msgs = ({"role": "user", "content": "Will US unemployment be above 3.5% in May? Answer with probabilities."},)
    c = prophet_forecast(MARKETS)
    backend = LocalLlamaBackend(threads=2, parallel=2, context=1024)
    try:
        sent = []
        post = backend.transport.post
        backend.transport.post = lambda path, payload, timeout: (sent.append(payload), post(path, payload, timeout))[1]
        embedded = backend.generate([Request(messages=msgs, max_tokens=60, temperature=0.3, seed=1, constraint=c)])
        assert sent[0]["grammar"] == c.grammar  # llama.cpp's own field, in process: numbers bounded to [0, 1]
        # the same server over HTTP as an OpenAI-compatible endpoint, told through response_format
        with OpenAIBackend(backend.base_url, retries=0, timeout_s=300, structured_format="response_format") as http:
            over_http = http.generate([Request(messages=msgs, max_tokens=60, temperature=0.3, seed=2, constraint=c)])
    finally:
        backend.close()
    for resp in (embedded[0], over_http[0]):
        probs, problem = parse_prophet_answer(resp.texts[0], MARKETS)
        assert probs is not None, (resp.texts[0], problem)
        assert set(probs) == set(MARKETS) and all(0 <= p <= 1 for p in probs.values())


@pytest.mark.local_model
def test_the_forecast_grammar_keeps_every_number_in_bounds_where_the_schema_does_not():
    # SmolLM2 asked for percentages: under llama.cpp's conversion of the schema it may write 100 or 125 (the
    # bounds are not enforced); under the grammar every number is in [0, 1] and the answer ends early
    pytest.importorskip("xllamacpp")
    from engine.llm.local_backend import LocalLlamaBackend

    markets = ['Above 4.2%', 'Between "4.0%" and 4.2%', "Below 4.0%"]
    msgs = ({"role": "user", "content": "Give each outcome's chance in percent (0-100): " + ", ".join(markets)},)
    c = prophet_forecast(markets)
    backend = LocalLlamaBackend(threads=2, parallel=2, context=1024)
    try:
        out = backend.generate([Request(messages=msgs, max_tokens=120, temperature=1.0, seed=s, constraint=c)
                                for s in range(4)])
    finally:
        backend.close()
    for resp in out:
        assert resp.completions[0].finish_reason == "stop", resp.texts[0]
        probs, problem = parse_prophet_answer(resp.texts[0], markets)
        assert probs is not None and set(probs) == set(markets), (resp.texts[0], problem)
        raw = json.loads(resp.texts[0])["probabilities"]
        assert all(0 <= v <= 1 for v in raw.values()), resp.texts[0]


@pytest.mark.local_model
def test_constrained_smollm2_writes_game24_lines_through_the_grammars():
    """The Game-of-24 GBNF grammars are valid llama.cpp grammars, and what they let SmolLM2 write
    is what the ToT search parses (the regex twins describe the same lines)."""
    import re

    pytest.importorskip("xllamacpp")
    from engine.game24 import prompts as P
    from engine.llm.local_backend import LocalLlamaBackend
    from engine.llm.structured import GAME24_ANSWER

    backend = LocalLlamaBackend(threads=2, parallel=2, context=2048)
    try:
        out = backend.generate([
            Request(prompt=P.propose_prompt("4 5 6 10"), max_tokens=60, temperature=0.7, seed=3, constraint=GAME24_STEP),
            Request(prompt=P.value_prompt("4 6"), max_tokens=60, temperature=0.7, seed=4, constraint=GAME24_VALUE),
            Request(prompt=P.answer_prompt("4 5 6 10", "10 - 4 = 6 (left: 5 6 6)\n"), max_tokens=40,
                    temperature=0.7, seed=5, constraint=GAME24_ANSWER),
        ])
    finally:
        backend.close()
    step, value, answer = (r.texts[0] for r in out)
    # a cut at max_tokens can end a line early; every complete line has the step shape
    lines = step.split("\n")
    assert all(re.fullmatch(GAME24_STEP.regex, ln) for ln in lines[:-1] if ln), step
    assert value.split("\n")[-1] in ("sure", "likely", "impossible") or len(value.split()) >= 40, value
    assert answer.startswith("Answer: "), answer
