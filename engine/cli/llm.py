"""``toe llm generate``: try an LLM backend from the command line.

    toe llm generate --backend simulated --n 3 --prompt "..."
    toe llm generate --backend openai --set llm.openai.base_url=http://127.0.0.1:8000/v1 \\
        --set llm.model=Qwen/Qwen2.5-7B-Instruct --prompt-file prompt.txt
    toe llm generate --config configs/game24.toml --prompt "..."     # uses its [llm] table

Prints one JSON line per completion: backend, model, request and sample index,
text, finish reason, prompt and completion tokens, request latency. ``--set`` takes
``llm.KEY=VALUE`` as ``toe run`` does (the same parser; any other section is an
error); ``--backend X`` answers from X or fails. ``simulated`` answers with a
task's simulated policy: ``--task`` (default: the config's ``task``, else game24).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.errors import InputError


def register(subparsers) -> None:
    """Add ``toe llm ...`` to the ``toe`` parser."""
    p = subparsers.add_parser("llm", help="try an LLM backend")
    sub = p.add_subparsers(dest="llm_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    g = sub.add_parser("generate", help="generate completions and print one JSON line per completion")
    g.add_argument("--backend", choices=("simulated", "local", "openai", "vllm", "replay", "server_model"), default=None,
                   help="backend (default: the config's, else simulated)")
    g.add_argument("--config", type=Path, default=None, help="TOML file whose [llm] table to use")
    g.add_argument("--task", choices=("game24", "finance", "forecast", "futurex"), default=None,
                   help="whose simulated policy answers llm.backend = simulated (default: the config's task, else game24)")
    g.add_argument("--set", dest="overrides", action="append", default=[], metavar="llm.KEY=VALUE",
                   help="override an [llm] key, e.g. --set llm.openai.base_url=http://host:8000/v1 (repeatable)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", default=None, help="prompt text")
    src.add_argument("--prompt-file", type=Path, default=None, help="file holding the prompt")
    g.add_argument("--chat", action="store_true", help="send the prompt as one user chat message")
    g.add_argument("--n", type=int, default=1)
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--dry-run", action="store_true",
                   help="validate the [llm] table and the request, print them and exit without building the backend")
    g.set_defaults(func=_generate)


def _task(args) -> str:
    """``--task``, else the config file's ``task`` key, else game24."""
    if args.task is not None:
        return args.task
    if args.config is not None:
        from engine.config import load_toml
        from engine.tasks import task_of

        config = load_toml(args.config)
        if "task" in config:
            return task_of(config, str(args.config))
    return "game24"


def _generate(args) -> int:
    from engine.errors import ConfigError
    from engine.llm.base import Request
    from engine.llm.factory import make_backend
    from engine.tasks import policy_of

    cfg = llm_config_from_args(args.config, args.overrides, args.backend)
    if args.prompt_file is not None:
        if not args.prompt_file.is_file():
            raise InputError(f"--prompt-file {str(args.prompt_file)!r} does not exist")
        prompt = args.prompt_file.read_text()
    else:
        prompt = args.prompt
    if not prompt:
        raise InputError("--prompt must not be empty")
    if args.chat:
        req = Request(messages=({"role": "user", "content": prompt},), n=args.n, temperature=args.temperature,
                      top_p=args.top_p, max_tokens=args.max_tokens, stop=tuple(args.stop), seed=args.seed)
    else:
        req = Request(prompt=prompt, n=args.n, temperature=args.temperature, top_p=args.top_p,
                      max_tokens=args.max_tokens, stop=tuple(args.stop), seed=args.seed)
    if args.dry_run:
        from engine.config import to_dict

        print(json.dumps({"llm": {k: v for k, v in to_dict(cfg).items() if k != "simulated"},
                          "request": {"chat": args.chat, "n": req.n, "temperature": req.temperature,
                                      "max_tokens": req.max_tokens, "prompt_chars": len(prompt)}}))
        print("dry run: [llm] valid, no backend built", file=sys.stderr)
        return 0
    backend = make_backend(cfg, policy=policy_of(_task(args)))
    if backend.name != cfg.backend:  # pragma: no cover - the factory's contract
        raise ConfigError(f"--backend {cfg.backend} built a {backend.name!r} backend")
    try:
        responses = backend.generate([req])
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    for k, resp in enumerate(responses):
        for i, c in enumerate(resp.completions):
            print(json.dumps({
                "backend": resp.backend,
                "model": resp.model,
                "request": k,
                "sample": i,
                "text": c.text,
                "finish_reason": c.finish_reason,
                "prompt_tokens": resp.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "latency_s": round(resp.latency_s, 6),
            }, ensure_ascii=False))
    sys.stdout.flush()
    return 0


def llm_config_from_args(config: Path | None, overrides, backend: str | None):
    """The [llm] table of ``config`` (or defaults), then ``--set llm.KEY=VALUE``, then ``--backend``.

    Overrides go through :func:`engine.config.apply_overrides`, as in ``toe run``; a key outside
    ``llm.`` is an error (this command reads only [llm]) and so is an unknown [llm] key.
    """
    from engine.config import apply_overrides, load_toml
    from engine.errors import ConfigError
    from engine.llm.config import ALIASES, load_llm_config

    for item in overrides:
        key = item.partition("=")[0].strip()
        if not key.startswith("llm.") or "=" not in item:
            raise ConfigError(f"toe llm generate reads only [llm]: --set takes llm.KEY=VALUE "
                              f"(e.g. --set llm.openai.base_url=http://HOST:8000/v1), got {item!r}")
    table = load_toml(config).get("llm", {}) if config else {}
    table = apply_overrides({"llm": table}, overrides, ALIASES)["llm"]
    if backend:
        table["backend"] = backend
    cfg = load_llm_config(table)
    if backend and cfg.backend != backend:  # pragma: no cover - set just above
        raise ConfigError(f"--backend {backend} but [llm] resolved to backend {cfg.backend!r}")
    return cfg
