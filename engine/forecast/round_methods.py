"""Forecasting methods on the round loop (:mod:`engine.rounds`): an episode is one question.

Every forecasting method of Prophet Arena and FutureX is a :class:`~engine.rounds.Method`
that :func:`engine.runner.run_task` drives over the local or the Ray executor:

- :class:`RolloutMethod` (``foredreamer`` with the seed MemGuide and an empty
  Experience Bank, ``full_text``, ``rag``, ``no_information``,
  ``market_informed``) learns nothing across questions: its snapshot is empty,
  all held-out questions form one round (Ray splits it over workers) and the
  agent batches each turn's LLM calls across the questions of a share.
- :class:`MemoryBaselineMethod` (``mem0``, ``memrl``, ``reme``, ``flex``): the
  evidence layer is per question; the experience layer of MemRL, ReMe and FLEX
  (:mod:`engine.forecast.outcome_memory`) is the method's experience. Its
  questions run in cutoff order, in *leak-free rounds*
  (:func:`~engine.forecast.outcome_memory.leak_free_rounds`): a round ends before
  any outcome, queued or of the round, would resolve, the batching rule of
  :class:`~engine.forecast.memory_baselines.MemoryBaselineRunner`. A share
  reads the snapshot and releases the outcomes resolved at the round's first
  cutoff (every share the same ones), so each question sees exactly the
  outcomes resolved before its cutoff, as if run alone; the barrier installs
  the release once and queues the round's outcomes in episode order. The
  records are those of one question per round, for any split of the rounds
  over workers. Mem0 has no experience layer and runs as one round.
- :class:`EvolutionMethod` (``foredreamer`` with ``run.evolve``, paper 3 and
  C.3): per category, an ``init`` episode validates the published guides on
  the evolution pool, then one episode per evolution iteration, then one
  ``eval`` episode per (top-k rank, held-out question). Rounds hold one
  episode: iteration ``i + 1`` reads what iteration ``i`` accepted.

ForeDreamer's editor, critic, generator and validation gate need the LLM and the
MemTool sandbox, so they run inside the iteration's episode (on a worker, from the
snapshot: the Experience Bank, the guide tree, the validation records and the
procedural store's files, rebuilt in the worker's own folder where the sandbox
runs the tools). The episode returns the iteration's outcome (the accepted bank,
the admitted guide and tools) as its update; the barrier installs it. A round holds
one episode, so the barrier's result does not depend on the executor or on which
worker ran the iteration.

Snapshots and updates are arrays: the experience as a :mod:`engine.codec` data file's
bytes in a ``u1`` array (``state``). Each record carries ``backend`` and ``model`` from
``llm.answered_by`` and the LLM usage of its question (requests are attributed by
``Request.episode``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
import threading
import uuid
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from engine import codec
from engine.forecast.agent import MEMORY_MODES
from engine.forecast.evolution import Evolution, ExperienceBank, Runner
from engine.forecast.memtools import ProceduralStore
from engine.memo import Memo
from engine.forecast.seed_tools import DEFAULT_GUIDE, seed_tool_sources
from engine.llm.base import MeteredBackend, Usage, usage_fields
from engine.rounds import Episode, EpisodeResult

# the rounds in progress in this process of every forecasting run it serves (MemoryBaselineMethod._round_track):
# each a released experience track and its memory's reader (a few MB for 84 questions), so only a few are kept
_ROUND_TRACKS = Memo(8)
TOOL_MODES = ("foredreamer", "market_informed")  # modes whose subagent runs MemTools in the sandbox
USAGE_FIELDS = ("calls", "samples", "prompt_tokens", "completion_tokens", "latency_s", "cached_tokens",
                "cache_prompt_tokens")


def pack(obj) -> np.ndarray:
    """Plain data (:mod:`engine.codec`) as a read-only-safe ``u1[n]`` array (what a snapshot or an update holds)."""
    return np.frombuffer(codec.dumps(obj), dtype=np.uint8)


def unpack(arr: np.ndarray, live=None):
    """What :func:`pack` packed; ``live``: the reader's own object of the same kind (its embedder is kept)."""
    return codec.loads(np.ascontiguousarray(arr, dtype=np.uint8), "experience array", live)


@dataclass
class ForecastContext:
    """What every episode of a forecast run reads besides the experience (pickled to workers once per run).

    ``items``: qid -> Question | FutureXItem; ``pools``: category -> evolution pool qids ("" for FutureX);
    ``record``: task-specific fields of one scored episode (``record(ep, ctx, method) -> dict``);
    ``prompts``: ``(PromptsConfig, llm table)`` activated in each worker process.

    One object per process: every run of an experiment holds the same context, and each run's method is
    pickled to a worker on its own, so an unpickled copy resolves to the one this process already holds
    (:func:`_shared_context`; a Ray worker serving 48 runs at once kept 48 copies of the search corpus before).
    The context is read-only to the runs, as it is when the local executor runs them in one process; its state is
    pickled once, at its first pickling, and travels out of band where the pickler allows it (:meth:`__reduce_ex__`).
    """

    task: str  # "forecast" | "futurex"
    agent: Any
    subagent: Any
    sandbox: Any
    evolution: Any
    search: Any
    embedder: Any
    items: dict
    pools: dict
    record: Callable[[Any, "ForecastContext", str], dict]
    workspace: str = ""  # "" = a temporary folder per call
    metric: Any = None  # the validation metric (None: Brier)
    runner_class: type = Runner
    memory_baselines: Any = None
    prompts: Any = None
    scorer: str = "pm_rank"
    rel_tol: float = 0.0
    extra: dict = field(default_factory=dict)
    # which context this is, across processes (a new one per object, dataclasses.replace included)
    token: str = field(init=False, default_factory=lambda: uuid.uuid4().hex, compare=False, repr=False)

    def __post_init__(self):
        with _SHARED_LOCK:
            _SHARED.setdefault(self.token, self)

    def _state_blob(self) -> bytes:
        """The context's attributes pickled: made at the first pickling and kept (the context is read-only once
        built, and a run's method is pickled several times: put for the workers, copied by the store owner,
        exported back, copied by the driver; 25 ms each for Prophet Arena)."""
        blob = self.__dict__.get("_pickled")
        if blob is None:
            state = {k: v for k, v in self.__dict__.items() if k != "_pickled"}
            blob = self.__dict__["_pickled"] = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        return blob

    def __reduce_ex__(self, protocol):
        # The state as one bytes object: a process that holds the context already skips it, where unpickling the
        # state itself rebuilt every object of it (28 ms per run's method for Prophet Arena, on each worker for
        # each run at once) only to drop it. At protocol 5 it is a PickleBuffer: a pickler with a buffer
        # callback (Ray's) ships it out of band, so a worker that holds the context reads a view of the object
        # store and copies nothing (a 6.3 MB copy per method fetched, ~20 ms of a loaded worker's CPU, was most of
        # a fetch); without one (pickle.dumps, checkpoints) the bytes stay in the stream as before.
        blob = self._state_blob()
        return _shared_context, (self.token, pickle.PickleBuffer(blob) if protocol >= 5 else blob)


_SHARED: "weakref.WeakValueDictionary[str, ForecastContext]" = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _shared_context(token: str, state) -> ForecastContext:
    """The context ``token`` names in this process: the one already here, else one made from ``state`` (its
    pickled attributes: bytes, or a view of them, that exist only inside the pickle being read, as
    :meth:`ForecastContext.__reduce_ex__` nested them; the engine's one unpickle, tests/engine/test_codec.py)."""
    with _SHARED_LOCK:
        ctx = _SHARED.get(token)
    if ctx is not None:
        return ctx
    fresh = ForecastContext.__new__(ForecastContext)
    fresh.__dict__.update(pickle.loads(state))
    with _SHARED_LOCK:  # another thread may have made it meanwhile: keep the first
        ctx = _SHARED.setdefault(token, fresh)
    return ctx


_ACTIVE_PROMPTS: set[str] = set()


def _activate_prompts(ctx: ForecastContext) -> None:
    """The run's prompt templates in this process (a Ray worker starts with the shipped ones)."""
    if ctx.prompts is None:
        return
    key = repr(ctx.prompts)
    if key in _ACTIVE_PROMPTS:
        return
    from engine.forecast.run_support import activate_prompts

    activate_prompts(ctx.prompts[0])
    _ACTIVE_PROMPTS.add(key)


@contextmanager
def _workspace(ctx: ForecastContext, run_key: str, episodes: Sequence[Episode]):
    """``<run.workspace>/<run key>/ep<first id>`` (kept), else a temporary folder (removed).

    The kept folder is made only when something is written there (every writer makes its parents: item folders,
    MemTools, a seeded procedural store): most shares (MemRL, ReMe, Mem0 on evidence) write nothing, so they
    leave no empty folder behind and pay one ``lstat`` instead of making and removing a folder."""
    if ctx.workspace:
        path = Path(ctx.workspace) / run_key / f"ep{episodes[0].episode_id:05d}"
        if os.path.lexists(path):  # a rerun of the round after a crash starts clean
            shutil.rmtree(path, ignore_errors=True)
        yield path
        return
    tmp = tempfile.mkdtemp(prefix="forecast-")
    try:
        yield Path(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _usage_records(meter: MeteredBackend, qids: Sequence[str]) -> list[dict]:
    """Each question's share of the LLM usage, by ``Request.episode`` (the qid, an outcome key
    ``kind:qid`` or an item folder ``.../<qid>/turn<t>_item<k>``); unattributed requests go to the first."""
    from engine.forecast.subagent import _safe

    index = {q: k for k, q in enumerate(qids)}
    safe = {_safe(q): k for k, q in enumerate(qids)}
    out = [Usage() for _ in qids]
    attributed = Usage()
    for key, u in meter.meter.per_episode.items():
        k = index.get(key)
        if k is None and ":" in key:
            k = index.get(key.split(":", 1)[1])
        if k is None:
            k = safe.get(Path(key).parent.name)
        if k is None:
            continue
        out[k].merge(u)
        attributed.merge(u)
    if qids:  # what no question's key names goes to the first question
        for f in USAGE_FIELDS:
            setattr(out[0], f, getattr(out[0], f) + getattr(meter.meter.total, f) - getattr(attributed, f))
        if meter.meter.total.errors > attributed.errors:
            out[0]._failed(meter.meter.total.errors - attributed.errors, meter.meter.total.error)
    return [{"llm_calls": u.calls, "llm_samples": u.samples, "prompt_tokens": u.prompt_tokens,
             "completion_tokens": u.completion_tokens, "llm_latency_s": u.latency_s, **usage_fields(u)} for u in out]


def _labelled(meter: MeteredBackend, records: list[dict], qids: Sequence[str]) -> list[dict]:
    backend, model = meter.answered_by
    for rec, usage in zip(records, _usage_records(meter, qids)):
        rec.update(usage, backend=backend, model=model)
    return records


def _seed_store(root: Path, limits) -> tuple[ProceduralStore, str]:
    store = ProceduralStore(root, limits)
    return store, store.seed(seed_tool_sources(), DEFAULT_GUIDE)


def _runner(ctx: ForecastContext, llm, mode: str, workspace: Path, store) -> Runner:
    return ctx.runner_class(llm, ctx.search, replace(ctx.agent, mode=mode), workspace, store, ctx.subagent.mode,
                            ctx.subagent.max_steps, ctx.sandbox, metric=ctx.metric,
                            subagent_tokens=ctx.subagent.max_tokens, subagent_chars=ctx.subagent.max_chars)


class _Experience:
    """Checkpoint hooks (:class:`engine.rounds.Checkpointable`): only the experience, never the context."""

    EXPERIENCE: tuple[str, ...] = ()

    def save_state(self, directory: Path) -> None:
        codec.write(Path(directory) / "experience.data", {k: getattr(self, k) for k in self.EXPERIENCE})

    def load_state(self, directory: Path) -> None:
        live = {k: getattr(self, k) for k in self.EXPERIENCE}
        for k, v in codec.read(Path(directory) / "experience.data", live=live).items():
            setattr(self, k, v)


class RolloutMethod(_Experience):
    """A method with no experience across questions: every held-out question reads the same (empty) snapshot."""

    def __init__(self, name: str, ctx: ForecastContext, run_key: str):
        self.name, self.ctx, self.run_key = name, ctx, run_key

    def snapshot(self) -> dict[str, np.ndarray]:
        return {}

    def run_episodes(self, snapshot, episodes: Sequence[Episode], llm) -> list[EpisodeResult]:
        ctx = self.ctx
        _activate_prompts(ctx)
        qids = [e.payload[1] for e in episodes]
        meter = MeteredBackend(llm)
        with _workspace(ctx, self.run_key, episodes) as ws:
            store, guide, paths = None, DEFAULT_GUIDE, {}
            if self.name in TOOL_MODES:  # the seed tools and guide, published in this worker's folder
                store, gid = _seed_store(ws / "procedural", ctx.sandbox)
                guide = store.guides[gid]
                paths = store.tool_paths(guide["tool_names"])
            eps = _runner(ctx, meter, self.name, ws / "rollouts", store).rollouts([ctx.items[q] for q in qids],
                                                                                 guide, paths)
            records = [ctx.record(ep, ctx, self.name) for ep in eps]
        return [EpisodeResult(e.episode_id, r) for e, r in zip(episodes, _labelled(meter, records, qids))]

    def apply(self, results) -> None:
        """No experience: nothing to apply."""


class MemoryBaselineMethod(_Experience):
    """Mem0 / MemRL / ReMe / FLEX on the retrieved evidence; the experience track is the method's experience."""

    EXPERIENCE = ("track",)

    def __init__(self, name: str, ctx: ForecastContext, run_key: str):
        from engine.forecast.memory_baselines import MemoryBaselineRunner

        self.name, self.ctx, self.run_key = name, ctx, run_key
        # the track (MemRL / ReMe / FLEX with experience = true) as an empty runner builds it
        self.track = MemoryBaselineRunner(name, None, None, ctx.agent, ctx.memory_baselines, ctx.embedder).track
        self._instance = uuid.uuid4().hex  # this object in this process: its rounds' key in _ROUND_TRACKS

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_instance"}  # a copy is another instance

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._instance = uuid.uuid4().hex

    @property
    def sequential(self) -> bool:
        """Questions in leak-free rounds (the experience track learns from each resolved outcome)."""
        return self.track is not None

    def snapshot(self) -> dict[str, np.ndarray]:
        """The track (``state``) and its queue's keys and resolution times (``pending``: what a share's first
        cutoff releases, known before the track is decoded)."""
        if self.track is None:
            return {}
        return {"state": pack(self.track), "pending": pack(tuple((p.outcome.key, p.resolved_at)
                                                                  for p in self.track.pending))}

    def run_episodes(self, snapshot, episodes: Sequence[Episode], llm) -> list[EpisodeResult]:
        from engine.forecast.memory_baselines import MemoryBaselineRunner

        ctx = self.ctx
        _activate_prompts(ctx)
        qids = [e.payload[1] for e in episodes]
        meter = MeteredBackend(llm)
        release = None
        with _workspace(ctx, self.run_key, episodes) as ws:
            mr = MemoryBaselineRunner(self.name, meter, ctx.search, ctx.agent, ctx.memory_baselines, ctx.embedder,
                                      ws / f"rollouts-{self.name}")
            if self.track is not None:  # the outcomes released before this round, none after
                mr.track, release = self._round_track(snapshot, ctx.items[qids[0]].cutoff, mr.track, llm, meter,
                                                      bool(episodes[0].payload[2]) if len(episodes[0].payload) > 2 else True)
                queued = len(mr.track.pending)
            eps = mr.rollouts([ctx.items[q] for q in qids])
            if self.track is not None and len(mr.batches) != 1:
                raise AssertionError(f"{self.name}: an outcome resolves between the questions of this share "
                                     f"({mr.batches}); the round plan must end a round before it "
                                     "(engine.forecast.outcome_memory.leak_free_rounds)")
            records = []
            for ep in eps:
                rec = ctx.record(ep, ctx, self.name)
                written = mr.written.get(ep.qid, [])
                rec.update(n_written=len(written), dropped=mr.dropped_by.get(ep.qid, 0),
                           evidence=json.dumps([{k: v for k, v in r.items() if k != "text"} for r in ep.evidence],
                                               default=str),
                           evidence_chars=json.dumps([len(r["text"]) for r in ep.evidence]),
                           experience_visible=json.dumps([k for k, _ in mr.visible.get(ep.qid, [])]),
                           written=json.dumps([h.origin for h in written]),
                           late_written=sum(h.available_at > ep.task.cutoff for h in written),
                           tracked=mr.track is not None)
                records.append(rec)
        results = [EpisodeResult(e.episode_id, r) for e, r in zip(episodes, _labelled(meter, records, qids))]
        if mr.track is not None:
            # updates: the release (first result) and each question's queued outcome, installed at the barrier
            mine = {p.outcome.key.split(":", 1)[1]: p for p in mr.track.pending[queued:]}
            for res, qid in zip(results, qids):
                if qid in mine:
                    res.updates["outcome"] = pack(mine[qid])
            if release is not None:
                results[0].updates["release"] = pack(release)
        return results

    def _round_track(self, snapshot, cutoff, live, llm, meter: MeteredBackend, opens: bool):
        """``(fork, release)``: a fork of the snapshot's track after the release at ``cutoff`` (this stream's
        first); the released track is made once in this process (:data:`_ROUND_TRACKS`) and forked by every stream
        and share of the round here (:meth:`~engine.forecast.outcome_memory.ExperienceTrack.fork`: decoding the track and reading its
        memory were a fifth of a Prophet Arena worker's time when each stream did both).

        Every share of the round makes the same release (the same seeded requests on the same snapshot: the same
        memory); ``live``: a track built from the context (its embedder). Keyed by this method instance, the
        snapshot and what the release applies: the first cutoff differs between the streams of a round, but in a
        leak-free round every question's cutoff releases the same outcomes. Its LLM usage counts for the round's
        first question only (``opens``), whoever made it.
        """
        from engine.executor import merge_usage

        due = tuple(sorted(key for key, at in unpack(snapshot["pending"]) if at <= cutoff))
        digest = hashlib.blake2b(np.ascontiguousarray(snapshot["state"]).data, digest_size=16).digest()

        def make():
            track, own = unpack(snapshot["state"], live=live), MeteredBackend(llm)
            release = track.release(cutoff, own)
            return track, {"reader": track.reader()}, release, own.meter  # the forks' reader, made once

        track, shared, release, usage = _ROUND_TRACKS.get((self._instance, digest, due), make)[0]
        if opens:
            merge_usage(meter.meter, usage)
        return track.fork(shared), release

    def apply(self, results) -> None:
        """The round's release (installed once: shares repeat it), then its outcomes queued in episode order."""
        for r in results:
            if "release" in r.updates:
                self.track.install(unpack(r.updates["release"]))
        for r in results:
            if "outcome" in r.updates:
                self.track.pending.append(unpack(r.updates["outcome"]))


class EvolutionMethod(_Experience):
    """ForeDreamer with dual-track evolution (paper 3, C.3) on one or more categories, then top-k evaluation.

    Experience: the procedural store's files, and the evolution's :meth:`Evolution.state` (bank,
    guide tree, validation records, log, categories, sampler state) of the current category.
    """

    EXPERIENCE = ("files", "state", "category", "history")

    def __init__(self, name: str, ctx: ForecastContext, run_key: str):
        self.name, self.ctx, self.run_key = name, ctx, run_key
        with tempfile.TemporaryDirectory(prefix="seed-store-") as tmp:
            self.files = _seed_store(Path(tmp), ctx.sandbox)[0].files()
        self.state: dict | None = None
        self.category: str | None = None
        self.history: dict[str, dict] = {}  # category -> its final evolution state (the run's report)

    def snapshot(self) -> dict[str, np.ndarray]:
        return {"state": pack((self.files, self.state, self.category))}

    def run_episodes(self, snapshot, episodes: Sequence[Episode], llm) -> list[EpisodeResult]:
        ctx = self.ctx
        _activate_prompts(ctx)
        if len(episodes) != 1:
            raise AssertionError(f"{self.name}: evolution runs one episode per round, got {len(episodes)}")
        ep = episodes[0]
        kind, category = ep.payload[0], ep.payload[1]
        files, state, current = unpack(snapshot["state"])
        meter = MeteredBackend(llm)
        with _workspace(ctx, self.run_key, episodes) as ws:
            store = ProceduralStore.from_files(ws / "procedural", files, ctx.sandbox)
            runner = _runner(ctx, meter, "foredreamer", ws / "rollouts", store)
            pool = [ctx.items[q] for q in ctx.pools[category]]
            if kind == "init" or current != category:
                evo = Evolution(meter, runner, store, pool, ctx.evolution, ExperienceBank())
            else:
                evo = Evolution.restore(meter, runner, store, pool, ctx.evolution, state)
            record: dict[str, Any] = {"kind": kind, "category": category}
            qids = [category]
            if kind == "init":
                record["validated"] = json.dumps(evo.tree.score)
            elif kind == "iterate":
                entries = evo.iteration(ep.payload[2])
                record.update(iteration=ep.payload[2], log=json.dumps(entries, default=str),
                              outcome=entries[-1]["outcome"] if entries else "rejected")
            else:  # eval: one held-out question with the rank-th best validated configuration
                rank, qid = ep.payload[2], ep.payload[3]
                qids = [qid]
                top = evo.top_configurations()
                record.update(rank=rank, qid=qid, configured=rank < len(top))
                if rank < len(top):
                    bank, gid, val = top[rank]
                    out = runner.rollouts([ctx.items[qid]], store.guides[gid],
                                          store.tool_paths(store.guides[gid]["tool_names"]), bank)[0]
                    record.update(ctx.record(out, ctx, self.name), guide=gid, bank_version=bank.version, validation=val)
            updates = {} if kind == "eval" else {"state": pack((store.files(), evo.state(), category))}
        record = _labelled(meter, [record], qids)[0]
        if kind == "eval":
            record.setdefault("qid", ep.payload[3])
        return [EpisodeResult(ep.episode_id, record, updates)]

    def apply(self, results) -> None:
        for r in results:
            if "state" in r.updates:
                self.files, self.state, self.category = unpack(r.updates["state"])
                self.history[self.category] = self.state

    def write_store(self, root: Path) -> ProceduralStore:
        """The procedural store this run ends with, published under ``root`` (``toe forecast guides`` reads it)."""
        shutil.rmtree(root, ignore_errors=True)
        return ProceduralStore.from_files(root, self.files, self.ctx.sandbox)


def sequential(name: str, evolve: bool, memory_baselines) -> bool:
    """Whether the method learns from each episode (then a round holds one episode)."""
    from engine.forecast.outcome_memory import EXPERIENCE_MODES

    if name == "foredreamer" and evolve:
        return True
    return name in EXPERIENCE_MODES and memory_baselines is not None and bool(memory_baselines.experience)


def make_method(name: str, evolve: bool, ctx: ForecastContext, run_key: str):
    """The round-loop method of one forecast run."""
    if name in MEMORY_MODES:
        return MemoryBaselineMethod(name, ctx, run_key)
    if name == "foredreamer" and evolve:
        return EvolutionMethod(name, ctx, run_key)
    return RolloutMethod(name, ctx, run_key)
