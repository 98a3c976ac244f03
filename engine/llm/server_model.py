"""``backend = "server_model"``: one vLLM engine on one GPU, modelled in time instead of computed.

The texts come from another backend (``[llm.server_model] backend``: the task's simulated
policy, or a replay trace); this backend only decides how long the engine would have
taken to produce them, sleeps that long, and keeps the engine's books (busy time,
tokens, utilization). 32 of them fit on a 2-core machine, so the executor can be
studied at cluster scale (``benchmarks/test_scaling.py``, docs/cluster.md).

**The timing model (continuous batching, one engine).** A call's requests enter a
first-come-first-served queue shared by every call in flight on the engine (calls from
several threads, a worker's streams, fill one batch); each request is ``n`` sequences sharing one prompt.
At every scheduling point the engine admits waiting sequences while fewer than
``max_num_seqs`` are in flight (vLLM's ``max_num_seqs``); a request's prompt is
prefilled once when its first sequence is admitted, at ``prefill_tokens_per_s``
(decoding pauses meanwhile: prefill and decode are not mixed). Then every sequence
in flight gains one token per decode step, and a step with ``b`` sequences takes

    t_step(b) = decode_step_s + decode_step_per_seq_s * b            (seconds)

(the weights are read once per step, each sequence adds its KV reads): the decode
rate of one sequence, ``1 / t_step(b)``, falls as concurrency rises while the
engine's rate, ``b / t_step(b)``, rises towards ``max_num_seqs / t_step(max_num_seqs)``,
the peak. A sequence leaves when it has its completion tokens (at least one); the
call returns when its last sequence leaves. A call that arrives while others are in
flight queues its sequences behind theirs; they are admitted at the first decode-step
boundary after the arrival with a free slot (vLLM's engine adds requests between
steps). One call at a time is exactly :func:`plan_call`.

**Utilization.** ``work_s`` is the time the engine would need for what it served if
every decode step ran a full batch: ``decode tokens / peak decode rate + prompt
tokens / prefill rate``. ``utilization(wall_s) = work_s / wall_s``: tokens served
over what the engine could have served in that wall time. ``busy_s`` (time with at
least one sequence in flight or a prefill running) tells an engine left without work
(the executor's fault) from one given too few sequences at a time (the method's
batch sizes): ``busy_s / wall_s`` and ``work_s / busy_s``.

**Reference points** (:data:`REFERENCES`), each fitted to a public vLLM concurrency
sweep with fixed-length requests (two concurrencies give the two decode constants;
``max_num_seqs`` is where the sweep's throughput stops rising about linearly):

* ``llama3.1-8b-h100``: Llama-3.1-8B-Instruct fp16, one H100-80GB HBM3, vLLM 0.21.0,
  InferenceBench concurrency-sweep recipe (yobitelcomm.github.io/bench/recipes/concurrency-sweep):
  TPOT p50 6.48 ms at concurrency 1 and 10.94 ms at 16; throughput 122 -> 1,384 tok/s
  from 1 to 16, 1,312 tok/s at 64 (no gain past 16). Fit: 6.18 ms + 0.297 ms x b, peak
  16 / 10.94 ms = 1,462 tok/s.
* ``llama3.1-8b-a100``: Llama-3.1-8B-Instruct BF16, one A100-40GB, vLLM 0.23.0,
  ``vllm bench serve`` random 1,024 in / 128 out (johnmusgrave.com, "vLLM
  throughput-latency sweep on NVIDIA A100"): 75 tok/s decode at concurrency 1, 6.6x
  that at 8 (495 tok/s), per-token latency climbing past 8. Fit: 12.93 ms + 0.404 ms x
  b, ``max_num_seqs`` 8, peak 495 tok/s.

Neither source gives a prefill rate per token; both prefill rates are *derived*, not
measured: 2 x 8e9 FLOPs per prompt token at 50 % of the GPU's dense BF16 peak (H100
SXM 989 TFLOPS -> ~31,000 tok/s; A100 312 TFLOPS -> ~9,750 tok/s). Override any
constant in ``[llm.server_model]`` (0 keeps the reference's value).
"""

from __future__ import annotations

import bisect
import copy
import heapq
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, Sequence

from engine.config import check
from engine.errors import ConfigError
from engine.llm.base import LLMBackend, Request, Response
from engine.llm.engine_metrics import QUEUE_EDGES_S

__all__ = ["REFERENCES", "ServerProfile", "ServerModelParams", "ServerModelBackend", "CallPlan", "plan_call",
           "RealClock"]


@dataclass(frozen=True)
class ServerProfile:
    """The constants of one engine: decode step ``decode_step_s + decode_step_per_seq_s * b``, prefill rate, slots."""

    decode_step_s: float
    decode_step_per_seq_s: float
    prefill_tokens_per_s: float
    max_num_seqs: int
    source: str = ""

    def __post_init__(self):
        check(self.decode_step_s > 0, f"server_model.decode_step_s must be > 0, got {self.decode_step_s}")
        check(self.decode_step_per_seq_s >= 0,
              f"server_model.decode_step_per_seq_s must be >= 0, got {self.decode_step_per_seq_s}")
        check(self.prefill_tokens_per_s > 0,
              f"server_model.prefill_tokens_per_s must be > 0, got {self.prefill_tokens_per_s}")
        check(isinstance(self.max_num_seqs, int) and self.max_num_seqs >= 1,
              f"server_model.max_num_seqs must be an integer >= 1, got {self.max_num_seqs!r}")

    def step_s(self, b: int) -> float:
        """Seconds of one decode step with ``b`` sequences in flight."""
        return self.decode_step_s + self.decode_step_per_seq_s * b

    @property
    def peak_tokens_per_s(self) -> float:
        """Decode tokens per second with every slot busy: ``max_num_seqs / t_step(max_num_seqs)``."""
        return self.max_num_seqs / self.step_s(self.max_num_seqs)


# Fitted to public vLLM sweeps; see the module docstring for the figures and the fits.
REFERENCES: dict[str, ServerProfile] = {
    "llama3.1-8b-h100": ServerProfile(
        decode_step_s=6.18e-3, decode_step_per_seq_s=0.297e-3, prefill_tokens_per_s=31_000.0, max_num_seqs=16,
        source="InferenceBench concurrency sweep, Llama-3.1-8B-Instruct fp16, H100-80GB, vLLM 0.21.0: "
               "TPOT 6.48 ms @1, 10.94 ms @16; 1,384 tok/s @16, 1,312 @64"),
    "llama3.1-8b-a100": ServerProfile(
        decode_step_s=12.93e-3, decode_step_per_seq_s=0.404e-3, prefill_tokens_per_s=9_750.0, max_num_seqs=8,
        source="johnmusgrave.com A100 sweep, Llama-3.1-8B-Instruct BF16, A100-40GB, vLLM 0.23.0, 1024 in/128 out: "
               "75 tok/s @1, 6.6x @8"),
}


@dataclass(frozen=True)
class ServerModelParams:
    """``[llm.server_model]``: whose texts, which reference engine, constants that override it (0: the
    reference's), time scale.

    ``time_scale`` multiplies every sleep (0.1: ten times faster than the modelled engine);
    the books (``busy_s``, ``work_s``) are kept in slept seconds, so utilization is unchanged.
    """

    # whose texts the engine answers with: the task's simulated policy, or the trace of [llm.replay]
    backend: Literal["simulated", "replay"] = "simulated"
    reference: str = "llama3.1-8b-h100"
    decode_step_s: float = 0.0
    decode_step_per_seq_s: float = -1.0  # -1: the reference's (0 is a valid constant: no per-sequence cost)
    prefill_tokens_per_s: float = 0.0
    max_num_seqs: int = 0
    time_scale: float = 1.0

    def __post_init__(self):
        check(self.reference in REFERENCES,
              f"llm.server_model.reference must be one of {', '.join(repr(r) for r in REFERENCES)}, "
              f"got {self.reference!r}")
        check(self.decode_step_s >= 0, f"llm.server_model.decode_step_s must be >= 0 (0: the reference's), "
                                       f"got {self.decode_step_s}")
        check(self.decode_step_per_seq_s >= 0 or self.decode_step_per_seq_s == -1,
              f"llm.server_model.decode_step_per_seq_s must be >= 0 (-1: the reference's), "
              f"got {self.decode_step_per_seq_s}")
        check(self.prefill_tokens_per_s >= 0, f"llm.server_model.prefill_tokens_per_s must be >= 0 "
                                              f"(0: the reference's), got {self.prefill_tokens_per_s}")
        check(self.max_num_seqs >= 0, f"llm.server_model.max_num_seqs must be >= 0 (0: the reference's), "
                                      f"got {self.max_num_seqs}")
        check(self.time_scale > 0, f"llm.server_model.time_scale must be > 0, got {self.time_scale}")

    def profile(self) -> ServerProfile:
        """The reference's constants with this table's overrides."""
        ref = REFERENCES[self.reference]
        return replace(ref,
                       decode_step_s=self.decode_step_s or ref.decode_step_s,
                       decode_step_per_seq_s=(ref.decode_step_per_seq_s if self.decode_step_per_seq_s == -1
                                              else self.decode_step_per_seq_s),
                       prefill_tokens_per_s=self.prefill_tokens_per_s or ref.prefill_tokens_per_s,
                       max_num_seqs=self.max_num_seqs or ref.max_num_seqs)


@dataclass(frozen=True)
class CallPlan:
    """When one call's requests finish on the modelled engine (seconds from the call's start)."""

    finish_s: tuple[float, ...]  # per request
    duration_s: float
    prefill_s: float
    decode_tokens: int
    prompt_tokens: int
    max_in_flight: int


def plan_call(profile: ServerProfile, prompt_tokens: Sequence[int], decode_tokens: Sequence[Sequence[int]]
              ) -> CallPlan:
    """Continuous batching of one call (module docstring): request ``r`` has ``prompt_tokens[r]`` and
    one entry of ``decode_tokens[r]`` per sequence (its completion tokens; counted as at least 1).

    Event-driven: between two admissions or departures the batch is constant, so the
    clock jumps by ``k`` steps at once (``k`` = fewest tokens any sequence still needs).
    """
    if len(prompt_tokens) != len(decode_tokens):
        raise AssertionError(f"{len(prompt_tokens)} prompts for {len(decode_tokens)} requests")
    waiting = [(r, max(1, int(d))) for r, seqs in enumerate(decode_tokens) for d in seqs]  # FCFS
    left = [len(seqs) for seqs in decode_tokens]  # sequences of each request not finished
    finish = [0.0] * len(decode_tokens)
    started = [False] * len(decode_tokens)
    running: list[list[int]] = []  # [request, tokens still to decode]
    t = prefill = 0.0
    head = 0
    peak = 0
    for r, seqs in enumerate(decode_tokens):
        if not seqs:
            raise AssertionError(f"request {r} has no sequence")
    while head < len(waiting) or running:
        while head < len(waiting) and len(running) < profile.max_num_seqs:
            r, d = waiting[head]
            head += 1
            if not started[r]:  # one prefill per request, shared by its n sequences (prefix reuse)
                started[r] = True
                dt = int(prompt_tokens[r]) / profile.prefill_tokens_per_s
                t += dt
                prefill += dt
            running.append([r, d])
        peak = max(peak, len(running))
        k = min(s[1] for s in running)
        t += k * profile.step_s(len(running))
        still = []
        for s in running:
            s[1] -= k
            if s[1] == 0:
                left[s[0]] -= 1
                if left[s[0]] == 0:
                    finish[s[0]] = t
            else:
                still.append(s)
        running = still
    return CallPlan(tuple(finish), t, prefill, sum(max(1, int(d)) for seqs in decode_tokens for d in seqs),
                    sum(int(p) for p in prompt_tokens), peak)


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    """Wall clock: ``time.perf_counter``; waits on the engine's condition (releasing the engine to other callers).

    Tests pass a fake clock with ``now`` and ``sleep`` only (advancing on sleep): the backend then
    sleeps on it while holding the engine, which is exact for calls from one thread.
    """

    def now(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, cond: threading.Condition, seconds: float) -> None:
        if seconds > 0:
            cond.wait(seconds)


class _Call:
    """One ``generate`` call on the engine: its sequences still decoding and its requests' finish times."""

    __slots__ = ("arrived", "left", "finish", "started", "prompt_tokens", "pending")

    def __init__(self, arrived: float, prompt_tokens: Sequence[int], decode_tokens: Sequence[Sequence[int]]):
        self.arrived = arrived
        self.left = [len(seqs) for seqs in decode_tokens]  # sequences of each request not finished
        self.finish = [0.0] * len(decode_tokens)  # engine seconds from arrival
        self.started = [False] * len(decode_tokens)  # prefilled
        self.prompt_tokens = [int(p) for p in prompt_tokens]
        self.pending = len(decode_tokens)  # requests not finished


class _EngineState:
    """The continuous-batching engine as a discrete-event simulation in engine seconds (unscaled).

    Shared by every call in flight on the backend: sequences of all calls queue first come first
    served, so calls from several threads (a worker's streams) fill one batch, as vLLM's async
    engine takes requests whenever they come. A call's sequences join the queue at its arrival
    time; a waiting sequence is admitted at the first decode-step boundary at or after its arrival
    with a free slot. With one call at a time this is exactly :func:`plan_call`.
    """

    def __init__(self, profile: ServerProfile):
        self.profile = profile
        self.t = 0.0  # engine time simulated so far (a step boundary)
        self.waiting: deque = deque()  # [call, request, tokens, ready_at] in arrival order
        self.running: list[list] = []  # [call, request, tokens still to decode]
        self.books = {"busy_s": 0.0, "prefill_s": 0.0, "decode_tokens": 0, "max_in_flight": 0}
        # engine_metrics' books (projections keep none): seconds with k sequences
        # running, and each sequence's wait from arrival to admission over QUEUE_EDGES_S
        self.occupancy_s = [0.0] * (profile.max_num_seqs + 1)
        self.queue_counts = [0] * (len(QUEUE_EDGES_S) + 1)
        self.queue_sum_s = 0.0

    def add(self, call: _Call, decode_tokens: Sequence[Sequence[int]]) -> None:
        for r, seqs in enumerate(decode_tokens):
            for d in seqs:
                self.waiting.append([call, r, max(1, int(d)), call.arrived])

    def _next(self) -> tuple[str, float, Any] | None:
        """The next event from ``t``: ``(kind, end, arg)``; None when the engine has nothing to do."""
        prof = self.profile
        room = len(self.running) < prof.max_num_seqs
        if room and self.waiting and self.waiting[0][3] <= self.t:
            call, r = self.waiting[0][0], self.waiting[0][1]
            if not call.started[r]:  # one prefill per request, shared by its n sequences (prefix reuse)
                return "prefill", self.t + call.prompt_tokens[r] / prof.prefill_tokens_per_s, None
            return "admit", self.t, None
        if self.running:
            step = prof.step_s(len(self.running))
            n = min(s[2] for s in self.running)
            if room and self.waiting:  # an arrival joins at the first step boundary after it
                n = min(n, max(1, math.ceil((self.waiting[0][3] - self.t) / step - 1e-9)))
            return "decode", self.t + n * step, n
        if self.waiting:  # idle until the next arrival
            return "idle", self.waiting[0][3], None
        return None

    def _do(self, kind: str, end: float, arg) -> None:
        b = self.books
        if end > self.t:  # time with this many sequences running
            self.occupancy_s[len(self.running)] += end - self.t
        if kind == "prefill" or kind == "admit":
            call, r, d, ready = self.waiting.popleft()
            wait = max(0.0, self.t - ready)
            self.queue_sum_s += wait
            self.queue_counts[bisect.bisect_left(QUEUE_EDGES_S, wait)] += 1
            if kind == "prefill":
                b["busy_s"] += end - self.t
                b["prefill_s"] += end - self.t
                call.started[r] = True
            self.running.append([call, r, d])
            b["max_in_flight"] = max(b["max_in_flight"], len(self.running))
        elif kind == "decode":
            b["busy_s"] += end - self.t
            b["decode_tokens"] += arg * len(self.running)
            still = []
            for s in self.running:
                s[2] -= arg
                if s[2] > 0:
                    still.append(s)
                    continue
                call, r = s[0], s[1]
                call.left[r] -= 1
                if call.left[r] == 0:
                    call.finish[r] = end - call.arrived
                    call.pending -= 1
            self.running = still
        self.t = end

    def advance(self, now: float) -> None:
        """Simulate every event that ends at or before engine time ``now``."""
        while True:
            ev = self._next()
            if ev is None:
                if now > self.t:
                    self.occupancy_s[0] += now - self.t  # idle
                self.t = max(self.t, now)
                return
            if ev[1] > now + 1e-9:  # 1 ns: the clock's rounding
                return
            self._do(*ev)

    def run_ahead_end(self, call: _Call) -> float:
        """The reference for :meth:`projected_end`: this engine on a deep copy, event by event (:meth:`_next`,
        :meth:`_do`), until the copy of ``call`` is done; the copy's clock then. The state is left as it is."""
        memo: dict = {}
        sim = copy.deepcopy(self, memo)
        mine = memo[id(call)]
        while mine.pending:
            sim._do(*sim._next())
        return sim.t

    def projected_end(self, call: _Call) -> float:
        """When ``call`` finishes if no other call arrives (engine seconds).

        The events :meth:`advance` would simulate (:meth:`_next`, :meth:`_do`), in one tight loop that leaves the
        state as it is: the running sequences become decode targets on one token counter (a decode of ``n`` steps
        moves the counter by ``n``; a sequence ends when the counter reaches its target), the waiting queue is read
        in place, and no books are kept. The same arithmetic in the same order, so the same floats (a test holds it
        to :meth:`advance` run on a deep copy); a caller projects at every arrival, and with a deep queue projecting
        event by event on a copy of the state cost 2.6 times as much CPU."""
        prof = self.profile
        cap, rate = prof.max_num_seqs, prof.prefill_tokens_per_s
        base, per_seq = prof.decode_step_s, prof.decode_step_per_seq_s
        t = self.t
        waiting, wi, wn = self.waiting, 0, len(self.waiting)
        heap = [(s[2], k, s[0], s[1]) for k, s in enumerate(self.running)]  # (target, order, call, request)
        heapq.heapify(heap)
        order, counter, running = len(heap), 0, len(heap)
        prefilled: set = set()
        left = list(call.left)
        pending = sum(1 for n in left if n > 0)
        last = t
        while pending:
            room = running < cap
            if room and wi < wn and waiting[wi][3] <= t:  # admit the queue's head (prefill its request first)
                c, r, d = waiting[wi][0], waiting[wi][1], waiting[wi][2]
                if not c.started[r] and (id(c), r) not in prefilled:
                    t = t + c.prompt_tokens[r] / rate
                    prefilled.add((id(c), r))
                wi += 1
                heapq.heappush(heap, (counter + d, order, c, r))
                order += 1
                running += 1
            elif running:
                step = base + per_seq * running
                n = heap[0][0] - counter
                if room and wi < wn:  # an arrival joins at the first step boundary after it
                    n = min(n, max(1, math.ceil((waiting[wi][3] - t) / step - 1e-9)))
                t = t + n * step
                counter += n
                while heap and heap[0][0] <= counter:
                    _, _, c, r = heapq.heappop(heap)
                    running -= 1
                    if c is call:
                        left[r] -= 1
                        if left[r] == 0:
                            pending -= 1
                            last = t
            elif wi < wn:  # idle until the next arrival
                t = waiting[wi][3]
            else:  # pragma: no cover - a pending call always has sequences queued or running
                raise AssertionError("the engine ran out of work before a pending call finished")
        return last


class ServerModelBackend:
    """Answers with ``inner``'s texts, sleeping as long as the modelled engine would have taken.

    ``backend`` is the inner backend, so labels (``answered_by``) and capabilities
    (``answers_any_prompt``) are the inner's: a server model over the simulated policy is
    labelled simulated. :meth:`server_stats` gives the engine's books.

    Safe to call from several threads (a worker's streams, ``[cluster] streams_per_worker``):
    the calls in flight share the engine's batch (:class:`_EngineState`); a caller waits, not holding
    the engine, until its call's projected end, and projects again then (later arrivals may have
    delayed it; they never hasten it).
    """

    name = "server_model"

    def __init__(self, inner: LLMBackend, profile: ServerProfile, time_scale: float = 1.0,
                 clock: Clock | None = None):
        if not callable(getattr(inner, "generate", None)):
            raise AssertionError(f"ServerModelBackend needs a backend with generate(), got {type(inner).__name__}")
        check(time_scale > 0, f"llm.server_model.time_scale must be > 0, got {time_scale}")
        self.backend = inner
        self.model = inner.model
        self.profile = profile
        self.time_scale = float(time_scale)
        self.clock = clock or RealClock()
        self._cond = threading.Condition()  # guards the engine state and the books
        self._engine = _EngineState(profile)
        # epoch: clock reading at engine time 0 (the first call); in_flight: calls on the engine now
        self._now = _Counters(epoch=None, in_flight=0)
        self._books = {"calls": 0, "requests": 0, "sequences": 0, "prompt_tokens": 0, "max_concurrent_calls": 0}

    def share_engine(self, other: "ServerModelBackend") -> None:
        """Serve this backend's calls on ``other``'s engine: one GPU, one batch, one set of books (runs at once
        on one worker, each with its own backend: their LLM configs differ only in what the requests carry,
        e.g. the seed). The two must model the same engine."""
        if (self.profile, self.time_scale) != (other.profile, other.time_scale):
            raise ConfigError(f"runs on one worker share its engine, so their llm.server_model settings must match; "
                              f"got {self.profile} x{self.time_scale} and {other.profile} x{other.time_scale}")
        self.clock, self._cond, self._engine, self._now, self._books = (
            other.clock, other._cond, other._engine, other._now, other._books)

    def _engine_now(self) -> float:
        return (self.clock.now() - self._now.epoch) / self.time_scale

    def generate(self, requests: Sequence[Request]) -> list[Response]:
        requests = list(requests)
        if not requests:
            return []
        responses = self.backend.generate(requests)  # outside the engine: the inner backend's CPU time
        if len(responses) != len(requests):
            raise AssertionError(f"{self.backend.name} returned {len(responses)} responses for "
                                 f"{len(requests)} requests")
        prompt = [r.prompt_tokens for r in responses]
        decode = [[c.completion_tokens for c in r.completions] for r in responses]
        for r, seqs in enumerate(decode):
            if not seqs:
                raise AssertionError(f"request {r} has no sequence")
        wait = getattr(self.clock, "wait", None)
        with self._cond:
            if self._now.epoch is None:
                self._now.epoch = self.clock.now()
            engine = self._engine
            now = self._engine_now()
            engine.advance(now)
            call = _Call(now, prompt, decode)
            engine.add(call, decode)
            b = self._books
            b["calls"] += 1
            b["requests"] += len(requests)
            b["sequences"] += sum(len(s) for s in decode)
            b["prompt_tokens"] += sum(int(p) for p in prompt)
            self._now.in_flight += 1
            b["max_concurrent_calls"] = max(b["max_concurrent_calls"], self._now.in_flight)
            # No one is woken: a call's projected end counts every call already on the engine, departures
            # included, and an arrival only delays the others (it queues behind them, widens their steps); so a
            # caller sleeps until its last projection and re-projects then. Waking every caller at each arrival
            # and departure cost O(calls in flight) projections per event: with 50 calls queued on an engine
            # (runs at once) that was most of a worker's CPU.
            try:
                while True:
                    engine.advance(self._engine_now())
                    if call.pending == 0:
                        break
                    seconds = (engine.projected_end(call) - self._engine_now()) * self.time_scale
                    if wait is not None:
                        wait(self._cond, seconds)
                    else:  # a clock without wait (tests): sleep holding the engine
                        self.clock.sleep(max(seconds, 0.0))
            finally:
                self._now.in_flight -= 1
        return [replace(resp, latency_s=f * self.time_scale) for resp, f in zip(responses, call.finish)]

    def server_stats(self) -> dict[str, Any]:
        """The engine's books so far: calls, requests, sequences, tokens, ``busy_s``, ``work_s``, peak rate.

        Seconds are clock seconds (engine seconds x ``time_scale``).
        """
        scale = self.time_scale
        with self._cond:
            if self._now.epoch is not None:
                self._engine.advance(self._engine_now())
            out = dict(self._books)
            eb = dict(self._engine.books)
            occ = [t * scale for t in self._engine.occupancy_s]
            queue = (list(self._engine.queue_counts), self._engine.queue_sum_s * scale)
        out["occupancy_s"] = occ
        out["queue_delay_counts"], out["queue_delay_sum_s"] = queue
        out["queue_delay_edges_s"] = [e * scale for e in QUEUE_EDGES_S]
        out["decode_tokens"] = eb["decode_tokens"]
        out["max_in_flight"] = eb["max_in_flight"]
        out["busy_s"] = eb["busy_s"] * scale
        out["prefill_s"] = eb["prefill_s"] * scale
        out["work_s"] = scale * (eb["decode_tokens"] / self.profile.peak_tokens_per_s + eb["prefill_s"])
        out["peak_tokens_per_s"] = self.profile.peak_tokens_per_s / scale
        out["max_num_seqs"] = self.profile.max_num_seqs
        out["time_scale"] = scale
        return out

    def utilization(self, wall_s: float) -> float:
        """``work_s / wall_s``: tokens served over what the engine could have served in ``wall_s``."""
        if wall_s <= 0:
            raise AssertionError(f"wall_s must be > 0, got {wall_s}")
        return self.server_stats()["work_s"] / wall_s


@dataclass
class _Counters:
    epoch: float | None
    in_flight: int


def find_server(backend) -> ServerModelBackend | None:
    """The :class:`ServerModelBackend` inside ``backend`` (through wrappers with ``.backend``), or None."""
    seen = 0
    while backend is not None and seen < 8:
        if isinstance(backend, ServerModelBackend):
            return backend
        backend = getattr(backend, "backend", None)
        seen += 1
    return None
