"""``toe llm generate``: try an LLM backend from the command line.

    toe llm generate --backend simulated --n 3 --prompt "..."
    toe llm generate --backend openai --set base_url=http://127.0.0.1:8000/v1 --set model=Qwen/Qwen2.5-7B-Instruct \\
        --prompt-file prompt.txt
    toe llm generate --config configs/game24.toml --prompt "..."     # uses its [llm] table

Prints one JSON line per completion: backend, model, request and sample index,
text, finish reason, prompt and completion tokens, request latency.
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
    g.add_argument("--backend", choices=("simulated", "local", "openai", "vllm", "replay"), default=None,
                   help="backend (default: the config's, else simulated)")
    g.add_argument("--config", type=Path, default=None, help="TOML file whose [llm] table to use")
    g.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override an [llm] key, e.g. --set base_url=http://host:8000/v1 (repeatable)")
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
    g.set_defaults(func=_generate)


def _generate(args) -> int:
    from engine.config import apply_overrides, load_toml
    from engine.llm.base import Request
    from engine.llm.config import load_llm_config
    from engine.llm.factory import make_backend

    data = load_toml(args.config).get("llm", {}) if args.config else {}
    data = apply_overrides({"llm": data}, [f"llm.{o}" for o in args.overrides])["llm"]
    if args.backend:
        data["backend"] = args.backend
    cfg = load_llm_config(data)
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
    backend = make_backend(cfg)
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
