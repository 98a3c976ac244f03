"""OpenAI-compatible /v1/embeddings client against a tiny local http.server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from engine.embed import EmbedConfig, make_embedder
from engine.embed.openai_embed import OpenAIEmbedder
from engine.errors import BackendError, InputError


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.requests.append((self.path, body, self.headers.get("Authorization")))
        if srv.fail_first > 0:
            srv.fail_first -= 1
            self.send_response(srv.fail_status)
            self.end_headers()
            self.wfile.write(b"busy")
            return
        if srv.mode == "garbage":
            out = b"not json"
        elif srv.mode == "wrong-shape":
            out = json.dumps({"data": "none"}).encode()
        else:
            dim = srv.dim
            data = []
            for i, t in enumerate(body["input"]):
                v = np.zeros(dim)
                v[len(t) % dim] = 1.0
                v[(len(t) + 1) % dim] = 0.5
                data.append({"index": i, "embedding": v.tolist(), "object": "embedding"})
            out = json.dumps({"data": data[::-1], "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.requests, srv.fail_first, srv.fail_status, srv.mode, srv.dim = [], 0, 503, "ok", 8
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv):
    return f"http://127.0.0.1:{srv.server_address[1]}/v1"


def test_embeds_in_order_batched_with_key(server):
    e = OpenAIEmbedder(base_url=_url(server), model="m", dim=8, api_key="sk-test", batch_size=2)
    v = e.embed(["a", "bb", "ccc", "a"])
    assert v.shape == (4, 8) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-6)
    assert np.argmax(v[1]) == 2 and np.argmax(v[2]) == 3  # order restored from "index"
    assert [p for p, _, _ in server.requests] == ["/v1/embeddings", "/v1/embeddings"]
    assert server.requests[0][2] == "Bearer sk-test" and server.requests[0][1]["model"] == "m"


def test_dim_probed_when_not_given(server):
    server.dim = 12
    e = make_embedder(EmbedConfig(backend="openai", base_url=_url(server), model="m", dim=0))
    assert e.embed(["x"]).shape == (1, 12) and e.dim == 12


def test_retries_then_succeeds(server):
    server.fail_first = 2
    e = OpenAIEmbedder(base_url=_url(server), model="m", dim=8, max_retries=3, backoff_s=0.01)
    assert e.embed(["x"]).shape == (1, 8)
    assert len(server.requests) == 3


def test_gives_up_with_endpoint_in_message(server):
    server.fail_first = 10
    e = OpenAIEmbedder(base_url=_url(server), model="m", dim=8, max_retries=1, backoff_s=0.01)
    with pytest.raises(BackendError, match=r"/v1/embeddings .*2 attempt\(s\): HTTP 503"):
        e.embed(["x"])


def test_client_error_not_retried(server):
    server.fail_first, server.fail_status = 5, 400
    e = OpenAIEmbedder(base_url=_url(server), model="m", dim=8, max_retries=3, backoff_s=0.01)
    with pytest.raises(BackendError, match="HTTP 400"):
        e.embed(["x"])
    assert len(server.requests) == 1


def test_wrong_width_and_garbage(server):
    e = OpenAIEmbedder(base_url=_url(server), model="m", dim=16, max_retries=0)
    with pytest.raises(BackendError, match="width 8; expected dim=16"):
        e.embed(["x"])
    server.mode = "garbage"  # not JSON: retried as every outbound call's policy says, then named
    e = OpenAIEmbedder(base_url=_url(server), model="m", dim=8, max_retries=1, backoff_s=0.0)
    n = len(server.requests)
    with pytest.raises(BackendError, match="2 attempt.*body that is not JSON"):
        e.embed(["x"])
    assert len(server.requests) - n == 2
    server.mode = "wrong-shape"
    with pytest.raises(BackendError, match="malformed body"):
        e.embed(["y"])


def test_connection_refused_names_endpoint():
    e = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", model="m", dim=8, max_retries=0, timeout_s=2)
    with pytest.raises(BackendError, match=r"http://127.0.0.1:9/v1/embeddings"):
        e.embed(["x"])


def test_bad_args():
    with pytest.raises(InputError, match="base_url"):
        OpenAIEmbedder(base_url="localhost:8000", model="m")
    with pytest.raises(InputError, match="model"):
        OpenAIEmbedder(base_url="http://x", model="")
