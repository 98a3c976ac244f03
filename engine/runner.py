"""The one runner behind ``toe run``: a task's methods x seeds over an executor, one output layout.

A task (Game of 24, finance, Prophet Arena, FutureX) is a :class:`Task`: it
parses its config, says which runs there are (:meth:`Task.runs`: a method, a
seed and an optional part such as a category), builds each run's
:class:`~engine.rounds.Method` and episode stream, and turns the episode
records into a summary and tables. Everything else is here, written once:

- the order of the runs and one progress bar per run;
- the executor (local or Ray, :func:`engine.executor.make_executor`), rounds,
  the barrier and exactly-once updates (:class:`engine.executor.RoundLoop`);
- checkpoints under ``OUT/checkpoint/<run key>`` when the task asks for them,
  so rerunning a killed command resumes every run where it stopped;
- the run folder: ``episodes.parquet`` (every record of every run, with
  ``method``, ``seed`` and, when the task has parts, ``part``), ``summary.json`` (``meta`` + ``methods``:
  one record per table row), ``summary.parquet`` (the same rows seed by seed, flat: one row per
  method x seed, for pandas and duckdb), ``table.md``, the task's PNGs and
  ``config.toml`` (the resolved config, every default filled in: :func:`resolved_config`), each written
  atomically (:mod:`engine.atomic_io`).

What answered is read from the records (``backend`` and ``model``, which a
method fills from ``llm.answered_by``), not from the config: a replay names
the backend that recorded the trace, and the simulated policy labels every
summary record ``simulated``.
"""

from __future__ import annotations

import datetime
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from engine.errors import PersistenceError
from engine.rounds import Episode, EpisodeResult, Method


@dataclass(frozen=True)
class RunSpec:
    """One run: ``method`` on seed ``seed`` (and ``part``, e.g. a category; "" when the task has none)."""

    method: str
    seed: int
    part: str = ""

    @property
    def key(self) -> str:
        """The run's folder name under ``OUT/checkpoint`` and its ``wall_s`` key."""
        return f"{self.method}-seed{self.seed}" + (f"-{self.part}" if self.part else "")


@dataclass
class Summary:
    """What a task's :meth:`Task.summarize` returns: table rows and the task's own ``meta`` fields."""

    rows: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)


class Task(Protocol):
    """What a task gives the engine: one module defines it as ``TASK`` (:mod:`engine.tasks` finds it by the
    config's ``task`` value). ``exp`` is the task's parsed plan (any object), made once per run by :meth:`parse`."""

    name: str  # the config's ``task`` value
    keys: tuple[str, ...]  # the task's own top-level config keys (the engine reads engine.config.ENGINE_KEYS)
    policy: str  # "module:attr" of attr(llm_cfg) -> SimulatedPolicy, what backend = "simulated" answers with
    default_metric: str  # the summary_rows field toe sweep plots by default
    resume_overrides: Mapping[str, Any]  # --set overrides that make a killed run resumable (toe sweep adds them)

    def parse(self, config: Mapping[str, Any], options) -> Any:
        """Validate every section of the raw config (overrides applied; the task's part taken with
        ``engine.config.split_tables``) into the run's plan, reading data files but building no model, index or
        sandbox; ConfigError names what is wrong. Called once per run."""
        ...

    def plan(self, exp, options) -> dict[str, Any]:
        """What ``toe run --dry-run`` prints of the parsed plan: ``methods``, ``seeds``, ``episodes`` (counts),
        ``model`` and ``checkpoint`` (folder or None)."""
        ...

    @staticmethod
    def summary_rows(summary: dict) -> list[dict]:
        """``summary.json`` as one flat record per method (``toe sweep`` tables, ``--track`` metrics)."""
        ...

    def runs(self, exp) -> list[RunSpec]:
        """Every run, in order (usually methods x seeds)."""
        ...

    def make_method(self, exp, run: RunSpec) -> Method:
        """A fresh method for ``run`` (empty experience)."""
        ...

    def episodes(self, exp, run: RunSpec) -> list[Episode]:
        """The run's episode stream (ids strictly increasing)."""
        ...

    def round_size(self, exp, run: RunSpec) -> int | list[int]:
        """Episodes per round for ``run`` (a round's episodes read one snapshot), or each round's size in
        order (a plan covering the stream, e.g. forecasting's leak-free rounds)."""
        ...

    def llm_factory(self, exp, run: RunSpec) -> Callable[[], Any]:
        """A picklable zero-argument factory of the run's LLM backend (called once per worker)."""
        ...

    def checkpoint(self, exp) -> bool:
        """Whether runs write resumable checkpoints under ``OUT/checkpoint``."""
        ...

    def after_run(self, exp, run: RunSpec, method: Method, results: Sequence[EpisodeResult],
                  out: Path) -> dict[str, Any]:
        """Per-run artifacts (e.g. the store checkpoint a run leaves) and extra summary fields; may be {}."""
        ...

    def summarize(self, exp, records: list[dict[str, Any]], extras: dict[str, dict[str, Any]]) -> Summary:
        """Table rows from every run's records (``extras``: by run key, ``wall_s`` and :meth:`after_run`'s fields)."""
        ...

    def report(self, exp, summary: Summary, records: list[dict[str, Any]], out: Path) -> tuple[str, list[str]]:
        """Write the task's PNGs into ``out``; return (the Markdown tables, the PNG file names)."""
        ...

    # optional: ``resolved(exp) -> {section: parsed dataclass or value}``, the task's own sections with every
    # default filled in (:func:`resolved_config`); a task without it keeps its sections as given.
    # optional: ``prepare(exp)``: build what the runs need beyond the plan (a search index, a sandbox check), once,
    # before any run (a dry run does not call it).


def _reported(update: Callable[[int], Any], options, key: str, total: int) -> Callable[[int], Any]:
    """The progress bar's ``update``, also telling ``options.on_progress`` (a live tracker) each round's end."""
    hook = getattr(options, "on_progress", None)
    if hook is None:
        return update
    done = [0]

    def both(n: int = 1):
        update(n)
        done[0] += n
        hook(key, done[0], total)

    return both


def resolved_config(task: Task, exp, config: Mapping[str, Any], llm_cfg=None) -> dict[str, Any]:
    """The config the run ran, every default filled in: the task's parsed sections (``task.resolved``) and the
    ``[llm]`` section as the engine parsed them, the rest as given (overrides applied). ``config.toml`` in the
    run folder holds it, so ``toe run OUT/config.toml`` runs the same run."""
    from engine.config import to_dict
    from engine.run_options import run_llm

    sections: dict[str, Any] = {"llm": llm_cfg if llm_cfg is not None else run_llm(config, None)}
    resolved = getattr(task, "resolved", None)
    if resolved is not None:
        sections.update(resolved(exp))
    out = dict(config)
    for key, value in sections.items():
        out[key] = to_dict(value)
    return out


def engine_probe(cfg):
    """A factory of :class:`engine.llm.engine_metrics.MetricsSampler` on the run's ``llm.openai.metrics_url``
    (``cfg``, its :class:`~engine.llm.config.LLMConfig`), or None."""
    import functools

    from engine.llm.config import metrics_endpoint
    from engine.llm.engine_metrics import MetricsSampler

    url = metrics_endpoint(cfg)
    return None if url is None else functools.partial(MetricsSampler, url, cfg.openai.metrics_interval_s)


def engine_line(label: str, stats: Mapping[str, Any]) -> str | None:
    """What the run's engines saw, one line (modelled engines per worker, or the scraped server), or None."""
    from engine.llm.engine_metrics import summary_line

    engines = [w["engine"] for w in stats.get("workers", ()) if w.get("engine")]
    if stats.get("server_engine"):
        engines.append(stats["server_engine"])
    return summary_line(label, engines, stats.get("episodes_per_s", 0.0)) if engines else None


def run_task(task: Task, config: Mapping[str, Any], options, exp: Any = None) -> int:
    """Run every run of ``task`` over the executor ``options`` name; write the run folder; print the tables.
    ``exp``: the task's parsed plan when the caller parsed it (:func:`engine.tasks.prepare`); else parsed here."""
    from engine.executor import make_executor, progress_bar
    from engine.run_folder import answered_by, run_folder, unmark_finished, write_records, write_run

    from engine.run_options import with_engine_sections

    options = with_engine_sections(config, options)  # [cluster], [llm] parsed once (already, when the CLI called)
    if exp is None:
        exp = task.parse(config, options)
    prepare = getattr(task, "prepare", None)
    if prepare is not None:  # what a run needs beyond the parsed plan (an index, a sandbox), built before any run
        prepare(exp)
    out = run_folder(options)
    out.mkdir(parents=True, exist_ok=True)
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    specs = task.runs(exp)
    # pre-flight: every run's method is built here, so a bad method table or a missing extra fails before any run
    # starts; each run takes its own when it starts (fresh: nothing has run on it). Runs that depend on each other
    # (task.independent_runs False: a method reads what an earlier run left, e.g. a FLEX library file, when it is
    # built) build theirs again at their start.
    methods: dict[str, Method] = {}
    independent = getattr(task, "independent_runs", None)
    keep = independent is None or independent(exp)
    for spec in specs:
        method = task.make_method(exp, spec)
        if keep:
            methods[spec.key] = method
    unmark_finished(out)  # from here the folder claims no finished run until this one's summary.json
    at_once = concurrent_runs(task, exp, config, options, len(specs))
    done: dict[str, tuple[list[EpisodeResult], RunSpec]] = {}
    extras: dict[str, dict[str, Any]] = {}
    wall: dict[str, float] = {}
    lock = threading.Lock()

    def one(k: int, spec: RunSpec, executor, position: int | None = None) -> None:
        with lock:
            method = methods.pop(spec.key, None)
        if method is None:
            method = task.make_method(exp, spec)
        episodes = task.episodes(exp, spec)
        size = task.round_size(exp, spec)
        ckpt = out / "checkpoint" / spec.key if task.checkpoint(exp) else None
        t0 = time.perf_counter()
        desc = f"[{k + 1}/{len(specs)}] {spec.method} seed {spec.seed}" + (f" {spec.part}" if spec.part else "")
        bar_kwargs = {} if position is None else {"position": position, "leave": False}
        with progress_bar(len(episodes), enabled=options.progress, desc=desc, round_size=size, **bar_kwargs) as bar:
            results = executor.run(method, episodes, task.llm_factory(exp, spec), round_size=size,
                                   progress=_reported(bar.update, options, spec.key, len(episodes)),
                                   checkpoint_dir=ckpt, run_key=spec.key)
        elapsed = time.perf_counter() - t0
        line = engine_line(f"[{k + 1}/{len(specs)}] {spec.key}", executor.stats) if at_once == 1 else None
        if line:
            print(line, file=sys.stderr)
        extra = {"wall_s": elapsed, **(task.after_run(exp, spec, method, results, out) or {})}
        with lock:
            wall[spec.key] = elapsed
            extras[spec.key] = extra
            done[spec.key] = (results, spec)
            if len(specs) > 1:  # every finished run's records on disk at once: a later failure costs that run only
                try:
                    write_records(_records(specs, done), out / "episodes.parquet")
                except Exception as exc:  # noqa: BLE001 - reported with the final artefacts
                    print(f"warning: episodes.parquet could not be written after run {spec.key}: {exc}",
                          file=sys.stderr)

    if at_once == 1:
        for k, spec in enumerate(specs):
            executor = make_executor(options, config, engine_probe=engine_probe(options.llm))
            try:
                one(k, spec, executor)
            finally:
                executor.close()
    else:
        parent = make_executor(options, config, engine_probe=engine_probe(options.llm), concurrent_runs=at_once)
        try:
            run_at_once(specs, one, parent, at_once, options)
        finally:
            parent.close()
    records = _records(specs, done)
    summary = task.summarize(exp, records, extras)
    note = usage_notes(summary, records)
    summary.meta.setdefault("provenance", {})["token_counter"] = token_counter(options.llm)  # what counted tokens
    backend, model = answered_by(records, options.llm)
    failed: list[tuple[str, BaseException]] = []
    try:
        seed_rows = per_seed_rows(task, exp, specs, records, extras)
    except Exception as exc:  # noqa: BLE001 - an artefact of a finished run: the rest is still written
        failed.append(("summary.parquet", exc))
        seed_rows = None
    try:
        tables, pngs = task.report(exp, summary, records, out)
    except Exception as exc:  # noqa: BLE001 - the plots or tables of a finished run: the rest is still written
        failed.append(("table.md and plots", exc))
        tables, pngs = "", []
    if note:
        tables = f"{tables.rstrip()}\n\n{note}\n" if tables else note
        print(note, file=sys.stderr)
    failed += write_run(out, task=task.name, config=resolved_config(task, exp, config, options.llm), options=options,
                        summary=summary, records=records,
                        tables=tables, backend=backend, model=model, wall=wall, seed_rows=seed_rows,
                        errors=[f"{what}: {type(exc).__name__}: {exc}" for what, exc in failed], started_at=started_at)
    if failed:
        what, exc = failed[0]
        raise PersistenceError(
            f"the run finished and {out}/summary.json holds its results, but {', '.join(w for w, _ in failed)} "
            f"could not be written ({type(exc).__name__}: {exc})") from exc
    print(tables)
    print(f"results: {out}/ (" + ", ".join(["episodes.parquet", "summary.json", "summary.parquet", "table.md",
                                             "config.toml", *pngs]) + ")")
    return 0


def _records(specs: Sequence[RunSpec], done: Mapping[str, tuple[list[EpisodeResult], RunSpec]]) -> list[dict]:
    """The episode records of the finished runs, in run order (the same whichever order they finished in)."""
    records = []
    for spec in specs:
        if spec.key not in done:
            continue
        for r in done[spec.key][0]:
            rec = dict(r.record)
            rec.update(method=spec.method, seed=spec.seed, **({"part": spec.part} if spec.part else {}))
            records.append(rec)
    return records


def concurrent_runs(task: Task, exp, config: Mapping[str, Any], options, n_runs: int) -> int:
    """How many runs go at once (``[cluster] concurrent_runs``; 0: all), at most ``n_runs``; 1 when the task says
    its runs depend on each other (``task.independent_runs(exp)`` False: e.g. runs that share one library file)."""
    from engine.executor import cluster_config

    asked = cluster_config(options, config).concurrent_runs  # options.cluster once parsed
    n = n_runs if asked == 0 else min(asked, n_runs)
    independent = getattr(task, "independent_runs", None)
    if n > 1 and independent is not None and not independent(exp):
        print(f"note: cluster.concurrent_runs = {asked}, but this config's runs depend on each other "
              f"(they share what one run leaves for the next); running them one at a time", file=sys.stderr)
        return 1
    return max(1, n)


def run_at_once(specs: Sequence[RunSpec], one: Callable[..., None], parent, at_once: int, options) -> dict[str, Any]:
    """Run ``one(k, spec, executor, position)`` for every run, ``at_once`` at a time, each on a fork of ``parent``
    (the same workers and engines: :meth:`engine.executor.RoundLoop.fork`; the caller closes ``parent``); the
    first failure stops the other runs at their next round boundary and is raised once every run has stopped.
    Prints the experiment's engine line (what every engine saw over the whole experiment), adds it to
    ``executor_stats.jsonl`` as run key ``experiment`` (with ``options.out``) and returns it."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    from engine.executor import RunCancelled, books_since, record_stats_line
    from engine.llm.engine_metrics import engine_summary, summary_line

    cancel = threading.Event()
    slots: queue.Queue = queue.Queue()
    for i in range(at_once):
        slots.put(i)
    errors: list[BaseException] = []
    episodes = [0]
    count_lock = threading.Lock()

    def guarded(k: int, spec: RunSpec) -> None:
        if cancel.is_set():
            return
        executor = None
        position = slots.get()
        try:
            executor = parent.fork()
            executor.cancel = cancel
            one(k, spec, executor, position)
            with count_lock:
                episodes[0] += executor.stats.get("episodes_run", 0)
        except BaseException as exc:  # noqa: BLE001 - the first failure stops the others; raised below
            cancel.set()
            errors.append(exc)
        finally:
            slots.put(position)
            if executor is not None:
                executor.close()

    before = parent.fleet_books()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(at_once, thread_name_prefix="run") as pool:
        for f in [pool.submit(guarded, k, spec) for k, spec in enumerate(specs)]:
            f.result()
    wall = time.perf_counter() - t0
    after = parent.fleet_books()
    first = next((e for e in errors if not isinstance(e, RunCancelled)), errors[0] if errors else None)
    if first is not None:
        raise first
    engines = []
    for i, now in enumerate(after):
        then = before[i] if i < len(before) else None
        books = books_since(now, then)
        # a run's engine-line columns and their counts (max_concurrent_calls: since the engine started)
        if books is not None:
            engines.append({**engine_summary(books, wall), **{k: books[k] for k in (
                "calls", "requests", "sequences", "max_concurrent_calls", "work_s", "busy_s") if k in books}})
    line = {"run_key": "experiment", "concurrent_runs": at_once, "runs": len(specs), "wall_s": wall,
            "episodes_run": episodes[0], "episodes_per_s": episodes[0] / wall if wall > 0 else 0.0,
            "engines": engines}
    if engines:
        print(summary_line(f"experiment ({len(specs)} runs, {at_once} at once)", engines, line["episodes_per_s"]),
              file=sys.stderr)
    if getattr(options, "out", None) is not None:
        record_stats_line(Path(options.out) / "executor_stats.jsonl", line)
    return line


def token_counter(llm_cfg) -> str:
    """Who counted the run's tokens for budgets and token columns (``llm.tokenizer`` of the run's
    :class:`~engine.llm.config.LLMConfig`, engine.llm.tokenizer)."""
    from engine.llm.tokenizer import describe

    try:
        return describe(llm_cfg)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot say what it is: no label
        return ""


def usage_notes(summary: Summary, records: Sequence[Mapping[str, Any]]) -> str:
    """What the records say beyond each task's own columns (:func:`engine.llm.base.usage_fields`), added to
    every table row and ``summary.json``; returns the lines the tables end with ("" when there is none).

    * ``llm.openai.on_error = "record"``: each row's ``failed_episodes`` (its episodes with a request that failed
      after its retries), ``meta.llm_errors`` the totals and the first reason;
    * a server reporting prefix-cache hits: each row's ``cached_tokens`` and ``prefix_cache_hit_rate``
      (cached / prompt tokens of the requests that reported), ``meta.prefix_cache`` the totals."""
    def mine(row):  # the row's records: by its method id ("run" where a task labels "method" for the table)
        ident = row.get("run", row.get("method"))
        return [r for r in records if ident and r.get("method") == ident
                and ("part" not in row or r.get("part") == row["part"])]

    model_rows = [row for row in summary.rows if mine(row)]  # reference rows (no model answered) have none

    notes = []
    failed = [r for r in records if r.get("llm_errors")]
    if failed:
        for row in model_rows:
            row["failed_episodes"] = sum(1 for r in mine(row) if r.get("llm_errors"))
        summary.meta["llm_errors"] = {"episodes": len(failed), "requests": int(sum(r["llm_errors"] for r in failed)),
                                      "first": str(failed[0].get("llm_error", ""))}
        notes.append(f"{len(failed)} of {len(records)} episodes had LLM requests that failed after their retries "
                     f"(llm.openai.on_error = \"record\": answered with nothing, counted in each row's failed_episodes; "
                     f"the reason is in episodes.parquet, llm_error); first: "
                     f"{str(failed[0].get('llm_error', ''))[:200]}")
    if any(r.get("cache_prompt_tokens") for r in records):
        def rate(rs):
            cached = sum(int(r.get("cached_tokens") or 0) for r in rs)
            prompt = sum(int(r.get("cache_prompt_tokens") or 0) for r in rs)
            return cached, (cached / prompt if prompt else float("nan"))

        for row in model_rows:
            row["cached_tokens"], row["prefix_cache_hit_rate"] = rate(mine(row))
        cached, hit = rate(records)
        summary.meta["prefix_cache"] = {"cached_tokens": cached, "hit_rate": hit}
        notes.append("Prefix cache (server-reported cached prompt tokens / prompt tokens): " + ", ".join(
            f"{row.get('method')}{' ' + str(row['part']) if 'part' in row else ''} {row['prefix_cache_hit_rate']:.1%}"
            for row in model_rows))
    return "\n\n".join(notes)


def per_seed_rows(task: Task, exp, specs: Sequence[RunSpec], records: list[dict[str, Any]],
                  extras: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The task's own table rows for each seed alone (``summary.parquet``: one row per method x seed, and part
    where the task has parts), each with its ``seed``: what the table averages, seed by seed."""
    rows = []
    for seed in dict.fromkeys(s.seed for s in specs):
        keys = {s.key for s in specs if s.seed == seed}
        mine = task.summarize(exp, [r for r in records if r["seed"] == seed],
                              {k: v for k, v in extras.items() if k in keys})
        rows += [{"seed": seed, **{k: v for k, v in row.items() if k != "seeds"}} for row in mine.rows]
    return rows
