"""Atomic file I/O: the one mechanism every durable writer of the engine uses.

* :func:`atomic_writer` / :func:`write_bytes` / :func:`write_text`: one file.
  The data goes to a temporary file in the target's folder, is flushed and
  fsynced, renamed over the target (``os.replace``, atomic on POSIX) and the
  folder is fsynced, so a reader (or a restart after a crash) sees either the
  old file or the whole new one. If the writer raises, the temporary file is
  removed and the old file is left untouched.
* Targets that are not regular files (``/dev/stdout``, ``/dev/null``, a FIFO,
  a terminal) are **streamed**: opened and written in place, never renamed
  over (a rename would replace the device node or pipe with a regular file).
  ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and ``/proc/*/fd/N`` are
  always streams, even when the descriptor behind them is a redirected
  regular file (replacing that file would detach it from the shell's
  descriptor); this process's own descriptors are written through a
  duplicate of the descriptor, so output stays in order with ``print``. A stream has no rollback: a writer that fails mid-way leaves
  what it already wrote.
* :func:`fsync_tree` + :func:`publish_dir`: a whole folder, staged under a
  temporary name and renamed into place (checkpoints).
* :func:`swap_pointer` / :func:`read_pointer`: a small pointer file
  (``LATEST``, ``CURRENT``) naming the current checkpoint, replaced
  atomically; it is the commit point of a multi-file checkpoint.
* :func:`sha256_file`, :func:`file_digests`, :func:`verify_digests`: the
  checksum manifest (``{name: {"sha256": hex, "bytes": n}}``) that lets a
  loader refuse a truncated or corrupted file.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator, Mapping

from engine.errors import InputError, PersistenceError

# Paths that name a file descriptor of a process: writing them must reach that descriptor.
_FD_PATH = re.compile(r"^/(dev/(stdout|stderr|fd/\d+)|proc/(self|thread-self|\d+)/fd/\d+)$")
_OWN_FD = re.compile(r"^/(dev/(?P<std>stdout|stderr)|dev/fd/(?P<n>\d+)|proc/(self|thread-self)/fd/(?P<m>\d+))$")


# --- durability primitives --------------------------------------------------------------------
def fsync_file(path: str | Path) -> None:
    """Flush one file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Flush a folder's entry table, so a rename inside it survives a crash."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file and every folder under ``root`` (``root`` included)."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fsync_file(Path(dirpath) / name)
        fsync_dir(dirpath)


# --- one file ---------------------------------------------------------------------------------
def is_stream(path: str | Path) -> bool:
    """True when ``path`` must be written in place: an existing non-regular file or a descriptor path."""
    p = Path(path)
    if _FD_PATH.match(str(p.absolute())):
        return True
    try:
        st = os.stat(p)  # follows symlinks: /dev/stdout -> /proc/self/fd/1 -> pipe or tty
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"cannot write {str(p)!r}: it is a folder, expected a file path")
    return not stat.S_ISREG(st.st_mode)


@contextmanager
def atomic_writer(path: str | Path, mode: str = "wb", *, encoding: str | None = None,
                  newline: str | None = None) -> Iterator[IO]:
    """Open ``path`` for writing so it is replaced atomically when the ``with`` block ends.

    ``mode`` is ``"wb"`` or ``"w"`` (text, ``encoding`` defaults to UTF-8). On a
    regular or missing target the file object writes a temporary file beside
    it (``.NAME.XXXX.tmp``), committed only if the block exits normally; on an
    exception the temporary file is removed and the target is unchanged. A
    stream target (:func:`is_stream`) is opened and written in place. A
    symlink to a regular file is followed: its target is replaced, the link kept.
    """
    if mode not in ("wb", "w"):
        raise InputError(f"atomic_writer mode must be 'wb' or 'w', got {mode!r}")
    if mode == "w" and encoding is None:
        encoding = "utf-8"
    kwargs = {} if mode == "wb" else {"encoding": encoding, "newline": newline}
    path = Path(path)
    if is_stream(path):
        with _open_stream(path, mode, kwargs) as fh:
            yield fh
            fh.flush()
        return
    target = Path(os.path.realpath(path))
    folder = target.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            os.fchmod(fh.fileno(), _new_file_mode(target))  # mkstemp makes 0600; keep what open() would give
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(folder)


def _open_stream(path: Path, mode: str, kwargs: dict) -> IO:
    """A file object writing ``path`` in place. A descriptor of this process (``/dev/stdout``,
    ``/dev/fd/N``) is duplicated rather than reopened: reopening a redirected regular file would
    truncate it and write at a second, independent offset."""
    m = _OWN_FD.match(str(path.absolute()))
    if m is None:
        return open(path, mode, **kwargs)
    fd = {"stdout": 1, "stderr": 2}[m["std"]] if m["std"] else int(m["n"] or m["m"])
    if fd in (1, 2):  # what Python buffered for that descriptor goes out first
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    return os.fdopen(os.dup(fd), mode, **kwargs)


def _new_file_mode(target: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Atomically write ``data`` to ``path`` (streamed when ``path`` is a device or FIFO)."""
    with atomic_writer(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Atomically write ``text`` to ``path`` (streamed when ``path`` is a device or FIFO)."""
    with atomic_writer(path, "w", encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


# --- folders and pointers ---------------------------------------------------------------------
def publish_dir(staging: str | Path, final: str | Path) -> Path:
    """Rename the (already fsynced) folder ``staging`` to ``final`` and fsync their parent.

    ``final`` must not exist (a leftover of an interrupted commit is the caller's to remove).
    """
    staging, final = Path(staging), Path(final)
    os.rename(staging, final)
    fsync_dir(final.parent)
    return final


def swap_pointer(pointer: str | Path, value: str) -> None:
    """Atomically make the pointer file ``pointer`` hold ``value`` (the commit point of a checkpoint)."""
    write_text(pointer, value)


def read_pointer(pointer: str | Path) -> str | None:
    """The text of pointer file ``pointer``, or None when there is none."""
    p = Path(pointer)
    if not p.is_file():
        return None
    return p.read_text(encoding="utf-8", errors="replace")


def is_temp_name(name: str, of: str | None = None) -> bool:
    """True for a temporary file :func:`atomic_writer` leaves behind when killed (of target ``of``)."""
    prefix = "." if of is None else f".{of}."
    return name.startswith(prefix) and name.endswith(".tmp")


# --- checksum manifests -----------------------------------------------------------------------
def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_digests(root: str | Path, names: Iterable[str]) -> dict[str, dict]:
    """``{name: {"sha256": hex, "bytes": size}}`` of files ``root/name`` (the manifest's ``files``)."""
    root = Path(root)
    return {n: {"sha256": sha256_file(root / n), "bytes": (root / n).stat().st_size} for n in names}


def verify_digests(root: str | Path, files: Mapping[str, Mapping], what: str = "checkpoint file") -> None:
    """Check every ``root/name`` against its manifest entry; raise :class:`PersistenceError` on any mismatch.

    ``what`` names the files in the messages ("checkpoint file", "precompute table"...).
    """
    root = Path(root)
    for name, meta in files.items():
        if not isinstance(meta, Mapping) or ".." in Path(name).parts or Path(name).is_absolute():
            raise PersistenceError(f"manifest entry {name!r} is malformed")
        p = root / name
        if not p.is_file():
            raise PersistenceError(f"{what} {p} is missing")
        size = p.stat().st_size
        if size != meta.get("bytes"):
            raise PersistenceError(f"{what} {p} has {size} bytes, the manifest says {meta.get('bytes')} (truncated?)")
        if sha256_file(p) != meta.get("sha256"):
            raise PersistenceError(f"{what} {p} does not match its sha256 checksum (corrupted)")


__all__ = [
    "atomic_writer", "file_digests", "fsync_dir", "fsync_file", "fsync_tree", "is_stream", "is_temp_name",
    "publish_dir", "read_pointer", "sha256_file", "swap_pointer", "verify_digests", "write_bytes", "write_text",
]
