"""What an executor records about a run: ``executor_stats.jsonl`` lines, one worker's throughput
record, and the books of a worker's modelled engine (``llm.backend = "server_model"``)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Mapping

_STATS_LOCK = threading.Lock()


def record_stats_line(path: Path, line: Mapping[str, Any]) -> None:
    """Add one executor run's line to ``executor_stats.jsonl``, replacing an earlier line of the same
    ``run_key`` (a run rerun after an interruption, or resumed: one line per run, its last execution's);
    the file is rewritten atomically."""
    from engine.atomic_io import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    key = line.get("run_key")
    with _STATS_LOCK:  # concurrent runs (cluster.concurrent_runs) end in several threads
        kept = []
        if path.is_file():
            for old in path.read_text().splitlines():
                try:
                    same = bool(key) and json.loads(old).get("run_key") == key
                except ValueError:
                    same = False  # a line this code did not write: kept as it is
                if not same:
                    kept.append(old)
        write_text(path, "\n".join(kept + [json.dumps(line)]) + "\n")




def worker_stats(name: str, episodes: int, busy_s: float, llm_calls: int, retried: int = 0,
                 cpu_s: float = 0.0, server: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One worker's throughput record, as it appears in ``executor.stats["workers"]``.

    ``busy_s`` is wall time inside ``run_episodes``; ``cpu_s`` the CPU time the worker's
    process got meanwhile (``cpu_s / busy_s`` well under 1 on a CPU-bound backend: the
    worker was starved of CPU, not slowed by the executor). ``server``: the books of the
    worker's modelled engine (``llm.backend = "server_model"``) since the run started.
    """
    out = {"worker": name, "episodes": episodes, "busy_s": busy_s, "cpu_s": cpu_s,
           "episodes_per_s": episodes / busy_s if busy_s > 0 else 0.0, "llm_calls": llm_calls,
           "retried_chunks": retried}
    if server is not None:
        out["server"] = dict(server)
    return out


def server_books(llm) -> dict[str, Any] | None:
    """The books of the modelled engine inside ``llm`` (``server_model`` backend), else None."""
    from engine.llm.server_model import find_server

    server = find_server(llm)
    return None if server is None else server.server_stats()


def books_since(now: Mapping[str, Any] | None, start: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Counters of ``now`` minus those of ``start`` (a run's share of a backend kept across runs)."""
    if now is None:
        return None
    if start is None:
        return dict(now)
    keep = ("peak_tokens_per_s", "max_num_seqs", "time_scale", "max_in_flight", "max_concurrent_calls",
            "queue_delay_edges_s")

    def since(k, v):
        if k in keep:
            return v
        if isinstance(v, list):  # histograms: bucket by bucket
            old = list(start.get(k) or [])
            return [x - (old[i] if i < len(old) else 0) for i, x in enumerate(v)]
        return v - start.get(k, 0) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    return {k: since(k, v) for k, v in now.items()}
