"""Controlled MemTool execution (paper B.7) under bubblewrap, hostile-code safe even when the engine is root.

Every call is one ``bwrap`` process; the threat model and which mechanism stops
what are in ``docs/forecast.md`` ("MemTool sandbox"). In short:

* **No privileges inside.** When the engine runs as root, ``bwrap`` itself is
  started as an unprivileged id (``sandbox_uid``, default 65534 "nobody",
  through ``Popen(user=, group=, extra_groups=[])``), so the sandbox is a user
  namespace mapped to a non-root id outside too; inside it runs as 65534:65534
  with every capability dropped (``--cap-drop ALL``), ``no_new_privs`` (set by
  bwrap), a new session, nested user namespaces disabled, and it dies with its
  parent (``--die-with-parent``; a private pid namespace takes every child with it).
* **Filesystem.** The root is bwrap's tmpfs remounted read-only, with
  read-only binds of ``/usr`` (and its ``/lib*``/``/bin`` links) and the
  interpreter's prefix; a fresh ``/proc`` of the sandbox's own pid namespace;
  ``/dev`` holds only null, zero, random and urandom. The tool and the runner
  are *copies* (``--ro-bind-data`` from memfds): the published tool file is
  never mounted. The item folder is a private tmpfs of ``max_item_mb`` (the
  outputs' only writable path): the engine copies the item's regular files in
  (``raw_data.json`` read-only), and after a successful call copies back only
  the regular, singly-linked files the tool left there (``item_files``): a file
  a tool writes in the item folder is its declared output. ``HOME`` and
  ``TMPDIR`` point to a second private tmpfs of the same size, ``/tmp``, which
  is never copied back: ``tempfile.mkstemp()`` junk, caches and scratch files
  end with the call. Symlinks, hard links, FIFOs and devices are
  refused with the reason in the call log; no host path is ever writable, so
  a tool cannot fill the host disk, and a tool that fills its tmpfs is
  reported as ``disk_quota`` and nothing it wrote is kept.
* **Resources.** ``prlimit`` on bwrap: address space, CPU seconds, size of any
  one file, open files, no core files; the runner lowers ``RLIMIT_NPROC``
  before loading the tool (the kernel counts it per user namespace, so it
  bounds this sandbox's processes and threads); the engine kills the sandbox
  on its wall time and when stdout/stderr or the result exceed their caps.
* **System calls.** A seccomp filter (``sandbox_filter``) through
  ``--seccomp FD`` where libseccomp is available; otherwise the run's log says
  that none is loaded (``sandbox_report``), or the run fails if
  ``require_filter = true``.
* **Network.** ``--unshare-all`` gives a private network namespace with a
  down loopback: neither the internet nor the host's 127.0.0.1 is reachable.

There is no unsandboxed fallback: :func:`require_sandbox` raises before any
LLM call when bwrap cannot start here. ``bwrap`` comes from Debian's
``bubblewrap`` package (scripts/setup.sh installs it).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import check
from engine.errors import ConfigError
from engine.forecast import item_files
from engine.forecast.sandbox_filter import build_filter

RUNNER = Path(__file__).with_name("_memtool_runner.py")
ITEM_MOUNT = "/item"
SCRATCH_MOUNT = "/tmp"  # HOME and TMPDIR inside: a private tmpfs, never copied back
INPUT_FILES = ("raw_data.json",)  # engine-written inputs: read-only inside the sandbox, never copied back
SANDBOX_DEVICES = ("null", "zero", "random", "urandom")
_QUOTA = "the tool filled its item folder ({} MB, sandbox.max_item_mb); nothing it wrote is kept"


class SandboxUnavailable(ConfigError):
    """bubblewrap cannot start an isolated, unprivileged process on this machine; MemTools cannot run."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call budget and identity of a MemTool (``[sandbox]``)."""

    timeout_s: float = 10.0
    memory_mb: int = 512  # RLIMIT_AS
    cpu_s: int = 10  # RLIMIT_CPU
    max_output_bytes: int = 200_000  # stdout + stderr read back
    max_file_mb: int = 16  # RLIMIT_FSIZE: the largest file the tool may write
    max_item_mb: int = 32  # the item folder's tmpfs: every byte the tool writes
    max_processes: int = 32  # RLIMIT_NPROC inside the sandbox's user namespace (processes + threads)
    max_open_files: int = 64  # RLIMIT_NOFILE
    max_item_files: int = 256  # files an item folder may hold after a call (more: the call's output is discarded)
    sandbox_uid: int = 65534  # the id bwrap runs as when the engine is root (and the id inside)
    python: str = ""  # interpreter inside; "" = the engine's base interpreter if the sandbox id can read it, else /usr/bin/python3
    require_filter: bool = False  # fail instead of running without a system-call filter

    def __post_init__(self):
        check(self.timeout_s > 0, f"sandbox.timeout_s must be > 0, got {self.timeout_s}")
        check(self.memory_mb >= 64, f"sandbox.memory_mb must be >= 64, got {self.memory_mb}")
        check(self.cpu_s >= 1, f"sandbox.cpu_s must be >= 1, got {self.cpu_s}")
        check(self.max_output_bytes >= 1024, f"sandbox.max_output_bytes must be >= 1024, got {self.max_output_bytes}")
        check(self.max_file_mb >= 1, f"sandbox.max_file_mb must be >= 1, got {self.max_file_mb}")
        check(self.max_item_mb >= 1, f"sandbox.max_item_mb must be >= 1, got {self.max_item_mb}")
        check(self.max_processes >= 4, f"sandbox.max_processes must be >= 4, got {self.max_processes}")
        check(self.max_open_files >= 16, f"sandbox.max_open_files must be >= 16, got {self.max_open_files}")
        check(1 <= self.max_item_files <= 4096,
              f"sandbox.max_item_files must be in [1, 4096], got {self.max_item_files}")
        check(0 < self.sandbox_uid < 2**31, f"sandbox.sandbox_uid must be a non-root id, got {self.sandbox_uid}")

    @property
    def item_bytes(self) -> int:
        return self.max_item_mb << 20

    @property
    def file_bytes(self) -> int:
        return min(self.max_file_mb, self.max_item_mb) << 20


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed call produced.

    ``status``: ok | error | timeout | output_limit | disk_quota | file_limit | crashed. ``refused`` maps an entry the
    tool left in its item folder to why it was not copied back (symlink, FIFO, hard link, ...).
    """

    status: str
    result: str = ""
    error: str = ""
    payload: dict | None = None
    wall_s: float = 0.0
    refused: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install the Debian package 'bubblewrap' "
                                 "(apt-get install -y bubblewrap) to run MemTools")
    return path


def _drops_privileges() -> bool:
    return os.geteuid() == 0


def _readable_by_other(path: str) -> bool:
    """Whether an unrelated unprivileged id can reach ``path`` (x on every folder above, r on the file)."""
    p = Path(path)
    try:
        for parent in reversed(p.parents):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        return bool(os.stat(p).st_mode & stat.S_IROTH)
    except OSError:
        return False


def _base_interpreter() -> str:
    exe = os.path.realpath(sys.executable)
    base = os.path.realpath(sys.base_prefix)
    if exe.startswith(base + os.sep) or exe.startswith("/usr/"):
        return exe
    return str(Path(base) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def python_executable(limits: SandboxLimits | None = None) -> str:
    """The interpreter the sandbox runs: ``sandbox.python``, else the base interpreter, else /usr/bin/python3."""
    limits = limits or SandboxLimits()
    if limits.python:
        exe = os.path.realpath(limits.python)
        if not os.path.isfile(exe):
            raise SandboxUnavailable(f"sandbox.python {limits.python!r} is not a file")
        return exe
    base = _base_interpreter()
    if not _drops_privileges() or _readable_by_other(base):
        return base
    for cand in (f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}", "/usr/bin/python3"):
        if os.path.isfile(cand):
            return os.path.realpath(cand)
    raise SandboxUnavailable(f"the engine's interpreter {base!r} is not readable by the sandbox id and there is no "
                             f"/usr/bin/python3; set sandbox.python to an interpreter every user can read")


def _system_binds(python: str) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for p in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    if not python.startswith("/usr/"):
        prefix = str(Path(python).parents[1])  # <prefix>/bin/pythonX.Y
        args += ["--ro-bind", prefix, prefix]
    return args


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)  # MFD_CLOEXEC: only pass_fds reach the child
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def build_command(python: str, limits: SandboxLimits, fds: dict, inputs: dict[str, int],
                  outputs: dict[str, int]) -> list[str]:
    """The bwrap command line; ``fds``: tool, runner, seccomp (or None); ``inputs``/``outputs``: name -> memfd."""
    uid = str(limits.sandbox_uid)
    cmd = [
        bwrap_path(), "--unshare-all", "--unshare-user", "--disable-userns", "--uid", uid, "--gid", uid,
        "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", SCRATCH_MOUNT, "--setenv", "TMPDIR", SCRATCH_MOUNT,
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONIOENCODING", "utf-8",
    ]
    if fds.get("seccomp") is not None:
        cmd += ["--seccomp", str(fds["seccomp"])]
    cmd += _system_binds(python)
    cmd += ["--proc", "/proc", "--dir", "/dev"]
    for dev in SANDBOX_DEVICES:
        cmd += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
    cmd += ["--perms", "0777", "--size", str(limits.item_bytes), "--tmpfs", ITEM_MOUNT]
    cmd += ["--perms", "0777", "--size", str(limits.item_bytes), "--tmpfs", SCRATCH_MOUNT]  # temporaries: dropped
    for name, fd in inputs.items():
        cmd += ["--ro-bind-data", str(fd), f"{ITEM_MOUNT}/{name}"]
    for name, fd in outputs.items():  # earlier calls' outputs: writable copies
        cmd += ["--perms", "0666", "--file", str(fd), f"{ITEM_MOUNT}/{name}"]
    cmd += ["--ro-bind-data", str(fds["tool"]), "/memtool/tool.py", "--ro-bind-data", str(fds["runner"]),
            "/memtool/runner.py", "--remount-ro", "/", "--chdir", ITEM_MOUNT,
            python, "-I", "-S", "-B", "/memtool/runner.py"]
    return cmd


def _rlimit_args(limits: SandboxLimits) -> list[str]:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        return []
    return [prlimit, f"--as={limits.memory_mb << 20}", f"--cpu={limits.cpu_s}", f"--fsize={limits.file_bytes}",
            f"--nofile={limits.max_open_files}", "--core=0", "--"]


def _preexec(limits: SandboxLimits):  # only where util-linux's prlimit is missing
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


class _Pump(threading.Thread):
    """Reads one pipe into memory up to ``cap`` bytes; past that it kills the sandbox."""

    def __init__(self, stream, cap: int, on_flood):
        super().__init__(daemon=True)
        self.stream, self.cap, self.on_flood = stream, cap, on_flood
        self.buf = bytearray()
        self.flooded = False

    def run(self):
        while chunk := self.stream.read(65536):
            if len(self.buf) + len(chunk) > self.cap:
                self.flooded = True
                self.on_flood()
                return
            self.buf += chunk


def _item_inputs(item_dir: Path, limits: SandboxLimits) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The host item folder's files: (read-only inputs, writable earlier outputs), each read safely."""
    names, refused = item_files.list_item_files(item_dir)
    if refused:
        name, why = next(iter(refused.items()))
        raise item_files.UnsafeItemFile(f"item folder {str(item_dir)!r}: entry {name!r} is {why}")
    inputs, outputs = {}, {}
    for name in sorted(names):
        data = item_files.read_item_file(item_dir, name, limits.item_bytes)
        (inputs if name in INPUT_FILES else outputs)[name] = data
    return inputs, outputs


def _copy_back(item_dir: Path, before: set[str], payload: dict, limits: SandboxLimits) -> tuple[str, dict]:
    """Validate the files the runner returned and mirror them into the host item folder.

    Returns ("", refused) or (why the whole result is discarded, refused). Nothing is written on a discard.
    """
    files, refused = payload.get("files") or {}, dict(payload.get("refused") or {})
    if len(files) + len(refused) > limits.max_item_files:
        return (f"the tool left {len(files) + len(refused)} entries in its item folder, over the "
                f"{limits.max_item_files} it may keep (sandbox.max_item_files); nothing it wrote is kept"), {}
    decoded, total = {}, 0
    for name, b64 in files.items():
        try:
            item_files.check_name(name)
            if name in INPUT_FILES:
                raise item_files.UnsafeItemFile(f"{name}: an input file cannot be replaced")
            data = base64.b64decode(b64, validate=True)
        except (item_files.UnsafeItemFile, binascii.Error, TypeError, ValueError) as exc:
            refused[str(name)[:130]] = str(exc)
            continue
        if len(data) > limits.file_bytes:
            refused[name] = f"{len(data)} bytes, over the cap of {limits.file_bytes}"
            continue
        decoded[name] = data
        total += len(data)
    if total >= limits.item_bytes:
        return _QUOTA.format(limits.max_item_mb), refused
    for name, data in decoded.items():
        item_files.write_item_file(item_dir, name, data)
    for name in before - set(decoded) - set(INPUT_FILES):
        item_files.remove_item_file(item_dir, name)  # deleted, or replaced by something refused
    return "", refused


MAX_RESULT_TOKENS = 200_000  # strings, containers, numbers and literals a result may hold (a real one: dozens)
_STR_MAP = "an object of text values"
_PAYLOAD_TYPES = {"ok": (bool,), "result": (str,), "error": (str,), "trace": (str,), "item_free_bytes": (int,),
                  "name": (str, type(None)), "all": (list,), "files": (dict,), "refused": (dict,),
                  "exports": (dict,), "spec": (dict, type(None))}


def parse_payload(raw: bytes) -> dict:
    """The runner's result, bounded before it is parsed and checked after: raises ValueError naming the fault.

    The result pipe is the tool's to write (a tool can forge it), so nothing in it is trusted: the number of
    JSON values is bounded first (a count of quotes, brackets and literals, and a hook on numbers), so the
    host's memory stays a small multiple of the result's bytes (the result cap bounds those) instead of
    one Python object per byte; nesting deeper than the parser's recursion limit is refused; then every known
    key must have its type, ``files`` and ``refused`` map text to text, ``exports`` names to booleans.
    """
    tokens = (raw.count(b'"') // 2 + raw.count(b"{") + raw.count(b"[") + raw.count(b"true") + raw.count(b"false")
              + raw.count(b"null"))
    if tokens > MAX_RESULT_TOKENS:
        raise ValueError(f"about {tokens} JSON values, over the {MAX_RESULT_TOKENS} a result may hold")
    numbers = [0]

    def number(text: str, kind=int):
        numbers[0] += 1
        if numbers[0] > MAX_RESULT_TOKENS:
            raise ValueError(f"over {MAX_RESULT_TOKENS} numbers")
        return kind(text)

    try:
        payload = json.loads(raw.decode("utf-8"), parse_int=number, parse_float=lambda t: number(t, float))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(payload, dict):
        raise ValueError(f"a {type(payload).__name__}, not an object")
    for key, types in _PAYLOAD_TYPES.items():
        if key in payload and (not isinstance(payload[key], types) or isinstance(payload[key], bool) and
                               bool not in types):
            raise ValueError(f"{key!r} is a {type(payload[key]).__name__}")
    for key in ("files", "refused"):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in (payload.get(key) or {}).items()):
            raise ValueError(f"{key!r} is not {_STR_MAP}")
    if not all(isinstance(v, (bool, type(None))) for v in (payload.get("exports") or {}).values()):
        raise ValueError("'exports' is not an object of booleans")
    if not all(isinstance(v, str) for v in payload.get("all") or []):
        raise ValueError("'all' is not a list of text")
    return payload


def _read_tool(path: Path, cap: int = 4 << 20) -> bytes:
    """The tool's source, from a regular file opened without following a final symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            raise OSError(f"not a regular file of at most {cap} bytes")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(cap)
    finally:
        os.close(fd)


def run_sandboxed(tool_file: str | Path, item_dir: str | Path, request: dict,
                  limits: SandboxLimits | None = None) -> SandboxResult:
    """Run the runner on ``tool_file`` with a private copy of ``item_dir``; never raises for tool misbehaviour.

    On ``ok`` the regular files the tool left are mirrored into ``item_dir``; on any other status the host
    folder is unchanged.
    """
    limits = limits or SandboxLimits()
    t0 = time.perf_counter()
    tool_file, item_dir = Path(tool_file), Path(item_dir)
    try:
        tool_src = _read_tool(tool_file)
    except OSError as exc:
        return SandboxResult("error", error=f"tool file {str(tool_file)!r} cannot be read ({exc.strerror or exc})")
    if not item_dir.is_dir() or item_dir.is_symlink():
        return SandboxResult("error", error=f"item_dir {str(item_dir)!r} is not a folder")
    try:
        inputs, outputs = _item_inputs(item_dir, limits)
    except (item_files.UnsafeItemFile, OSError) as exc:
        return SandboxResult("error", error=str(exc))
    python = python_executable(limits)
    program, why = build_filter()
    if program is None and limits.require_filter:
        raise SandboxUnavailable(f"sandbox.require_filter is true but {why}")
    if len(inputs) + len(outputs) > limits.max_item_files:
        return SandboxResult("file_limit", error=f"item folder {str(item_dir)!r} holds {len(inputs) + len(outputs)} "
                                                 f"files, over sandbox.max_item_files = {limits.max_item_files}")
    opened: list[int] = []

    def memfd(name: str, data: bytes) -> int:
        fd = _memfd(name, data)
        opened.append(fd)
        return fd

    try:
        fds = {"tool": memfd("memtool", tool_src), "runner": memfd("runner", RUNNER.read_bytes()),
               "seccomp": memfd("seccomp", program) if program is not None else None}
        in_fds = {n: memfd(n, d) for n, d in inputs.items()}
        out_fds = {n: memfd(n, d) for n, d in outputs.items()}
        result_r, result_w = os.pipe()
    except OSError as exc:  # e.g. no file descriptors left: nothing started, nothing kept open
        for fd in opened:
            os.close(fd)
        return SandboxResult("error", error=f"could not prepare the sandbox's files ({exc})")
    passed = [result_w, *opened]
    req = dict(request, result_fd=result_w, inputs=sorted(inputs), max_processes=limits.max_processes,
               max_file_bytes=limits.file_bytes)
    cmd = build_command(python, limits, fds, in_fds, out_fds)
    prl = _rlimit_args(limits)
    # bwrap's own processes (the sandbox's pid 1 among them) get no host environment: /proc/1/environ is visible inside
    kw: dict = {"pass_fds": passed, "start_new_session": True, "env": {"PATH": "/usr/bin:/bin"}}
    if _drops_privileges():
        kw.update(user=limits.sandbox_uid, group=limits.sandbox_uid, extra_groups=[])
    if not prl:
        kw["preexec_fn"] = _preexec(limits)
    try:
        proc = subprocess.Popen(prl + cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    except OSError as exc:
        os.close(result_r)
        return SandboxResult("error", error=f"bwrap could not start ({exc})")
    finally:
        for fd in passed:
            os.close(fd)
    result_cap = limits.item_bytes * 4 // 3 + (1 << 20)
    kill = lambda: _kill(proc)  # noqa: E731
    with os.fdopen(result_r, "rb") as result_stream:
        pumps = [_Pump(proc.stdout, limits.max_output_bytes, kill), _Pump(proc.stderr, limits.max_output_bytes, kill),
                 _Pump(result_stream, result_cap, kill)]
        for p in pumps:
            p.start()
        try:
            proc.stdin.write(json.dumps(req).encode("utf-8"))
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
        for p in pumps:
            p.join(timeout=5.0)
    wall = time.perf_counter() - t0
    if timed_out:
        return SandboxResult("timeout", error=f"killed after the {limits.timeout_s}s time limit", wall_s=wall)
    if pumps[0].flooded or pumps[1].flooded:
        return SandboxResult("output_limit", error=f"killed: output exceeded {limits.max_output_bytes} bytes",
                             wall_s=wall)
    if pumps[2].flooded:
        return SandboxResult("output_limit", error=f"killed: result exceeded {result_cap} bytes", wall_s=wall)
    raw, pumps[2].buf = bytes(pumps[2].buf), bytearray()
    if not raw:
        err = pumps[1].buf.decode("utf-8", "replace")[-600:]
        return SandboxResult("crashed", error=f"exit code {proc.returncode} without a result; stderr: {err}",
                             wall_s=wall)
    try:
        payload = parse_payload(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        return SandboxResult("crashed", error=f"unreadable result ({exc})", wall_s=wall)
    del raw
    try:
        return _outcome(payload, item_dir, outputs, limits, wall)
    except Exception as exc:  # noqa: BLE001 - the host never raises for what a tool returned
        return SandboxResult("crashed", error=f"result could not be used ({type(exc).__name__}: {exc})", wall_s=wall)


def _outcome(payload: dict, item_dir: Path, outputs: dict, limits: SandboxLimits, wall: float) -> SandboxResult:
    """The call's status from a checked payload; on ``ok`` the tool's files are mirrored into ``item_dir``."""
    free = payload.get("item_free_bytes")
    if isinstance(free, int) and free <= 0:
        return SandboxResult("disk_quota", error=_QUOTA.format(limits.max_item_mb), payload=payload, wall_s=wall,
                             refused=dict(payload.get("refused") or {}))
    if not payload.get("ok"):
        return SandboxResult("error", error=str(payload.get("error", "unknown error"))[:2000], payload=payload,
                             wall_s=wall, refused=dict(payload.get("refused") or {}))
    discard, refused = _copy_back(item_dir, set(outputs), payload, limits)
    if discard:
        status = "file_limit" if "max_item_files" in discard else "disk_quota"
        return SandboxResult(status, error=discard, payload=payload, wall_s=wall, refused=refused)
    return SandboxResult("ok", result=str(payload.get("result", "")), payload=payload, wall_s=wall, refused=refused)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


_PROBE_TOOL = ("TOOL_NAME = 'probe'\nTOOL_SPEC = {}\n"
               "def build_runner_kwargs(arguments, config, runtime_context):\n    return {}\n"
               "def run_tool():\n    return 'ok'\n")
_PROBE: list = []


def sandbox_available() -> tuple[bool, str]:
    """(True, "") when a real sandboxed call succeeds here (cached); else (False, why)."""
    if _PROBE:
        return _PROBE[0]
    import tempfile

    try:
        with tempfile.TemporaryDirectory(prefix="toe-sandbox-probe-") as tmp:
            tool = Path(tmp) / "probe.py"
            tool.write_text(_PROBE_TOOL, encoding="utf-8")
            item = Path(tmp) / "item"
            item.mkdir()
            res = run_sandboxed(tool, item, {"mode": "call", "arguments": {}, "runtime": {}},
                                SandboxLimits(timeout_s=30.0))
        out = (True, "") if res.ok and res.result == "ok" else (False, f"{res.status}: {res.error[-400:]}")
    except (ConfigError, OSError, subprocess.SubprocessError) as exc:
        out = (False, str(exc))
    _PROBE.append(out)
    return out


def require_sandbox() -> None:
    """Raise :class:`SandboxUnavailable` (before any LLM call) when MemTools cannot run sandboxed here."""
    ok, why = sandbox_available()
    if not ok:
        raise SandboxUnavailable(f"the MemTool sandbox cannot start on this machine ({why}); ForeDreamer never runs "
                                 f"tools unsandboxed: install bubblewrap and allow user namespaces "
                                 f"(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0)")


def sandbox_report(limits: SandboxLimits | None = None) -> dict:
    """What isolates a MemTool on this machine, for the run's log and ``summary.json``."""
    limits = limits or SandboxLimits()
    program, why = build_filter()
    return {
        "runs_as": f"uid {limits.sandbox_uid} (bwrap started as uid {limits.sandbox_uid})" if _drops_privileges()
        else f"uid {limits.sandbox_uid} inside, mapped to the engine's uid {os.geteuid()}",
        "syscall_filter": f"seccomp, {len(program) // 8} BPF instructions" if program is not None else why,
        "network": "private namespace (no interfaces up)",
        "item_folder": f"private tmpfs of {limits.max_item_mb} MB",
    }


def preflight(limits: SandboxLimits | None = None) -> dict:
    """Check the sandbox before any LLM call and log what isolates a tool here; returns :func:`sandbox_report`."""
    require_sandbox()
    report = sandbox_report(limits)
    print(report_line(report), file=sys.stderr, flush=True)
    return report


def report_line(report: dict) -> str:
    """One line for the run's log and text: ``MemTool sandbox: runs as: ...; syscall filter: ...``."""
    return "MemTool sandbox: " + "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in report.items())
