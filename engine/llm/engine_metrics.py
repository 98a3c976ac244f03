"""What an inference engine saw during a run: utilization, busy time, sequences in flight, queueing delay.

One set of columns for both engines the engine drives:

* the modelled vLLM engine (``llm.backend = "server_model"``, :mod:`engine.llm.server_model`) keeps
  exact books: the time it held ``k`` running sequences for every ``k`` (``occupancy_s``) and a
  histogram of each sequence's wait from arrival to admission (``queue_delay_counts`` over
  :data:`QUEUE_EDGES_S`);
* a real vLLM server is read from its Prometheus endpoint (``GET /metrics``): the
  ``vllm:num_requests_running`` gauge sampled over the run (:class:`MetricsSampler`) gives the same
  occupancy histogram, the ``vllm:request_queue_time_seconds`` histogram the queueing delay, and the
  token counters what it served.

:func:`engine_summary` turns either set of books into the columns ``executor_stats.jsonl`` and the
end-of-run line print. Quantiles of histograms are interpolated within their bucket, as Prometheus'
``histogram_quantile`` does.
"""

from __future__ import annotations

import math
import re
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from engine.errors import BackendError
from engine.http import RetryableError

# upper edges (seconds) of the modelled engine's queue-delay buckets; one more bucket holds what is above
# the last edge (as Prometheus' +Inf bucket), so books carry len(edges) + 1 counts and no infinite number
QUEUE_EDGES_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0)


def quantile_from_counts(q: float, edges: Sequence[float], counts: Sequence[float], low: float = 0.0) -> float:
    """The ``q``-quantile of a histogram with bucket upper ``edges`` and per-bucket ``counts`` (not
    cumulative; one more count than edges: the bucket above the last edge), interpolated linearly within
    the bucket, as Prometheus' ``histogram_quantile``; nan when empty. A quantile above the last edge is
    reported as that edge."""
    total = float(sum(counts))
    if total <= 0:
        return math.nan
    rank, seen, lo = q * total, 0.0, low
    for i, c in enumerate(counts):
        if i >= len(edges):
            return lo
        if c > 0 and seen + c >= rank:
            return lo + (edges[i] - lo) * (rank - seen) / c
        seen += c
        lo = edges[i]
    return lo


def occupancy_quantile(q: float, occupancy_s: Sequence[float]) -> float:
    """The ``q``-quantile over time of the number of running sequences (``occupancy_s[k]``: seconds
    with ``k`` running); the smallest ``k`` with at least ``q`` of the time at or below it."""
    total = float(sum(occupancy_s))
    if total <= 0:
        return math.nan
    seen = 0.0
    for k, t in enumerate(occupancy_s):
        seen += t
        if seen >= q * total - 1e-12:
            return float(k)
    return float(len(occupancy_s) - 1)


def engine_summary(books: Mapping[str, Any], wall_s: float) -> dict[str, Any]:
    """Columns of one engine over ``wall_s`` seconds from its books (modelled or scraped).

    ``utilization``: tokens served over what the engine could have served (``work_s / wall_s``,
    modelled engines only: a real server's peak rate is not known); ``busy``: the share of the wall
    time with anything running; ``seqs_in_flight_mean`` / ``_p95`` against ``max_num_seqs``;
    ``queue_delay_mean_s`` / ``_p95_s``: a sequence's wait for a slot.
    """
    out: dict[str, Any] = {"source": books.get("source", "server_model")}
    occ = list(books.get("occupancy_s") or ())
    span = float(sum(occ))
    if wall_s > 0:
        if "work_s" in books:
            out["utilization"] = float(books["work_s"]) / wall_s
        if "busy_s" in books:
            out["busy"] = float(books["busy_s"]) / wall_s
        elif span > 0:
            out["busy"] = 1.0 - occ[0] / span
    if span > 0:
        out["seqs_in_flight_mean"] = sum(k * t for k, t in enumerate(occ)) / span
        out["seqs_in_flight_p95"] = occupancy_quantile(0.95, occ)
    if books.get("max_num_seqs"):
        out["max_num_seqs"] = int(books["max_num_seqs"])
    counts = list(books.get("queue_delay_counts") or ())
    if counts and sum(counts) > 0:
        n = float(sum(counts))
        out["queue_delay_mean_s"] = float(books.get("queue_delay_sum_s", 0.0)) / n
        out["queue_delay_p95_s"] = quantile_from_counts(0.95, books.get("queue_delay_edges_s", QUEUE_EDGES_S), counts)
    for k in ("decode_tokens", "prompt_tokens", "kv_cache_usage_mean"):
        if k in books:
            out[k] = books[k]
    return out


def summary_line(label: str, engines: Sequence[Mapping[str, Any]], episodes_per_s: float) -> str:
    """One line for the end of a run: the engines' means (and the lowest utilization) and episodes/s."""
    def mean(key):
        xs = [e[key] for e in engines if isinstance(e.get(key), (int, float)) and not math.isnan(e[key])]
        return (sum(xs) / len(xs)) if xs else math.nan

    parts = [f"{label}: {len(engines)} engine{'s' if len(engines) != 1 else ''}"]
    util = [e["utilization"] for e in engines if "utilization" in e]
    if util:
        parts.append(f"utilization {mean('utilization'):.2f} (min {min(util):.2f})")
    if any("busy" in e for e in engines):
        parts.append(f"busy {mean('busy'):.2f}")
    if any("seqs_in_flight_mean" in e for e in engines):
        cap = max((e.get("max_num_seqs", 0) for e in engines), default=0)
        parts.append(f"seqs in flight {mean('seqs_in_flight_mean'):.1f} mean, {mean('seqs_in_flight_p95'):.0f} p95"
                     + (f" of max_num_seqs {cap}" if cap else ""))
    if any("queue_delay_mean_s" in e for e in engines):
        parts.append(f"queue delay {1e3 * mean('queue_delay_mean_s'):.0f} ms mean, "
                     f"{1e3 * mean('queue_delay_p95_s'):.0f} ms p95")
    parts.append(f"{episodes_per_s:.2f} episodes/s")
    return ", ".join(parts)


# ------------------------------------------------------------------------------- a real vLLM server

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples of a Prometheus text exposition: ``name -> [(labels, value), ...]`` (comments skipped)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line.strip())
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def _total(samples: Mapping[str, list], name: str) -> float:
    return float(sum(v for _, v in samples.get(name, ())))


def _buckets(samples: Mapping[str, list], name: str) -> tuple[list[float], list[float]]:
    """``(finite upper edges, cumulative counts)`` of histogram ``name`` summed over its label sets; the
    counts have one more entry than the edges (the +Inf bucket: the total)."""
    acc: dict[float, float] = {}
    for labels, v in samples.get(name + "_bucket", ()):
        le = labels.get("le", "+Inf")
        edge = math.inf if le in ("+Inf", "Inf", "inf") else float(le)
        acc[edge] = acc.get(edge, 0.0) + v
    edges = sorted(acc)
    return [e for e in edges if not math.isinf(e)], [acc[e] for e in edges]


# vLLM's metric names (v0 and v1 engines); the first present is read
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
QUEUE_TIME = "vllm:request_queue_time_seconds"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"


def _first(samples, names):
    for n in names:
        if n in samples:
            return _total(samples, n)
    return None


class MetricsSampler:
    """Reads a vLLM server's ``/metrics`` at the start, every ``interval_s`` while running, and at the end.

    :meth:`books` gives the same books as the modelled engine's (``occupancy_s`` from the sampled
    ``num_requests_running`` gauge, ``queue_delay_*`` from the queue-time histogram's increase, the
    token counters' increase, the KV-cache usage's mean), for :func:`engine_summary`. ``fetch`` and
    ``clock`` are injectable (tests use a loopback fake server or a canned text and a fake clock).
    """

    def __init__(self, url: str, interval_s: float = 1.0, timeout_s: float = 5.0,
                 fetch: Callable[[str], str] | None = None, clock: Callable[[], float] = time.monotonic):
        self.url = url
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.fetch = fetch or self._http_get
        self.clock = clock
        self._samples: list[tuple[float, float, float | None]] = []  # (time, running, kv usage)
        self._first: dict | None = None
        self._last: dict | None = None
        self._t0 = self._t1 = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0
        self._client = None  # the pooled client of the default fetch (engine.http), made on first use

    def _http_get(self, url: str) -> str:
        from engine.http import HTTPClient

        if self._client is None:
            self._client = HTTPClient(url, max_in_flight=1, name="metrics endpoint")
        return self._client.get_text_sync("", self.timeout_s)

    def sample(self) -> dict | None:
        """Read the endpoint once and record the gauges; None (counted in ``errors``) when it fails."""
        try:
            samples = parse_prometheus(self.fetch(self.url))
        except (OSError, ValueError, BackendError, RetryableError):
            self.errors += 1
            return None
        now = self.clock()
        running = _first(samples, RUNNING)
        if running is not None:
            self._samples.append((now, running, _first(samples, KV_USAGE)))
        if self._first is None:
            self._first, self._t0 = samples, now
        self._last, self._t1 = samples, now
        return samples

    def start(self) -> "MetricsSampler":
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="vllm-metrics")
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + self.interval_s)
        self.sample()
        return self.books()

    def books(self) -> dict[str, Any]:
        """Books over the samples so far: each sample's gauge holds until the next sample."""
        out: dict[str, Any] = {"source": "vllm /metrics", "samples": len(self._samples), "errors": self.errors}
        occ: list[float] = []
        kv, kv_t = 0.0, 0.0
        for (t, running, usage), (t_next, _, _) in zip(self._samples, self._samples[1:]):
            k, dt = max(0, int(round(running))), max(0.0, t_next - t)
            occ += [0.0] * (k + 1 - len(occ))
            occ[k] += dt
            if usage is not None:
                kv, kv_t = kv + usage * dt, kv_t + dt
        out["occupancy_s"] = occ
        if kv_t > 0:
            out["kv_cache_usage_mean"] = kv / kv_t
        if self._first is not None and self._last is not None:
            e0, c0 = _buckets(self._first, QUEUE_TIME)
            e1, c1 = _buckets(self._last, QUEUE_TIME)
            if c1 and e0 == e1 and len(c0) == len(c1) == len(e1) + 1:
                cum = [b - a for a, b in zip(c0, c1)]
                out["queue_delay_edges_s"] = e1
                out["queue_delay_counts"] = [cum[0]] + [b - a for a, b in zip(cum, cum[1:])]
                out["queue_delay_sum_s"] = _total(self._last, QUEUE_TIME + "_sum") - _total(self._first, QUEUE_TIME + "_sum")
            for key, name in (("prompt_tokens", PROMPT_TOKENS), ("decode_tokens", GENERATION_TOKENS)):
                if name in self._last:
                    out[key] = _total(self._last, name) - _total(self._first, name)
        return out
