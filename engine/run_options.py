"""The options of one ``toe run`` that are not in its config, and the engine's sections parsed once per run.

:class:`RunOptions` is what the CLI (or a caller) hands the runner; :func:`with_engine_sections` parses the
config's ``[cluster]``, ``[llm]`` and ``[embed]`` into it once, and every component reads them from there
(:func:`run_llm`, :func:`run_embed`), never from the TOML again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


@dataclass(frozen=True)
class RunOptions:
    """Command-line options of ``toe run`` that are not part of the config file."""

    config_path: Path
    out: Path | None = None
    executor: str = "local"  # "local" | "ray"
    workers: int = 1
    address: str | None = None
    overrides: tuple[str, ...] = field(default_factory=tuple)
    progress: bool = True
    # called as each round finishes: (run key, episodes done in that run, its episodes), e.g. a live tracker
    on_progress: Any = field(default=None, compare=False)
    # the engine's sections, parsed once per run (with_engine_sections); None: not parsed yet
    cluster: Any = None  # [cluster]: engine.executor.ClusterConfig
    llm: Any = None  # [llm]: engine.llm.config.LLMConfig
    embed: Any = None  # [embed]: engine.embed.EmbedConfig


def with_engine_sections(config: Mapping[str, Any], options: RunOptions) -> RunOptions:
    """``options`` carrying the config's ``[cluster]``, ``[llm]`` and ``[embed]`` parsed (once per run: the CLI
    parses them before :func:`resolve`, the runner when called without them); the executors, the task and the
    run folder read them from there (:func:`run_llm`, :func:`run_embed`) and never parse them again."""
    if all(getattr(options, name, None) is not None for name in SECTIONS):
        return options
    import dataclasses
    from types import SimpleNamespace

    parsed = {name: _section(name, config, options) for name in SECTIONS}
    if dataclasses.is_dataclass(options):
        return dataclasses.replace(options, **parsed)
    return SimpleNamespace(**{**vars(options), **parsed})  # a caller's own options object


SECTIONS = ("cluster", "llm", "embed")  # the engine's sections RunOptions carries parsed


def _section(name: str, config: Mapping[str, Any], options) -> Any:
    """``options.<name>`` as parsed once per run, else the section parsed from ``config`` by its one parser."""
    parsed = getattr(options, name, None)
    if parsed is not None:
        return parsed
    if name == "cluster":
        from engine.executor import settings

        return settings.parse_cluster(config)
    if name == "llm":
        from engine.llm import config as llm_config

        return llm_config.load_llm_config(config.get("llm"))
    from engine.embed import config as embed_config

    return embed_config.load_embed_config(config)


def run_llm(config: Mapping[str, Any], options) -> Any:
    """The run's ``[llm]`` (:class:`engine.llm.config.LLMConfig`): ``options.llm`` as parsed once per run, else
    parsed from ``config`` (a caller that did not go through :func:`with_engine_sections`)."""
    return _section("llm", config, options)


def run_embed(config: Mapping[str, Any], options) -> Any:
    """The run's ``[embed]`` (:class:`engine.embed.EmbedConfig`), as :func:`run_llm` gives ``[llm]``."""
    return _section("embed", config, options)
