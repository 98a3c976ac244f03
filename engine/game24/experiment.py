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
``[prompts]`` (the user's own template files, docs/prompts.md), ``[memory]`` (the
memory methods' shared budget, :mod:`engine.memory_budget`), and
one table per baseline (``[mem0]``, ``[memrl]``, ``[reme]``, ``[flex]``).

Outputs in the run folder: ``episodes.parquet`` (one row per episode, every
method and seed), ``summary.json``, ``table.md``, ``accuracy_vs_calls.png``,
``learning_curve.png``. The table is printed at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from engine.config import check, check_seeds, from_dict, split_tables
from engine.errors import ConfigError

from engine.game24.methods import (
    BASELINE_NAMES,
    TOE_NAMES,
    check_method_names,
    toe_mode,
)
from engine.game24.tot import PuzzleTask, ToTConfig
from engine.memory_budget import MemoryBudget, load_budget
from engine.rounds import Episode, request_seed
from engine.templates import PromptsConfig, check_files

KEYS = ("methods", "seeds", "protocol", "tot", "toe", "report", "prompts", "memory") + BASELINE_NAMES  # the task's own


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
    memory: MemoryBudget = MemoryBudget()  # [memory]: the memory baselines' shared budget


def parse_config(config: Mapping[str, Any]) -> Game24Experiment:
    """Validate the raw TOML dict (after ``--set`` overrides); unknown keys list the valid ones."""
    title = config.get("title", Game24Experiment.title)
    config = split_tables(config, KEYS, "game24")
    methods = config.get("methods", ["tot", "toe"])
    if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
        raise ConfigError(f"methods must be a list of method names, got {methods!r}")
    check_method_names(methods)
    seeds = check_seeds(config.get("seeds", [0]))
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
        memory=load_budget(config),
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


def llm_factory(llm_cfg, seed: int):
    """The run's backend factory for ``seed`` (a picklable partial: each Ray worker calls it once)."""
    from engine.llm.factory import BackendFactory
    from engine.tasks import policy_of

    return BackendFactory(replace(llm_cfg, seed=seed), policy=policy_of("game24"))


def use_prompts(cfg: PromptsConfig, llm_cfg, options) -> tuple[list, str | None]:
    """Load, check and activate the run's prompt templates; a warning when custom ones meet the simulated policy."""
    from engine import templates
    import engine.baselines.prompts  # noqa: F401  (registers the baselines' prompts)
    import engine.game24.prompts  # noqa: F401

    templates.check_executor(cfg, options)
    return templates.activate_for_run([("game24", cfg.file), ("baselines", cfg.baselines)], llm_cfg)


def notes(exp: Game24Experiment) -> list[str]:
    if exp.tot.drop_invalid_steps:
        search = ("ToT search: the reference BFS except the engine option drop_invalid_steps "
                  "(proposal lines the verifier rejects are dropped)")
    else:
        search = "ToT search: the reference BFS (proposals as written, numbers from the model's left: text)"
    scope = ("run (the reference's; filled by the test split only, empty at its start)"
             if exp.tot.value_cache == "run" else exp.tot.value_cache)
    notes = [f"{search}, value cache per {scope}."]
    if any(m in TOE_NAMES for m in exp.methods):
        notes.append("ToE modes: supply = a verified stored suffix completes the branch; "
                     "guide = experience only in prompts and values.")
    return notes


def heading(protocol: ProtocolConfig, n_test: int) -> str:
    """The table heading, from what ran (the backend label follows it), never from the config's title."""
    return f"Game of 24, ToT test split (ranks {protocol.test_first}-{protocol.test_last}, {n_test} puzzles)"
