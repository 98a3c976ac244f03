"""llm.openai.on_error: runs against a loopback OpenAI-compatible server that fails some requests.

The server answers with a task's simulated policy (a test harness, not a model) and, chosen by a hash
of the request body (so the same requests fail in every run), answers 5% of them with HTTP 500 and
drops the connection of 1% without an answer. Retries are off, so each of those is a failure. The
generic task's ``plain`` method (one request per problem, no memory) shows that the other episodes
equal a clean run's; Game of 24 (ToT, about 60 requests per puzzle) that a search-based task records them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.cli import main
from engine.game24.simulated_policy import simulated_backend
from engine.generic.simulated import GenericPolicy
from engine.llm.base import Request
from engine.llm.simulated import SimulatedBackend
from loopback import Loopback  # tests/engine/loopback.py

ROOT = Path(__file__).resolve().parents[3]
TIMING = {"wall_s", "llm_latency_s"}


class PolicyServer(Loopback):
    """Says it is vLLM (structured_format = "auto": guided_* fields, which the policy ignores) and answers
    with ``policy``; with ``faults``, the hash-chosen failures of the module docstring."""

    def __init__(self, faults: bool, policy):
        self.faults, self.failed, self.cache = faults, 0, False
        super().__init__(self.answer)
        self.policy = policy

    def answer(self, req):
        if req.method == "GET":
            return (200, {"data": [{"id": "sim", "owned_by": "vllm"}]}) if req.path == "/v1/models" else (404, {})
        if not req.path.startswith("/v1/"):  # /tokenize: not offered (token counts fall back to the estimate)
            return 404, {"error": "not found"}
        roll = int(hashlib.sha256(req.raw).hexdigest()[:8], 16) % 100 if self.faults else 99
        if roll == 0:  # a dropped connection: no answer at all
            self.failed += 1
            return req.drop()
        if roll <= 5:
            self.failed += 1
            return 500, {"error": {"message": "injected fault"}}
        body = req.body
        prompt = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
        (resp,) = self.policy.generate([Request(prompt=prompt, n=body.get("n", 1),
                                                temperature=body.get("temperature", 0.7),
                                                max_tokens=body.get("max_tokens", 16),
                                                stop=tuple(body.get("stop") or ()), seed=body.get("seed"))])
        usage = {"prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens}
        if self.cache:
            usage["prompt_tokens_details"] = {"cached_tokens": resp.prompt_tokens // 4}
        return 200, {"model": "sim", "usage": usage, "choices": [
            {"index": i, "text": c.text, "finish_reason": c.finish_reason} for i, c in enumerate(resp.completions)]}


LLM = ["--set", "llm.backend=openai", "--set", "llm.model=sim", "--set", "llm.openai.retries=0",
       "--set", "llm.openai.fan_out_n=never"]


def _generic(url: str, out: Path, on_error: str, *extra: str) -> int:
    return main(["run", str(ROOT / "configs/generic-example.toml"), "--out", str(out), "--no-progress",
                 "--set", 'methods=["plain"]', "--set", "report.plots=false", *LLM,
                 "--set", f"llm.openai.base_url={url}", "--set", f"llm.openai.on_error={on_error}", *extra])


def _game24(url: str, out: Path, on_error: str) -> int:
    return main(["run", str(ROOT / "configs/game24.toml"), "--out", str(out), "--no-progress",
                 "--set", 'methods=["tot"]', "--set", "seeds=[0]", "--set", "protocol.test_limit=4",
                 "--set", "protocol.warmup_sample=0", "--set", "report.plots=false", *LLM,
                 "--set", f"llm.openai.base_url={url}", "--set", f"llm.openai.on_error={on_error}"])


@pytest.fixture
def servers():
    made = []

    def make(faults, policy=None):
        made.append(PolicyServer(faults, policy or SimulatedBackend(GenericPolicy())))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_failed_requests_are_error_rows_and_the_rest_equals_a_clean_run(servers, tmp_path):
    clean, faulty = servers(False), servers(True)
    assert _generic(clean.url, tmp_path / "clean", "record") == 0
    assert _generic(faulty.url, tmp_path / "faulty", "record") == 0
    want = {r["episode_id"]: r for r in pq.read_table(tmp_path / "clean" / "episodes.parquet").to_pylist()}
    got = pq.read_table(tmp_path / "faulty" / "episodes.parquet").to_pylist()
    assert len(got) == len(want) == 60
    hit = [r for r in got if r.get("llm_errors")]
    assert 0 < len(hit) == faulty.failed < 60  # one request per problem: one failure, one error row
    assert all("HTTP 500" in r["llm_error"] or "connection" in r["llm_error"] for r in hit)
    assert all(not r["correct"] for r in hit)  # answered with nothing: wrong, never skipped
    # the faulty run's columns llm_errors / llm_error are null on its answered rows
    same = lambda r: {k: v for k, v in r.items() if k not in TIMING and k not in ("llm_errors", "llm_error")}  # noqa: E731
    assert all(r["llm_errors"] is None and r["llm_error"] is None for r in got if r not in hit)
    assert all(same(r) == same(want[r["episode_id"]]) for r in got if not r.get("llm_errors"))
    summary = json.loads((tmp_path / "faulty" / "summary.json").read_text())
    assert summary["methods"][0]["failed_episodes"] == len(hit)
    assert summary["meta"]["llm_errors"] == {"episodes": len(hit), "requests": len(hit), "first": hit[0]["llm_error"]}
    assert f"{len(hit)} of 60 episodes had LLM requests that failed" in (tmp_path / "faulty" / "table.md").read_text()
    clean_summary = json.loads((tmp_path / "clean" / "summary.json").read_text())
    assert "failed_episodes" not in clean_summary["methods"][0]
    assert clean_summary["meta"]["provenance"]["token_counter"].startswith("server /tokenize where it answers")


def test_a_search_task_records_its_failed_requests(servers, tmp_path):
    faulty = servers(True, simulated_backend())
    assert _game24(faulty.url, tmp_path / "g", "record") == 0
    got = pq.read_table(tmp_path / "g" / "episodes.parquet").to_pylist()
    assert faulty.failed > 0 and sum(r.get("llm_errors") or 0 for r in got) == faulty.failed


def test_with_on_error_fail_the_run_stops_naming_the_url_and_status_and_resumes(servers, tmp_path, capsys):
    clean, faulty = servers(False), servers(True)
    ckpt = ("--set", "protocol.checkpoint=true")
    assert _generic(faulty.url, tmp_path / "o", "fail", *ckpt) == 1
    err = capsys.readouterr().err
    assert faulty.url in err and ("HTTP 500" in err or "connection" in err)
    assert not (tmp_path / "o" / "summary.json").exists()
    faulty.faults = False  # the server recovers: the same command resumes from the last finished round
    assert _generic(faulty.url, tmp_path / "o", "fail", *ckpt) == 0
    assert _generic(clean.url, tmp_path / "clean", "fail") == 0
    rows = lambda d: sorted(({k: v for k, v in r.items() if k not in TIMING}  # noqa: E731
                             for r in pq.read_table(d / "episodes.parquet").to_pylist()), key=lambda r: r["episode_id"])
    assert rows(tmp_path / "o") == rows(tmp_path / "clean")


def test_finance_records_its_failed_requests(servers, tmp_path):
    from engine.finance.simulated import policy_for

    faulty = servers(True, SimulatedBackend(policy_for(None)))
    assert main(["run", str(ROOT / "configs/finance-synthetic.toml"), "--out", str(tmp_path / "f"), "--no-progress",
                 "--set", 'methods=["Pipe"]', "--set", "seeds=[0]", "--set", "synthetic.n_industries=4",
                 "--set", "synthetic.n_days=80", "--set", "plots=false",
                 "--set", "protocol.exploitation_start=\"2025-03-03\"", *LLM,
                 "--set", f"llm.openai.base_url={faulty.url}", "--set", "llm.openai.on_error=record"]) == 0
    got = pq.read_table(tmp_path / "f" / "episodes.parquet").to_pylist()
    assert faulty.failed > 0 and sum(r.get("llm_errors") or 0 for r in got) == faulty.failed
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert summary["meta"]["llm_errors"]["requests"] == faulty.failed


def test_prefix_cache_hits_a_server_reports_reach_every_row(servers, tmp_path):
    srv = servers(False)
    srv.cache = True  # a quarter of every prompt "from the cache"
    assert _generic(srv.url, tmp_path / "c", "fail") == 0
    got = pq.read_table(tmp_path / "c" / "episodes.parquet").to_pylist()
    assert all(0 < r["cached_tokens"] <= r["cache_prompt_tokens"] / 4 for r in got)
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    row = summary["methods"][0]
    assert row["cached_tokens"] == sum(r["cached_tokens"] for r in got)
    assert 0.2 < row["prefix_cache_hit_rate"] <= 0.25 and summary["meta"]["prefix_cache"]["cached_tokens"] == row["cached_tokens"]
    assert "Prefix cache (server-reported" in (tmp_path / "c" / "table.md").read_text()
