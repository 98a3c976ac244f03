"""What an engine saw: the modelled engine's occupancy and queueing books, a vLLM /metrics sampler, and
the columns both give (engine.llm.engine_metrics), on fixed inputs, a fake clock and a loopback server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.llm.base import Request
from engine.llm.engine_metrics import (
    MetricsSampler, engine_summary, occupancy_quantile, parse_prometheus, quantile_from_counts, summary_line,
)
from engine.llm.server_model import ServerModelBackend

from server_fakes import TOY, FakeClock  # noqa: E402  (tests/engine/llm/server_fakes.py)
from test_server_model import FixedBackend  # noqa: E402

GAME24 = Path(__file__).resolve().parents[3] / "configs" / "game24.toml"


def test_modelled_engine_books_occupancy_and_queueing_exactly():
    """3 sequences of 2, 5 and 3 tokens on 2 slots (12 ms a step of 2): the third waits 24 ms for a slot."""
    clock = FakeClock()
    server = ServerModelBackend(FixedBackend([2, 5, 3], prompt_tokens=0), TOY, clock=clock)
    server.generate([Request(prompt=str(i)) for i in range(3)])
    st = server.server_stats()
    assert st["occupancy_s"] == pytest.approx([0.0, 0.0, 0.060])
    assert sum(st["queue_delay_counts"]) == 3 and st["queue_delay_sum_s"] == pytest.approx(0.024)
    got = engine_summary(st, 0.060)
    assert got["utilization"] == pytest.approx(1.0) and got["busy"] == pytest.approx(1.0)
    assert (got["seqs_in_flight_mean"], got["seqs_in_flight_p95"], got["max_num_seqs"]) == (pytest.approx(2.0), 2.0, 2)
    assert got["queue_delay_mean_s"] == pytest.approx(0.008)
    assert got["queue_delay_p95_s"] == pytest.approx(0.02 + 0.03 * 0.85)  # within the (20 ms, 50 ms] bucket
    clock.t += 0.94  # a second with nothing to do: idle time has no sequence in flight
    st = server.server_stats()
    assert st["occupancy_s"] == pytest.approx([0.94, 0.0, 0.060])
    later = engine_summary(st, 1.0)
    assert later["seqs_in_flight_mean"] == pytest.approx(0.12) and later["seqs_in_flight_p95"] == 2.0
    assert later["busy"] == pytest.approx(0.06)


def test_quantiles():
    assert quantile_from_counts(0.5, [1.0, 2.0], [0, 4, 0]) == pytest.approx(1.5)
    assert quantile_from_counts(0.99, [1.0], [1, 9]) == 1.0  # above the last edge: that edge
    assert occupancy_quantile(0.95, [1.0, 0.0, 0.0, 0.0, 19.0]) == 4.0
    assert occupancy_quantile(0.5, [10.0, 0.0, 1.0]) == 0.0


TEXTS = [  # what a vLLM server's /metrics says at t = 0, 1, 2, 3 s
    """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} {run}
vllm:num_requests_waiting{{model_name="m"}} 1.0
vllm:kv_cache_usage_perc{{model_name="m"}} 0.5
vllm:generation_tokens_total{{model_name="m"}} {gen}
vllm:prompt_tokens_total{{model_name="m"}} {prompt}
vllm:request_queue_time_seconds_bucket{{le="0.1",model_name="m"}} {b1}
vllm:request_queue_time_seconds_bucket{{le="1.0",model_name="m"}} {b2}
vllm:request_queue_time_seconds_bucket{{le="+Inf",model_name="m"}} {b3}
vllm:request_queue_time_seconds_sum{{model_name="m"}} {qs}
vllm:request_queue_time_seconds_count{{model_name="m"}} {b3}
""".format(**v) for v in (
        dict(run=0, gen=100, prompt=50, b1=0, b2=0, b3=0, qs=0.0),
        dict(run=4, gen=300, prompt=150, b1=2, b2=3, b3=3, qs=0.9),
        dict(run=4, gen=500, prompt=250, b1=5, b2=8, b3=9, qs=3.0),
        dict(run=2, gen=600, prompt=300, b1=6, b2=9, b3=10, qs=4.0),
    )
]


def test_sampler_gives_the_same_columns_from_a_vllm_endpoint():
    texts, now = iter(TEXTS), [0.0]

    def fetch(url):
        assert url == "http://gpu-node:8000/metrics"
        return next(texts)

    def clock():
        return now[0]

    s = MetricsSampler("http://gpu-node:8000/metrics", fetch=fetch, clock=clock)
    for t in range(4):
        now[0] = float(t)
        s.sample()
    books = s.books()
    assert books["occupancy_s"] == [1.0, 0.0, 0.0, 0.0, 2.0]  # each sample holds until the next
    assert books["queue_delay_counts"] == [6, 3, 1] and books["queue_delay_sum_s"] == 4.0
    assert (books["decode_tokens"], books["prompt_tokens"], books["kv_cache_usage_mean"]) == (500, 250, 0.5)
    got = engine_summary(books, 3.0)
    assert got["busy"] == pytest.approx(2 / 3) and got["seqs_in_flight_mean"] == pytest.approx(8 / 3)
    assert got["seqs_in_flight_p95"] == 4.0 and got["queue_delay_mean_s"] == pytest.approx(0.4)
    assert got["queue_delay_p95_s"] == 1.0 and "utilization" not in got  # no peak rate for a real server
    line = summary_line("tot-seed0", [got], 2.5)
    assert line.startswith("tot-seed0: 1 engine, busy 0.67, seqs in flight 2.7 mean, 4 p95")
    assert "queue delay 400 ms mean, 1000 ms p95, 2.50 episodes/s" in line


def test_prometheus_parser_reads_labels_and_skips_comments():
    got = parse_prometheus('# TYPE x counter\nx_total{a="1",b="q\\"z"} 3\ny 2.5e1\nbad line\nz{} NaN\n')
    assert got["x_total"] == [({"a": "1", "b": 'q\\"z'}, 3.0)] and got["y"] == [({}, 25.0)]
    assert "bad" not in got


class _MetricsServer:
    """A loopback /metrics endpoint that serves TEXTS in turn (the last one repeats)."""

    def __init__(self):
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = TEXTS[min(owner.hits, len(TEXTS) - 1)].encode()
                owner.hits += 1
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_run_reads_the_servers_metrics_and_reports_what_its_engines_saw(tmp_path, capsys):
    from engine.cli import main

    srv = _MetricsServer()
    try:
        base = ["run", str(GAME24), "--set", "protocol.test_limit=2", "--set", "protocol.warmup_sample=2",
                "--set", 'methods=["tot"]', "--set", "seeds=[0]", "--set", "report.plots=false", "--no-progress"]
        # a real server's endpoint (here a loopback fake), read by the driver while the run goes
        assert main([*base, "--out", str(tmp_path / "a"), "--set", f"llm.openai.metrics_url={json.dumps(srv.url + '/metrics')}",
                     "--set", "llm.openai.metrics_interval_s=60"]) == 0
        stats = json.loads((tmp_path / "a" / "executor_stats.jsonl").read_text().splitlines()[-1])
        eng = stats["server_engine"]
        assert eng["source"] == "vllm /metrics" and eng["samples"] >= 2 and eng["errors"] == 0
        assert "[1/1] tot-seed0: 1 engine, busy" in capsys.readouterr().err
        # the modelled engine: per worker, in executor_stats.jsonl and on the same line
        assert main([*base, "--out", str(tmp_path / "b"), "--set", "llm.backend=server_model",
                     "--set", "llm.server_model.time_scale=0.001"]) == 0
        w = json.loads((tmp_path / "b" / "executor_stats.jsonl").read_text().splitlines()[-1])["workers"][0]
        assert set(w["engine"]) >= {"utilization", "busy", "seqs_in_flight_mean", "seqs_in_flight_p95", "max_num_seqs",
                                    "queue_delay_mean_s", "queue_delay_p95_s"}
        assert 0 < w["engine"]["utilization"] <= 1.0 and w["engine"]["max_num_seqs"] == 16
        assert "utilization" in capsys.readouterr().err
    finally:
        srv.close()
    assert main(["run", str(GAME24), "--set", "llm.openai.metrics_url=ftp://x", "--dry-run"]) == 1
    assert "llm.openai.metrics_url must be '', 'auto' or an http(s) URL" in capsys.readouterr().err
