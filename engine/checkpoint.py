"""Atomic per-round checkpoints: method state, round cursor, applied episode ids, results.

Layout of a checkpoint folder (one per ``executor.run``)::

    LATEST                   {"dir": "ckpt-000007", "fingerprint": ...}  (replaced atomically)
    ckpt-000007/             7 rounds applied
        manifest.json        fingerprint, rounds_done, episodes_done, shards; the size and sha256 of every
                             file of the checkpoint and of every results file it lists
        applied.npy          i8[episodes_done] ids of the applied episodes, in order
        state/               Method.save_state (or state-0/, state-1/ ... one per store shard)
    results/round-000007.data the EpisodeResults of the rounds since the previous checkpoint
                             (rounds are numbered from 1; the manifest lists the files to read)

A round commits in this order (every step through :mod:`engine.atomic_io`): its
results file (temp file, fsync, rename), then the staging folder
``ckpt-000007.staging`` (state written by the store owner, then manifest and
ids, every file and folder fsynced), renamed to ``ckpt-000007``, then the
``LATEST`` pointer is swapped (temp file, fsync, ``os.replace``, fsync of the
folder). A driver killed at any point leaves ``LATEST`` naming a complete
checkpoint; anything newer is ignored and overwritten on resume.

On resume every file the manifest lists is checked against its size and sha256 before it is read:
a flipped byte or a replaced file is refused by name. Every file is data, never code: round
results and a method state without its own hooks are written by :mod:`engine.codec` (typed
JSON plus array buffers, read without running anything), the methods' own states are Arrow,
NumPy (``allow_pickle=False``), JSON or that codec. A checkpoint of an earlier format (1: no
checksums; 2: pickled results) is refused with the way to restart.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine import atomic_io, codec
from engine.errors import PersistenceError
from engine.rounds import Episode, EpisodeResult

FORMAT = 3  # 3: data files only; 2: pickled results, 1: no checksums (both refused)
_METHOD_STATE = "method_state.data"


def fingerprint(method_name: str, episodes: Sequence[Episode], round_size: int | Sequence[int], shards: int = 1,
                run_key: str = "") -> str:
    """A hash of what makes two runs the same run: method, episodes, round size (or plan), shards, ``run_key``.

    ``run_key`` is the caller's hash of anything else that changes results (the config).
    """
    h = hashlib.sha256()
    plan = int(round_size) if isinstance(round_size, (int, np.integer)) else [int(x) for x in round_size]
    h.update(json.dumps([FORMAT, method_name, plan, int(shards), run_key]).encode())
    for e in episodes:
        payload = repr(e.payload)
        if re.search(r" at 0x[0-9a-fA-F]+", payload):  # default object repr: differs per process
            payload = type(e.payload).__qualname__
        h.update(repr((e.episode_id, e.seed, e.phase, payload)).encode())
    return h.hexdigest()[:32]


def save_method_state(method, directory: Path) -> None:
    """``method.save_state(directory)`` if it has one, else its ``__dict__`` as a data file (:mod:`engine.codec`),
    less the attributes it names in ``context_attrs`` (what the method's config rebuilds, such as a checker
    function: they are never written and stay as the live method built from the same config has them)."""
    directory.mkdir(parents=True, exist_ok=True)
    if hasattr(method, "save_state"):
        method.save_state(directory)
    else:
        skip = set(getattr(method, "context_attrs", ()))
        try:
            codec.write(directory / _METHOD_STATE, {k: v for k, v in vars(method).items() if k not in skip})
        except TypeError as exc:
            raise PersistenceError(f"{type(method).__name__} cannot be checkpointed: {exc} (or give the method "
                                   f"save_state/load_state)") from None


def load_method_state(method, directory: Path) -> None:
    """Inverse of :func:`save_method_state` into a method built from the same config."""
    if not directory.is_dir():
        raise PersistenceError(f"checkpoint state folder {str(directory)!r} does not exist")
    if hasattr(method, "load_state"):
        method.load_state(directory)
        return
    path = directory / _METHOD_STATE
    if not path.is_file():
        raise PersistenceError(
            f"checkpoint state {str(directory)!r} has no {_METHOD_STATE}; it was written by a method "
            f"with save_state(), but {type(method).__name__} has no load_state()"
        )
    state = codec.read(path, live=vars(method))  # embedders and other context come from the live method
    if not isinstance(state, dict):
        raise PersistenceError(f"checkpoint state {str(path)!r} holds a {type(state).__name__}, not a method's state")
    vars(method).update(state)


@dataclass(frozen=True)
class Cursor:
    """Where a run stands: ``rounds_done`` rounds and their ``episodes_done`` episodes applied."""

    rounds_done: int
    episodes_done: int
    shards: int
    path: Path  # the committed ckpt-NNNNNN folder
    applied: np.ndarray  # i8[episodes_done]
    result_files: tuple[str, ...] = ()

    def state_dir(self, shard: int | None = None) -> Path:
        return state_dir(self.path, shard)


def state_dir(base: Path, shard: int | None = None) -> Path:
    """The method-state folder inside checkpoint ``base`` (one per store shard when sharded)."""
    return base / ("state" if shard is None else f"state-{shard}")


class RoundCheckpoints:
    """The checkpoint folder of one run. See the module docstring for the layout and commit order."""

    def __init__(self, root: str | Path, fingerprint: str, shards: int = 1):
        self.root = Path(root)
        self.fingerprint = fingerprint
        self.shards = int(shards)
        self.result_files: list[str] = []
        self.result_digests: dict[str, dict] = {}  # name -> {"sha256", "bytes"} of every results file listed

    # -- reading ---------------------------------------------------------------------------------
    def latest(self) -> Cursor | None:
        """The last committed checkpoint, or None when the folder holds none."""
        text = atomic_io.read_pointer(self.root / "LATEST")
        if text is None:
            return None
        try:
            head = json.loads(text)
            path = self.root / head["dir"]
            manifest = json.loads((path / "manifest.json").read_text())
            applied = np.load(path / "applied.npy", allow_pickle=False)
        except (OSError, ValueError, KeyError) as exc:
            raise PersistenceError(f"checkpoint {str(self.root)!r} is unreadable: {exc}") from exc
        if manifest.get("format") != FORMAT:
            raise PersistenceError(
                f"checkpoint {str(path)!r} has format {manifest.get('format')!r}, expected {FORMAT} (format 1 "
                f"holds no checksums, format 2 pickles, which are not read); delete {str(self.root)!r} or run "
                f"with `--out NEW_FOLDER` to start over"
            )
        if manifest.get("fingerprint") != self.fingerprint:
            raise PersistenceError(
                f"checkpoint {str(self.root)!r} belongs to another run (method, episodes, round size, "
                f"store shards or config differ: fingerprint {manifest.get('fingerprint')!r}, this run "
                f"{self.fingerprint!r}); delete that folder, run with `--out NEW_FOLDER` (toe run) "
                f"or pass resume=False (Python: executor.run)"
            )
        if manifest["shards"] != self.shards:  # pragma: no cover - part of the fingerprint
            raise PersistenceError(f"checkpoint has {manifest['shards']} store shards, this run {self.shards}")
        if applied.dtype != np.int64 or applied.shape != (manifest["episodes_done"],):
            raise PersistenceError(
                f"checkpoint {str(path)!r}: applied.npy is {applied.dtype}{list(applied.shape)}, expected "
                f"int64[{manifest['episodes_done']}]"
            )
        files = tuple(manifest.get("result_files", ()))
        digests = manifest.get("result_digests")
        if not isinstance(digests, dict) or set(digests) != set(files) or not isinstance(manifest.get("files"), dict):
            raise PersistenceError(f"checkpoint {str(path)!r}: manifest.json lists no checksums for its files")
        atomic_io.verify_digests(path, manifest["files"])  # the state and applied.npy, before anything reads them
        self.result_files, self.result_digests = list(files), dict(digests)
        return Cursor(manifest["rounds_done"], manifest["episodes_done"], manifest["shards"], path, applied, files)

    def load_results(self, cursor: Cursor) -> list[EpisodeResult]:
        """The results of rounds 1..cursor.rounds_done, in episode order."""
        out: list[EpisodeResult] = []
        atomic_io.verify_digests(self.root / "results", {n: self.result_digests[n] for n in cursor.result_files},
                                 "checkpoint results file")  # before any byte of them is decoded
        for name in cursor.result_files:
            out.extend(_results_from(codec.read(self.root / "results" / name), self.root / "results" / name))
        ids = np.array([r.episode_id for r in out], dtype=np.int64)
        if not np.array_equal(ids, cursor.applied):
            raise PersistenceError(
                f"checkpoint {str(self.root)!r}: results hold episodes {ids[:8].tolist()}... but "
                f"applied.npy holds {cursor.applied[:8].tolist()}..."
            )
        return out

    # -- writing ---------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every checkpoint in the folder (a fresh run)."""
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        self.result_files, self.result_digests = [], {}

    def staging(self, rounds_done: int) -> Path:
        """A fresh, empty staging folder for the checkpoint after round ``rounds_done``."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"ckpt-{rounds_done:06d}.staging"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir()
        return path

    def commit(self, staging: Path, rounds_done: int, round_results: Sequence[EpisodeResult],
               applied: np.ndarray) -> Path:
        """Commit ``staging`` (already holding the method state) as the checkpoint after ``rounds_done``.

        ``round_results`` are the results of the rounds since the previous checkpoint.
        """
        results_dir = self.root / "results"
        results_dir.mkdir(exist_ok=True)
        name = f"round-{rounds_done:06d}.data"
        try:
            blob = codec.write(results_dir / name, [(r.episode_id, r.record, r.updates) for r in round_results])
        except TypeError as exc:
            raise PersistenceError(f"round {rounds_done}'s results cannot be checkpointed: {exc}") from None
        files = self.result_files + [name]
        digests = {**{n: self.result_digests[n] for n in self.result_files},
                   name: {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}}
        applied = np.ascontiguousarray(applied, dtype=np.int64)
        np.save(staging / "applied.npy", applied, allow_pickle=False)
        names = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        manifest = {"format": FORMAT, "fingerprint": self.fingerprint, "rounds_done": rounds_done,
                    "episodes_done": int(applied.shape[0]), "shards": self.shards, "result_files": files,
                    "result_digests": digests, "files": atomic_io.file_digests(staging, names)}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
        atomic_io.fsync_tree(staging)
        final = self.root / f"ckpt-{rounds_done:06d}"
        if final.exists():  # left by a driver killed between this rename and LATEST
            shutil.rmtree(final)
        atomic_io.publish_dir(staging, final)
        atomic_io.swap_pointer(self.root / "LATEST", json.dumps({"dir": final.name, "fingerprint": self.fingerprint}))
        self.result_files, self.result_digests = files, digests
        for old in self.root.glob("ckpt-*"):
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
        return final


def _results_from(rows, path: Path) -> list[EpisodeResult]:
    """The EpisodeResults a results file holds (``[(episode_id, record, updates), ...]``), checked."""
    ok = isinstance(rows, list) and all(
        isinstance(r, tuple) and len(r) == 3 and type(r[0]) is int and isinstance(r[1], dict)
        and isinstance(r[2], dict) and all(isinstance(v, np.ndarray) for v in r[2].values()) for r in rows)
    if not ok:
        raise PersistenceError(f"checkpoint results file {str(path)!r} does not hold (episode id, record, updates) rows")
    return [EpisodeResult(i, rec, upd) for i, rec, upd in rows]
