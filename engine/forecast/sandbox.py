"""Controlled MemTool execution (paper B.7) under bubblewrap.

Every call is one subprocess: ``bwrap`` with all namespaces unshared (no
network: ``--unshare-all`` includes ``--unshare-net``), a root made only of
read-only binds of the system (``/usr`` and its ``/lib*``/``/bin`` links) and
the Python runtime (``sys.base_prefix``), the tool file and the runner
read-only under ``/memtool``, the item folder as the only writable host path
(mounted at ``/item``), and a private tmpfs ``/tmp``. No ``/etc``, no
``/home``, no ``/work``: paths outside these do not exist inside. Limits: wall
time (the process is killed), address space and CPU seconds (``setrlimit``),
the size of any file written (``RLIMIT_FSIZE``) and the bytes of stdout/stderr
read back (the process is killed when it floods). Python runs isolated
(``-I -S``): the standard library only.

``bwrap`` comes from Debian's ``bubblewrap`` package (CI: scripts/setup.sh).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.config import check
from engine.errors import ConfigError

RUNNER = Path(__file__).with_name("_memtool_runner.py")
MARKER = "<<<MEMTOOL_RESULT>>>"
ITEM_MOUNT = "/item"


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call budget of a MemTool (``[forecast.sandbox]``)."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    cpu_s: int = 10
    max_output_bytes: int = 200_000  # stdout + stderr read back
    max_file_mb: int = 16  # largest file the tool may write

    def __post_init__(self):
        check(self.timeout_s > 0, f"sandbox.timeout_s must be > 0, got {self.timeout_s}")
        check(self.memory_mb >= 64, f"sandbox.memory_mb must be >= 64, got {self.memory_mb}")
        check(self.cpu_s >= 1, f"sandbox.cpu_s must be >= 1, got {self.cpu_s}")
        check(self.max_output_bytes >= 1024, f"sandbox.max_output_bytes must be >= 1024, got {self.max_output_bytes}")
        check(self.max_file_mb >= 1, f"sandbox.max_file_mb must be >= 1, got {self.max_file_mb}")


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed call produced. ``status``: ok | error | timeout | output_limit | crashed."""

    status: str
    result: str = ""
    error: str = ""
    payload: dict | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise ConfigError("bubblewrap (bwrap) is not installed; install the Debian package 'bubblewrap' "
                          "(apt-get install -y bubblewrap) to run MemTools")
    return path


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for p in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    return args


def python_executable() -> str:
    """The base interpreter (not the venv's), which lives under sys.base_prefix."""
    exe = os.path.realpath(sys.executable)
    base = os.path.realpath(sys.base_prefix)
    if exe.startswith(base + os.sep) or exe.startswith("/usr/"):
        return exe
    cand = Path(base) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(cand)


def build_command(tool_file: Path, item_dir: Path) -> list[str]:
    return [
        bwrap_path(), "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONIOENCODING", "utf-8",
        *_system_binds(),
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--ro-bind", str(tool_file), "/memtool/tool.py", "--ro-bind", str(RUNNER), "/memtool/runner.py",
        "--bind", str(item_dir), ITEM_MOUNT, "--chdir", ITEM_MOUNT,
        python_executable(), "-I", "-S", "-B", "/memtool/runner.py",
    ]


def _limits(limits: SandboxLimits):
    mem = limits.memory_mb * 1024 * 1024
    fsize = limits.max_file_mb * 1024 * 1024

    def apply():  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_sandboxed(tool_file: str | Path, item_dir: str | Path, request: dict,
                  limits: SandboxLimits | None = None) -> SandboxResult:
    """Run the runner on ``tool_file`` with ``item_dir`` writable; never raises for tool misbehaviour."""
    limits = limits or SandboxLimits()
    tool_file, item_dir = Path(tool_file).resolve(), Path(item_dir).resolve()
    if not tool_file.is_file():
        return SandboxResult("error", error=f"tool file {str(tool_file)!r} does not exist")
    if not item_dir.is_dir():
        return SandboxResult("error", error=f"item_dir {str(item_dir)!r} is not a folder")
    cmd = build_command(tool_file, item_dir)
    prlimit = shutil.which("prlimit")
    t0 = time.perf_counter()
    if prlimit:  # util-linux: sets the limits without a preexec_fn (which is unsafe with threads)
        mem, fsize = limits.memory_mb * 1024 * 1024, limits.max_file_mb * 1024 * 1024
        cmd = [prlimit, f"--as={mem}", f"--cpu={limits.cpu_s}", f"--fsize={fsize}", "--core=0", "--", *cmd]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    else:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=_limits(limits), start_new_session=True)
    bufs: dict[str, bytearray] = {"out": bytearray(), "err": bytearray()}
    total = [0]
    flooded = threading.Event()
    lock = threading.Lock()

    def pump(stream, key):
        while True:
            chunk = stream.read(65536)
            if not chunk:
                return
            with lock:
                total[0] += len(chunk)
                if total[0] > limits.max_output_bytes:
                    flooded.set()
                    _kill(proc)
                    return
                bufs[key] += chunk

    threads = [threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
    for t in threads:
        t.start()
    try:
        proc.stdin.write(json.dumps(request).encode("utf-8"))
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    timed_out = False
    try:
        proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(proc)
        proc.wait()
    for t in threads:
        t.join(timeout=2.0)
    wall = time.perf_counter() - t0
    if timed_out:
        return SandboxResult("timeout", error=f"killed after the {limits.timeout_s}s time limit", wall_s=wall)
    if flooded.is_set():
        return SandboxResult("output_limit", error=f"killed: output exceeded {limits.max_output_bytes} bytes",
                             wall_s=wall)
    out = bufs["out"].decode("utf-8", "replace")
    idx = out.rfind(MARKER)
    if idx < 0:
        err = bufs["err"].decode("utf-8", "replace")[-600:]
        return SandboxResult("crashed", error=f"exit code {proc.returncode} without a result; stderr: {err}",
                             wall_s=wall)
    try:
        payload = json.loads(out[idx + len(MARKER):].strip().splitlines()[0])
    except (json.JSONDecodeError, IndexError) as exc:
        return SandboxResult("crashed", error=f"unreadable result ({exc})", wall_s=wall)
    if not payload.get("ok"):
        return SandboxResult("error", error=str(payload.get("error", "unknown error")), payload=payload, wall_s=wall)
    return SandboxResult("ok", result=str(payload.get("result", "")), payload=payload, wall_s=wall)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


_PROBE: list = []


def sandbox_available() -> tuple[bool, str]:
    """(True, "") when bwrap can start an isolated process here (cached); else (False, why)."""
    if _PROBE:
        return _PROBE[0]
    try:
        cmd = [bwrap_path(), "--unshare-all", "--die-with-parent", *_system_binds(), "--proc", "/proc",
               "--dev", "/dev", "--tmpfs", "/tmp", python_executable(), "-I", "-S", "-c", "print('ok')"]
        r = subprocess.run(cmd, capture_output=True, timeout=30)
        res = (r.returncode == 0 and b"ok" in r.stdout,
               r.stderr.decode("utf-8", "replace")[-300:] or f"exit code {r.returncode}")
    except (ConfigError, OSError, subprocess.TimeoutExpired) as exc:
        res = (False, str(exc))
    _PROBE.append((res[0], "" if res[0] else res[1]))
    return _PROBE[0]
