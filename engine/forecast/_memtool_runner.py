"""Runs inside the bubblewrap sandbox (stdlib only, ``python -I -S``); never imported by the engine.

stdin: JSON ``{"mode": "inspect" | "call", "arguments": {...}, "runtime": {...}}``.
Imports /memtool/tool.py, then either reports its exports (inspect) or calls
``run_tool(**build_runner_kwargs(arguments, None, runtime_context))``. The
last stdout line is ``MARKER + json``.
"""
import importlib.util
import json
import sys
import traceback
import types

MARKER = "<<<MEMTOOL_RESULT>>>"


def main():
    req = json.loads(sys.stdin.read() or "{}")
    out = {"ok": False}
    try:
        spec = importlib.util.spec_from_file_location("memtool", "/memtool/tool.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if req.get("mode") == "inspect":
            exports = {n: (callable(getattr(mod, n)) if hasattr(mod, n) else None)
                       for n in ("TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool")}
            out = {"ok": True, "exports": exports, "all": list(getattr(mod, "__all__", []) or []),
                   "name": getattr(mod, "TOOL_NAME", None), "spec": getattr(mod, "TOOL_SPEC", None)}
        else:
            ctx = types.SimpleNamespace(**req.get("runtime", {}))
            kwargs = mod.build_runner_kwargs(dict(req.get("arguments") or {}), None, ctx)
            if not isinstance(kwargs, dict):
                raise TypeError(f"build_runner_kwargs must return a dict, got {type(kwargs).__name__}")
            result = mod.run_tool(**kwargs)
            if not isinstance(result, str):
                raise TypeError(f"run_tool must return a str, got {type(result).__name__}")
            out = {"ok": True, "result": result}
    except BaseException as exc:  # noqa: BLE001 - report everything to the host
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
               "trace": traceback.format_exc(limit=3)[-1500:]}
    sys.stdout.write("\n" + MARKER + json.dumps(out, default=str) + "\n")
    sys.stdout.flush()


main()
