"""``toe run configs/game24.toml``: ToT, ToT+ToE and the baselines on one puzzle stream.

Protocol (ToE seed 000, Game of 24): a warm-up stream (default: a fixed sample
of the ToT puzzle ranks 1-900, in rank order) during which experience
accumulates, then the test split (ranks 901-1000); every method listed in
``methods`` runs the same stream with the same ToT search from an empty
experience, once per seed. Experience-free methods (plain ToT) skip the
warm-up: it cannot change them, and an episode's seed comes from (run seed,
puzzle identity, phase), not its position, so their figures are identical either way.

Config keys (see configs/game24.toml): ``task``, ``methods``, ``seeds``,
``[protocol]``, ``[tot]``, ``[toe]``, ``[llm]``, ``[embed]``, ``[report]``,
``[prompts]`` (the user's own template files, docs/prompts.md), and
one table per baseline (``[mem0]``, ``[memrl]``, ``[reme]``, ``[flex]``).

Outputs in the run folder: ``episodes.parquet`` (one row per episode, every
method and seed), ``summary.json``, ``table.md``, ``accuracy_vs_calls.png``,
``learning_curve.png``. The table is printed at the end.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from engine.config import check, from_dict, to_dict
from engine.errors import ConfigError
from engine.game24.hooks import request_seed
from engine.game24.methods import (
    BASELINE_NAMES,
    EXPERIENCE_FREE,
    TOE_NAMES,
    check_method_names,
    make_method,
    toe_mode,
)
from engine.game24.tot import PuzzleTask, ToTConfig
from engine.rounds import Episode
from engine.templates import PromptsConfig, check_files

TOP_KEYS = ("task", "title", "methods", "seeds", "protocol", "tot", "toe", "llm", "embed", "cluster", "report",
            "prompts") + BASELINE_NAMES


@dataclass(frozen=True)
class ProtocolConfig:
    """[protocol]: which puzzles form the warm-up stream and the test split."""

    puzzles: str = ""  # a puzzle file in the ToT format; "" = the shipped ToT file (1,362 puzzles)
    warmup_first: int = 1  # warm-up ranks, inclusive
    warmup_last: int = 900
    warmup_sample: int = 300  # 0 = every warm-up rank; else a fixed sample of this size, kept in rank order
    sample_seed: int = 0  # which sample (the same stream for every method and seed)
    test_first: int = 901
    test_last: int = 1000
    test_limit: int = 0  # 0 = the whole test split; else its first N puzzles
    learn_on_test: bool = True  # experience keeps accumulating on the test split (a continual stream)
    round_size: int = 25  # episodes per round (staleness <= round_size - 1; larger batches LLM calls)
    checkpoint: bool = False  # write resumable checkpoints under OUT/checkpoint

    def __post_init__(self):
        check(1 <= self.warmup_first, f"protocol.warmup_first must be >= 1, got {self.warmup_first}")
        check(self.warmup_last >= self.warmup_first - 1,
              f"protocol.warmup_last must be >= warmup_first - 1 (empty), got {self.warmup_last}")
        check(self.warmup_sample >= 0, f"protocol.warmup_sample must be >= 0, got {self.warmup_sample}")
        check(self.test_first <= self.test_last,
              f"protocol.test_first must be <= test_last, got {self.test_first} > {self.test_last}")
        check(self.test_limit >= 0, f"protocol.test_limit must be >= 0, got {self.test_limit}")
        check(self.round_size >= 1, f"protocol.round_size must be >= 1, got {self.round_size}")
        overlap = self.warmup_last >= self.test_first and self.warmup_first <= self.test_last
        check(not overlap or self.warmup_last < self.warmup_first,
              f"protocol: warm-up ranks {self.warmup_first}-{self.warmup_last} overlap the test split "
              f"{self.test_first}-{self.test_last}")


@dataclass(frozen=True)
class ReportConfig:
    """[report]: plots and the learning-curve window."""

    plots: bool = True
    window: int = 50

    def __post_init__(self):
        check(self.window >= 1, f"report.window must be >= 1, got {self.window}")


@dataclass(frozen=True)
class Game24Experiment:
    """The whole parsed config."""

    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    protocol: ProtocolConfig
    tot: ToTConfig
    report: ReportConfig
    prompts: PromptsConfig = PromptsConfig()
    title: str = "Game of 24, ToT test split (ranks 901-1000)"


def parse_config(config: Mapping[str, Any]) -> Game24Experiment:
    """Validate the raw TOML dict (after ``--set`` overrides); unknown keys list the valid ones."""
    unknown = sorted(set(config) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {unknown} in the game24 config; valid keys: {sorted(TOP_KEYS)}")
    if config.get("task", "game24") != "game24":
        raise ConfigError(f"task must be 'game24' for this runner, got {config.get('task')!r}")
    methods = config.get("methods", ["tot", "toe"])
    if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
        raise ConfigError(f"methods must be a list of method names, got {methods!r}")
    check_method_names(methods)
    seeds = config.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                          for s in seeds):
        raise ConfigError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct, got {seeds}")
    title = config.get("title", Game24Experiment.title)
    if not isinstance(title, str):
        raise ConfigError(f"title must be a string, got {title!r}")
    prompts = from_dict(PromptsConfig, config.get("prompts"), "prompts")
    check_files(prompts, "game24")
    return Game24Experiment(
        methods=tuple(methods), seeds=tuple(seeds),
        protocol=from_dict(ProtocolConfig, config.get("protocol"), "protocol"),
        tot=from_dict(ToTConfig, config.get("tot"), "tot"),
        report=from_dict(ReportConfig, config.get("report"), "report"),
        prompts=prompts,
        title=title,
    )


def build_stream(protocol: ProtocolConfig) -> tuple[list, list]:
    """(warm-up puzzles, test puzzles) in stream order."""
    from engine.game24 import load_puzzles

    puzzles = load_puzzles(protocol.puzzles or None)
    warm = [p for p in puzzles if p.rank is not None and protocol.warmup_first <= p.rank <= protocol.warmup_last]
    if protocol.warmup_sample and protocol.warmup_sample < len(warm):
        rng = np.random.default_rng(protocol.sample_seed)
        keep = np.sort(rng.choice(len(warm), size=protocol.warmup_sample, replace=False))
        warm = [warm[i] for i in keep]
    test = [p for p in puzzles if p.rank is not None and protocol.test_first <= p.rank <= protocol.test_last]
    if protocol.test_limit:
        test = test[: protocol.test_limit]
    if not test:
        raise ConfigError(
            f"protocol: no puzzles with ranks {protocol.test_first}-{protocol.test_last} in "
            f"{protocol.puzzles or 'the shipped ToT file'}"
        )
    return warm, test


def episode_seed(run_seed: int, rank: int, numbers, phase: str) -> int:
    """An episode's seed from (run seed, puzzle identity, phase), never from its position in the stream.

    So a method's test episodes draw the same numbers whatever warm-up comes
    before them, and every method meets the same draws on the same test item.
    """
    return request_seed("game24", run_seed, "rank", int(rank), " ".join(map(str, numbers)), phase)


def episodes_for(warm: list, test: list, seed: int, skip_warmup: bool = False) -> list[Episode]:
    """The stream as episodes; ids are stream positions, seeds come from :func:`episode_seed`."""
    out = []
    for i, p in enumerate(list(warm) + list(test)):
        phase = "warmup" if i < len(warm) else "test"
        if skip_warmup and phase == "warmup":
            continue
        numbers = tuple(int(x) for x in p.numbers)
        task = PuzzleTask(numbers, int(p.rank or 0), run_seed=int(seed))
        out.append(Episode(i, task, seed=episode_seed(seed, task.rank, numbers, phase), phase=phase))
    return out


def method_table(name: str, config: Mapping[str, Any]):
    """The config table method ``name`` reads: none for plain ToT, ``[toe]`` for every ToE mode."""
    if name == "tot":
        return None
    return config.get("toe") if name in TOE_NAMES else config.get(name)


def row_labels(exp: Game24Experiment, config: Mapping[str, Any]) -> dict[str, str]:
    """What each table row is: the method, its ToE mode, and the search variant when it is not the reference."""
    from engine.game24.report import display_name

    labels = {}
    for name in exp.methods:
        label = display_name(name)
        if name in TOE_NAMES:
            label = f"{display_name('toe')} ({toe_mode(name, config.get('toe'))})"
        if exp.tot.drop_invalid_steps:
            label += " [invalid steps dropped]"
        labels[name] = label
    return labels


def _llm_factory(llm_cfg, seed: int):
    from engine.llm.factory import make_backend
    from engine.tasks import policy_of

    return functools.partial(make_backend, replace(llm_cfg, seed=seed), policy=policy_of("game24"))


def _executor(options):
    from engine.executor import make_executor

    return make_executor(options)


def run(config: dict, options) -> int:
    """Run every method on the stream for every seed; write the run folder; print the table."""
    from engine.executor import progress_bar
    from engine import templates
    from engine.game24 import metrics, report
    from engine.llm.config import load_llm_config

    exp = parse_config(config)
    llm_cfg = load_llm_config(config)
    prompt_sets, prompts_warning = use_prompts(exp.prompts, llm_cfg, options)
    embed_table = config.get("embed")
    embedder = None
    if any(m in BASELINE_NAMES for m in exp.methods):
        from engine.embed import embedder_from_table

        embedder = embedder_from_table(embed_table)
    warm, test = build_stream(exp.protocol)
    out = Path(options.out or Path("runs") / "game24")
    out.mkdir(parents=True, exist_ok=True)
    learn = ("warmup", "test") if exp.protocol.learn_on_test else ("warmup",)

    for name in exp.methods:  # pre-flight: bad method tables or a missing extra fail before any run starts
        make_method(name, method_table(name, config), exp.tot, learn, embedder)

    records: list[dict] = []
    model = ""
    wall: dict[str, float] = {}
    n_runs = len(exp.methods) * len(exp.seeds)
    for k, (name, seed) in enumerate((m, s) for m in exp.methods for s in exp.seeds):
        method = make_method(name, method_table(name, config), exp.tot, learn, embedder)
        episodes = episodes_for(warm, test, seed, skip_warmup=name in EXPERIENCE_FREE)
        executor = _executor(options)
        t0 = time.perf_counter()
        ckpt = out / "checkpoint" / f"{name}-seed{seed}" if exp.protocol.checkpoint else None
        try:
            with progress_bar(len(episodes), enabled=options.progress,
                              desc=f"[{k + 1}/{n_runs}] {name} seed {seed}",
                              round_size=exp.protocol.round_size) as bar:
                results = executor.run(method, episodes, _llm_factory(llm_cfg, seed),
                                       round_size=exp.protocol.round_size, progress=bar.update,
                                       checkpoint_dir=ckpt)
        finally:
            executor.close()
        wall[f"{name}/seed{seed}"] = time.perf_counter() - t0
        for r in results:
            rec = dict(r.record)
            rec.setdefault("backend", llm_cfg.backend)
            rec.update(method=name, seed=seed)
            records.append(rec)
    # Labels name what answered (a replay: the backend that recorded the trace), not what the config asked for.
    backend, model = answered_label(records, llm_cfg)

    summary = metrics.summarize(records, "test", exp.methods)
    labels = row_labels(exp, config)
    simulated = backend == "simulated"
    for rec in summary:
        rec["label"] = labels[rec["method"]]
        if rec["method"] in TOE_NAMES:
            rec["toe_mode"] = toe_mode(rec["method"], config.get("toe"))
        rec["backend"] = backend
        rec["model"] = model
        rec["simulated"] = simulated
        rec["run_wall_s"] = float(sum(v for key, v in wall.items() if key.startswith(rec["method"] + "/")))
    meta = {
        "task": "game24", "backend": backend, "model": model, "simulated": simulated,
        "configured_backend": llm_cfg.backend,
        "label": report.backend_label(backend, model), "title": exp.title,
        "methods": list(exp.methods), "seeds": list(exp.seeds),
        "warmup_puzzles": len(warm), "test_puzzles": len(test),
        "protocol": to_dict(exp.protocol), "tot": to_dict(exp.tot),
        "executor": getattr(options, "executor", "local"), "wall_s": wall,
        "prompts": templates.summary_entry(prompt_sets),
    }
    if prompts_warning:
        meta["prompts_warning"] = prompts_warning
    report.write_episodes(records, out / "episodes.parquet")
    report.write_summary(summary, out / "summary.json", meta)
    notes = _notes(exp) + ([f"Warning: {prompts_warning}."] if prompts_warning else [])
    table = report.markdown_table(summary, backend, model, heading(exp.protocol, len(test)), notes=notes)
    (out / "table.md").write_text(table)
    if exp.report.plots:
        report.plot_accuracy_vs_calls(summary, out / "accuracy_vs_calls.png", backend)
        report.plot_learning_curve(records, exp.methods, out / "learning_curve.png", backend,
                                   exp.report.window, test_start=len(warm), labels=labels)
    print(table)
    print(f"results: {out}/ (episodes.parquet, summary.json, table.md"
          + (", accuracy_vs_calls.png, learning_curve.png)" if exp.report.plots else ")"))
    return 0


def use_prompts(cfg: PromptsConfig, llm_cfg, options) -> tuple[list, str | None]:
    """Load, check and activate the run's prompt templates; a warning when custom ones meet the simulated policy."""
    from engine import templates
    import engine.baselines.prompts  # noqa: F401  (registers the baselines' prompts)
    import engine.game24.prompts  # noqa: F401

    if (cfg.file or cfg.baselines) and getattr(options, "executor", "local") != "local":
        raise ConfigError("prompts.file / prompts.baselines: custom templates are activated in this process "
                          f"and need the local executor, got executor {getattr(options, 'executor', None)!r}")
    return templates.activate_for_run([("game24", cfg.file), ("baselines", cfg.baselines)], llm_cfg)


def _notes(exp: Game24Experiment) -> list[str]:
    if exp.tot.drop_invalid_steps:
        search = ("ToT search: the reference BFS except the engine option drop_invalid_steps "
                  "(proposal lines the verifier rejects are dropped)")
    else:
        search = "ToT search: the reference BFS (proposals as written, numbers from the model's left: text)"
    notes = [f"{search}, value cache per {exp.tot.value_cache}."]
    if any(m in TOE_NAMES for m in exp.methods):
        notes.append("ToE modes: supply = a verified stored suffix completes the branch; "
                     "guide = experience only in prompts and values.")
    return notes


def answered_label(records, llm_cfg) -> tuple[str, str]:
    """``(backend, model)`` of the episodes' answers; several different ones are an error, none the config's."""
    seen = sorted({(str(r.get("backend") or ""), str(r.get("model") or "")) for r in records} - {("", "")})
    if seen:  # several (a passthrough replay that recorded some answers): name them all
        backend = "+".join(dict.fromkeys(b or llm_cfg.backend for b, _ in seen))
        model = "+".join(dict.fromkeys(m or _model_name(llm_cfg) for _, m in seen))
        return backend, model
    return (llm_cfg.replay_backend if llm_cfg.backend == "replay" else llm_cfg.backend), _model_name(llm_cfg)


def heading(protocol: ProtocolConfig, n_test: int) -> str:
    """The table heading, from what ran (the backend label follows it), never from the config's title."""
    return f"Game of 24, ToT test split (ranks {protocol.test_first}-{protocol.test_last}, {n_test} puzzles)"


def _model_name(llm_cfg) -> str:
    if llm_cfg.model:
        return llm_cfg.model
    if llm_cfg.backend == "simulated":
        from engine.game24.simulated_policy import MODEL_NAME

        return MODEL_NAME
    return llm_cfg.backend
