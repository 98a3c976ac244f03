"""Registry of Game-of-24 methods: name -> a fresh :class:`engine.game24.tot.ToTMethod`.

``tot`` (no experience), ``toe`` (ToT+ToE in ``[toe] mode``), ``toe-supply`` and
``toe-guide`` (ToT+ToE with that mode, whatever ``[toe] mode`` says, so one job
reports both rows) and the baselines ``mem0``,
``memrl``, ``reme``, ``flex`` (from :mod:`engine.game24.baseline_methods`,
imported only when one of them is asked for). Every method shares the same ToT
search parameters; each reads its own table of the config (``[toe]``,
``[mem0]``, ...).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from engine.config import from_dict
from engine.errors import ConfigError
from engine.game24.tot import ToTConfig, ToTMethod

BASELINE_NAMES = ("mem0", "memrl", "reme", "flex")
TOE_MODES = ("supply", "guide")  # supply: a verified stored suffix completes the branch; guide: prompts + values
TOE_NAMES = ("toe",) + tuple(f"toe-{m}" for m in TOE_MODES)
METHOD_NAMES = ("tot",) + TOE_NAMES + BASELINE_NAMES
EXPERIENCE_FREE = ("tot",)  # the warm-up stream cannot change these; the runner may skip it


def _tot(table, tot_config, learn_phases, embedder, budget=None) -> ToTMethod:
    # plain ToT has no settings of its own: [tot] is the search shared by every method
    return ToTMethod("tot", None, tot_config, learn_phases)


def toe_mode(name: str, table: Mapping[str, Any] | None) -> str:
    """The ToE mode method ``name`` runs in: its suffix (``toe-guide``), else ``[toe] mode`` (default supply)."""
    if name.startswith("toe-"):
        return name[len("toe-"):]
    return str((table or {}).get("mode", "supply"))


def _toe_builder(name: str) -> Callable[..., ToTMethod]:
    def build(table, tot_config, learn_phases, embedder, budget=None) -> ToTMethod:
        # ToE's retrieval sizes are its own (seed 000: k1, overlap_top_k); [memory] does not set them
        from engine.game24.toe_method import ToEConfig, make_toe_method

        table = dict(table or {})
        table["mode"] = toe_mode(name, table)
        return make_toe_method(tot_config, from_dict(ToEConfig, table, "toe"), name, learn_phases)

    return build


def _baseline(name: str) -> Callable[..., ToTMethod]:
    def build(table, tot_config, learn_phases, embedder, budget=None) -> ToTMethod:
        try:
            from engine.game24.baseline_methods import make_baseline_method
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("engine."):
                raise ConfigError(
                    f"method {name!r} needs engine/game24/baseline_methods.py, which this build lacks "
                    f"({exc.name} missing); available now: tot, toe"
                ) from exc
            raise
        return make_baseline_method(name, table, embedder=embedder, tot_config=tot_config,
                                    learn_phases=learn_phases, budget=budget)

    return build


BUILDERS: dict[str, Callable[..., ToTMethod]] = {"tot": _tot}
BUILDERS.update({name: _toe_builder(name) for name in TOE_NAMES})
BUILDERS.update({name: _baseline(name) for name in BASELINE_NAMES})


def check_method_names(names: Sequence[str]) -> None:
    if not names:
        raise ConfigError(f"methods must list at least one of {', '.join(METHOD_NAMES)}, got []")
    for name in names:
        if name not in BUILDERS:
            raise ConfigError(f"unknown method {name!r} in methods; valid methods: {', '.join(METHOD_NAMES)}")
    dup = sorted({n for n in names if list(names).count(n) > 1})
    if dup:
        raise ConfigError(f"methods lists {dup} more than once")


def make_method(
    name: str,
    table: Mapping[str, Any] | None = None,
    tot_config: ToTConfig | None = None,
    learn_phases: Sequence[str] = ("warmup", "test"),
    embedder=None,
    budget=None,
) -> ToTMethod:
    """A fresh method (empty experience) named ``name``, configured from its table and the run's
    ``[memory]`` budget (:class:`engine.memory_budget.MemoryBudget`, default when None)."""
    check_method_names([name])
    return BUILDERS[name](dict(table or {}), tot_config or ToTConfig(), tuple(learn_phases), embedder, budget)
