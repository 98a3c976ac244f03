"""Durability helpers shared by every atomic writer (store checkpoints, executor checkpoints)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_file(path: Path) -> None:
    """Flush one file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a directory entry table, so a rename inside it survives a crash."""
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
