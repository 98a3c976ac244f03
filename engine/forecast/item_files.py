"""Reading and writing the files of a MemTool item folder without trusting them.

An item folder (``<workspace>/<qid>/turn<t>_item<k>/``) is written by the
engine only: ``raw_data.json`` before the first call, and after each sandboxed
call the regular files the tool left in its private ``/item`` (see
``sandbox``). Every read still treats the folder as hostile: a name is one
path component, the file is opened relative to the folder's descriptor with
``O_NOFOLLOW | O_NONBLOCK`` (a symlink fails, a FIFO never blocks), ``fstat``
must show a regular file with one link and a size under the cap, and the
opened file's real path must lie inside the folder. Anything else raises
:class:`UnsafeItemFile` naming the file and the reason, which callers record
in the call log.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from engine.errors import InputError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class UnsafeItemFile(InputError):
    """An item-folder entry that is not a plain regular file of the folder (symlink, FIFO, device, ...)."""


def check_name(name: str) -> str:
    """A file name of the item folder: one component of [A-Za-z0-9_.-], no leading dot, at most 128 chars."""
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
        raise UnsafeItemFile(f"item file name {name!r} is not a plain file name ([A-Za-z0-9_.-], no '/', "
                             f"no leading dot, at most 128 characters)")
    return name


def kind_of(mode: int) -> str:
    """Human name of a file type from ``st_mode``."""
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "unknown file type"


def _open_dir(folder: Path) -> int:
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def read_item_file(folder: str | Path, name: str, max_bytes: int) -> bytes:
    """The bytes of ``folder/name`` if it is a regular, singly linked file inside ``folder`` of at most ``max_bytes``."""
    check_name(name)
    folder = Path(folder)
    try:
        dfd = _open_dir(folder)
    except OSError as exc:
        raise UnsafeItemFile(f"item folder {str(folder)!r} cannot be opened as a folder ({exc.strerror})") from exc
    try:
        try:
            st = os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise UnsafeItemFile(f"{name}: cannot be examined ({exc.strerror})") from exc
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeItemFile(f"{name}: refused, it is a {kind_of(st.st_mode)}, not a regular file")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            raise UnsafeItemFile(f"{name}: refused, cannot be opened without following links ({exc.strerror})") from exc
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                raise UnsafeItemFile(f"{name}: refused, it changed between lstat and open")
            if fst.st_nlink != 1:
                raise UnsafeItemFile(f"{name}: refused, it has {fst.st_nlink} hard links (a link to another file)")
            if fst.st_size > max_bytes:
                raise UnsafeItemFile(f"{name}: refused, {fst.st_size} bytes exceeds the cap of {max_bytes}")
            real = os.path.realpath(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else None
            if real is not None and os.path.dirname(real) != os.path.realpath(folder):
                raise UnsafeItemFile(f"{name}: refused, its real path {real!r} is outside the item folder")
            chunks, left = [], max_bytes + 1
            while left > 0:
                b = os.read(fd, min(left, 1 << 20))
                if not b:
                    break
                chunks.append(b)
                left -= len(b)
            data = b"".join(chunks)
            if len(data) > max_bytes:
                raise UnsafeItemFile(f"{name}: refused, it grew past the cap of {max_bytes} bytes while read")
            return data
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def read_item_text(folder: str | Path, name: str, max_bytes: int) -> str:
    return read_item_file(folder, name, max_bytes).decode("utf-8", "replace")


def list_item_files(folder: str | Path) -> tuple[dict[str, int], dict[str, str]]:
    """(regular files -> size, refused entries -> reason) of an item folder, examined with ``lstat`` only."""
    files, refused = {}, {}
    with os.scandir(folder) as it:
        for e in it:
            try:
                check_name(e.name)
                st = e.stat(follow_symlinks=False)
            except (UnsafeItemFile, OSError) as exc:
                refused[e.name] = str(exc)
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                files[e.name] = st.st_size
            else:
                refused[e.name] = f"a {kind_of(st.st_mode)}" + (f" with {st.st_nlink} links" if stat.S_ISREG(st.st_mode) else "")
    return files, refused


def write_item_file(folder: str | Path, name: str, data: bytes) -> None:
    """Write ``folder/name`` atomically (temporary file, fsync, rename over the name, never through a link)."""
    check_name(name)
    dfd = _open_dir(Path(folder))
    tmp = f".{name}.tmp-{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    finally:
        os.close(dfd)


def remove_item_file(folder: str | Path, name: str) -> None:
    """Remove one entry of the item folder (never following a link)."""
    check_name(name)
    dfd = _open_dir(Path(folder))
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)
