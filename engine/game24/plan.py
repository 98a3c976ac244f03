"""``toe run configs/game24.toml --dry-run``: the Game-of-24 run's plan, every section parsed, nothing run."""

from __future__ import annotations

from typing import Any, Mapping

from engine.game24.experiment import TOP_KEYS, build_stream, parse_config
from engine.run_folder import run_folder

KEYS = TOP_KEYS  # this task's top-level keys (engine.tasks adds llm, embed, cluster, title)


def plan(config: Mapping[str, Any], options) -> dict[str, Any]:
    from engine.game24.methods import EXPERIENCE_FREE, make_method
    from engine.tasks import run_llm

    exp = parse_config(config)
    warm, test = build_stream(exp.protocol)
    learn = ("warmup", "test") if exp.protocol.learn_on_test else ("warmup",)
    for name in exp.methods:  # the method tables, as the runner's pre-flight builds them (hashing embedder)
        make_method(name, None if name == "tot" else config.get(name), exp.tot, learn, None, exp.memory)
    per_seed = {m: (len(test) if m in EXPERIENCE_FREE else len(warm) + len(test)) for m in exp.methods}
    out = run_folder(options)
    llm = run_llm(config, options)
    model = llm.model
    if not model and llm.backend == "simulated":
        from engine.game24.simulated_policy import MODEL_NAME

        model = MODEL_NAME
    return {
        "methods": list(exp.methods), "seeds": list(exp.seeds),
        "episodes": {"warm-up puzzles": len(warm), "test puzzles": len(test),
                     "episodes per seed": " + ".join(f"{m} {n}" for m, n in per_seed.items()),
                     "episodes in all": sum(per_seed.values()) * len(exp.seeds),
                     "round size": exp.protocol.round_size},
        "model": model,
        "checkpoint": str(out / "checkpoint") if exp.protocol.checkpoint else None,
    }
