"""Runs inside the bubblewrap sandbox (stdlib only, ``python -I -S``); never imported by the engine.

stdin: JSON ``{"mode": "inspect" | "call", "arguments": {...}, "runtime": {...},
"result_fd": N, "inputs": [names], "max_processes": P, "max_file_bytes": B}``.
Lowers ``RLIMIT_NPROC`` to ``max_processes`` first: inside the sandbox's own
user namespace the kernel counts only this sandbox's processes against it.
Then imports /memtool/tool.py and either reports its exports (inspect) or
calls ``run_tool(**build_runner_kwargs(arguments, None, runtime_context))``.
Last, it lists /item with ``lstat`` and writes one JSON object to
``result_fd``: the result, every regular file the tool left (base64, inputs
excepted) and every other entry with its kind. The engine trusts none of it:
a tool can forge this object only with bytes it could have written as files.
"""
import base64
import importlib.util
import json
import os
import resource
import stat
import sys
import traceback
import types

ITEM = "/item"


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "unknown file type"


def _pack(inputs, max_file_bytes):
    files, refused = {}, {}
    try:
        entries = sorted(os.listdir(ITEM))
    except OSError as exc:
        return files, {"/item": f"cannot be listed ({exc})"}
    for name in entries:
        if name in inputs:
            continue
        path = os.path.join(ITEM, name)
        try:
            st = os.lstat(path)
        except OSError as exc:
            refused[name] = f"cannot be examined ({exc.strerror})"
            continue
        if not stat.S_ISREG(st.st_mode):
            refused[name] = f"a {_kind(st.st_mode)}, not a regular file"
        elif st.st_nlink != 1:
            refused[name] = f"a regular file with {st.st_nlink} hard links"
        elif st.st_size > max_file_bytes:
            refused[name] = f"{st.st_size} bytes, over the cap of {max_file_bytes}"
        else:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                try:
                    data = os.read(fd, max_file_bytes + 1)
                finally:
                    os.close(fd)
                files[name] = base64.b64encode(data[:max_file_bytes]).decode("ascii")
            except OSError as exc:
                refused[name] = f"cannot be read ({exc.strerror})"
    return files, refused


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main():
    req = json.loads(sys.stdin.read() or "{}")
    nproc = int(req.get("max_processes", 16))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    result_fd = int(req["result_fd"])
    inputs = set(req.get("inputs") or ())
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
    out["files"], out["refused"] = _pack(inputs, int(req.get("max_file_bytes", 1 << 20)))
    try:
        st = os.statvfs(ITEM)
        out["item_free_bytes"] = st.f_bavail * st.f_frsize
    except OSError:
        pass
    _write_all(result_fd, json.dumps(out, default=str).encode("utf-8"))
    os.close(result_fd)


main()
