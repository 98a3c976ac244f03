"""A JSON HTTP server on 127.0.0.1 for tests of the engine's clients (a thread; keep-alive HTTP/1.1).

``Loopback(handle)`` serves every request with ``handle(request) -> (status, body)`` or
``(status, body, headers)``, where ``request`` has ``method``, ``path``, ``body`` (the parsed JSON, or
None), ``raw`` (the bytes), ``client_port`` and ``drop()`` (close the connection without an answer; the
handler then returns None). ``url`` is the server's root plus ``/v1``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Request:
    method: str
    path: str
    body: Any
    raw: bytes
    client_port: int
    drop: Callable[[], None]


class Loopback:
    def __init__(self, handle: Callable[[Request], Any]):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _serve(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""

                def drop():
                    self.close_connection = True
                    self.connection.shutdown(2)

                answer = handle(Request(method, self.path, json.loads(raw) if raw else None, raw,
                                        self.client_address[1], drop))
                if answer is None:
                    return
                status, body, headers = (*answer, {})[:3] if len(answer) == 2 else answer
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                self._serve("POST")

            def do_GET(self):
                self._serve("GET")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda *a: None  # clients that gave up leave broken pipes
        self.root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = self.root + "/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
