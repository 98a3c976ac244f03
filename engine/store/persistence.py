"""Durable, atomic checkpoints of the experience store (Arrow/Parquet + manifest).

Directory layout::

    DIR/CURRENT              name of the current checkpoint folder (one line)
    DIR/ckpt-000007/         a complete checkpoint
        manifest.json        format, schema version, parameters, row counts,
                             size and sha256 of every file below
        nodes.parquet        id, parent, depth, key (uint64), text
        experiences.parquet  eid, path_1..path_L, q_<horizon>..., recall, hit, created
        ledger.parquet       the delayed-feedback ledger (engine.store.ledger)
        extras/NAME          artifacts written by ``extras`` callbacks (e.g. an hnswlib index)

The tables loop over the column declarations of :mod:`engine.store.columns`
(``NODE_PERSISTED``, ``EXPERIENCE_PERSISTED``) and go through the store's
persistence interface (``persisted_*``, ``from_persisted``); this module never
touches the store's private arrays.

A save holds an exclusive ``flock`` on ``DIR/.lock`` (a second concurrent
saver gets :class:`PersistenceError`), writes everything into ``DIR/.staging-*``, fsyncs every file and the
folder, renames the folder to ``ckpt-N`` (atomic), fsyncs ``DIR``, then swaps
the ``CURRENT`` pointer (atomic) and fsyncs again, all through :mod:`engine.atomic_io`. ``CURRENT`` always
names a complete checkpoint, so a crash at any stage leaves the previous
checkpoint loadable; leftovers of an interrupted save are removed by the next
save. The two newest checkpoints are kept (the files of a loaded store's
``extra_paths`` stay valid until the second save after the load).

Loading verifies the manifest, every checksum and size, the schemas and the
tree's consistency before building a new store; on any problem it raises
:class:`PersistenceError` and touches nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from engine import atomic_io
from engine.atomic_io import sha256_file  # noqa: F401  (re-exported: tests reseal manifests with it)
from engine.errors import EngineError, PersistenceError
from engine.store import columns as C
from engine.store.ledger import LEDGER_COLUMNS
from engine.store.reader import horizon_names

# 1-D experience columns that checkpoints written before they existed lack: their value on load
_DEFAULTS = {"external_id": lambda n: np.arange(n, dtype=np.int64),  # external id = the row
             "active": lambda n: np.ones(n, dtype=bool),  # no merges
             "merged_into": lambda n: np.full(n, -1, dtype=np.int64)}

FORMAT = "toe-experience-store"
SCHEMA_VERSION = 1
CURRENT = "CURRENT"
MANIFEST = "manifest.json"
LOCK = ".lock"  # flock'ed by a save in progress (released by the OS if the saver dies)
KEEP = 2
_CKPT = re.compile(r"^ckpt-(\d{6,})$")
_EXTRA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# Test hook: called with the stage name during a save ("tables", "extras", "manifest",
# "fsync", "rename", "current", "cleanup"). Tests make it raise or kill the process;
# the environment variable TOE_STORE_FAULT=<stage> makes a save SIGKILL itself there.
fault_hook: Callable[[str], None] | None = None


def _stage(name: str) -> None:
    if os.environ.get("TOE_STORE_FAULT") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if fault_hook is not None:
        fault_hook(name)


def _current_name(directory: Path) -> str | None:
    cur = directory / CURRENT
    text = atomic_io.read_pointer(cur)
    if text is None:
        return None
    name = text.strip()
    if not _CKPT.match(name):
        raise PersistenceError(f"{cur} does not name a checkpoint folder (got {name[:60]!r})")
    return name


def _is_foreign(directory: Path) -> bool:
    for p in directory.iterdir():
        if (p.name in (CURRENT, LOCK) or _CKPT.match(p.name) or p.name.startswith(".staging-")
                or p.name.startswith(f".{CURRENT}.")):
            continue
        return True
    return False


# --- tables ---------------------------------------------------------------------------------
def _column_table(id_name: str, fields: Mapping[str, np.ndarray], names, depth: int, horizons):
    """A pyarrow table: ``id_name`` 0..n-1, then each field of ``names`` as its file column(s)."""
    import pyarrow as pa

    n = int(np.shape(fields[names[0]])[0])
    cols = {id_name: pa.array(np.arange(n, dtype=np.int64))}
    for name in names:
        dtype, width = C.field_decl(name)
        arr = np.asarray(fields[name])
        for j, col in enumerate(C.file_columns(name, depth, horizons)):
            part = arr if width is None else arr[:, j]
            cols[col] = pa.array(np.ascontiguousarray(part, dtype=dtype))
    return pa.table(cols)


def _node_table(store):
    import pyarrow as pa

    columns, offsets, text = store.persisted_nodes()
    table = _column_table("id", columns, C.NODE_PERSISTED, store.depth, store.horizons)
    n = offsets.shape[0] - 1
    texts = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(text)))
    return table.append_column("text", texts)


def _experience_table(store):
    return _column_table("eid", store.persisted_experiences(), C.EXPERIENCE_PERSISTED, store.depth, store.horizons)


def _ledger_table(ledger):
    import pyarrow as pa

    return pa.table({k: pa.array(np.ascontiguousarray(v)) for k, v in ledger.columns().items()})


def _file_dtypes(names, depth: int, horizons) -> dict[str, str]:
    return {col: C.field_decl(name)[0] for name in names for col in C.file_columns(name, depth, horizons)}


def _fields(table: Mapping[str, np.ndarray], names, depth: int, horizons, rows: int) -> dict[str, np.ndarray]:
    """Inverse of :func:`_column_table`: the fields ``names`` from the file columns read."""
    out = {}
    for name in names:
        dtype, width = C.field_decl(name)
        cols = C.file_columns(name, depth, horizons)
        if width is None:
            out[name] = table[cols[0]]
        else:
            out[name] = np.stack([table[c] for c in cols], axis=1) if rows else np.zeros((0, len(cols)), dtype)
    return out


class _SaveLock:
    """Exclusive ``flock`` on ``DIR/.lock`` so two savers never interleave (no-op without fcntl)."""

    def __init__(self, directory: Path):
        self.path = directory / LOCK
        self.fd = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            self.fd = None
            raise PersistenceError(f"another process is saving into {self.path.parent} right now") from exc
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock
        return False


def save_store(store, directory, extras: Mapping[str, Callable[[Path], None]] | None = None) -> Path:
    """Write an atomic checkpoint of ``store`` (and its ledger and ``extras``) into ``directory``."""
    directory = Path(directory)
    extras = dict(extras or {})
    for name, fn in extras.items():
        if not isinstance(name, str) or not _EXTRA_NAME.match(name):
            raise PersistenceError(f"extras name {name!r} must be a plain file name ([A-Za-z0-9._-], no folders)")
        if not callable(fn):
            raise PersistenceError(f"extras[{name!r}] must be a callable writer(path), got {type(fn).__name__}")
    if directory.exists() and not directory.is_dir():
        raise PersistenceError(f"store directory {directory} exists and is not a folder")
    directory.mkdir(parents=True, exist_ok=True)
    if _is_foreign(directory):
        raise PersistenceError(
            f"{directory} holds files that are not store checkpoints; refusing to write a store there")
    with _SaveLock(directory):
        return _save_locked(store, directory, extras)


def _save_locked(store, directory: Path, extras) -> Path:
    import pyarrow.parquet as pq

    cur = _current_name(directory)
    existing = [int(m.group(1)) for p in directory.iterdir() if (m := _CKPT.match(p.name))]
    seq = max(existing + [0]) + 1
    name = f"ckpt-{seq:06d}"
    staging = directory / f".staging-{name}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        files = {
            "nodes.parquet": _node_table(store),
            "experiences.parquet": _experience_table(store),
            "ledger.parquet": _ledger_table(store.ledger),
        }
        for fname, table in files.items():
            pq.write_table(table, staging / fname)
        _stage("tables")
        if extras:
            (staging / "extras").mkdir()
            for ename, fn in extras.items():
                target = staging / "extras" / ename
                fn(target)
                if not target.is_file():
                    raise PersistenceError(f"extras writer {ename!r} did not write a file at {target}")
        _stage("extras")
        listing = list(files) + [f"extras/{e}" for e in extras]
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "params": store.persisted_params(),
            "rows": {"nodes": store.n_nodes, "experiences": store.n_experiences, "ledger": len(store.ledger)},
            "files": atomic_io.file_digests(staging, listing),
            "extras": list(extras),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
        _stage("manifest")
        atomic_io.fsync_tree(staging)
        _stage("fsync")
        atomic_io.publish_dir(staging, directory / name)
        _stage("rename")
        atomic_io.swap_pointer(directory / CURRENT, name + "\n")
        _stage("current")
    except BaseException:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        raise
    # cleanup: stale staging folders and all but the KEEP newest checkpoints
    keep = {name}
    if cur is not None:
        keep.add(cur)
    ckpts = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := _CKPT.match(p.name)))
    keep |= {p.name for _, p in ckpts[-KEEP:]}
    for _, p in ckpts:
        if p.name not in keep:
            shutil.rmtree(p, ignore_errors=True)
    for p in directory.iterdir():
        if p.name.startswith(".staging-") or atomic_io.is_temp_name(p.name, of=CURRENT):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    _stage("cleanup")
    return directory / name


# --- loading ------------------------------------------------------------------------------
def checkpoint_dir(directory) -> Path:
    """The folder of the current checkpoint of ``directory`` (or ``directory`` itself if it is one)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PersistenceError(f"store directory {directory} does not exist")
    name = _current_name(directory)
    if name is not None:
        ck = directory / name
        if not ck.is_dir():
            raise PersistenceError(f"{directory / CURRENT} names {name}, which does not exist")
        return ck
    if (directory / MANIFEST).is_file():
        return directory
    raise PersistenceError(f"{directory} is not a store checkpoint (no {CURRENT} or {MANIFEST} file)")


def read_manifest(ck: Path) -> dict:
    try:
        manifest = json.loads((ck / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise PersistenceError(f"{ck / MANIFEST} is missing") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PersistenceError(f"{ck / MANIFEST} is not valid JSON (truncated or corrupted): {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise PersistenceError(f"{ck / MANIFEST} is not a {FORMAT} manifest (format={got!r})")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise PersistenceError(
            f"{ck / MANIFEST} has schema_version {manifest.get('schema_version')!r}; this build reads {SCHEMA_VERSION}")
    for key in ("params", "rows", "files"):
        if not isinstance(manifest.get(key), dict):
            raise PersistenceError(f"{ck / MANIFEST} lacks the {key!r} section")
    for f in ("nodes.parquet", "experiences.parquet", "ledger.parquet"):
        if f not in manifest["files"]:
            raise PersistenceError(f"{ck / MANIFEST} does not list {f}")
    return manifest


def _read_table(path: Path, columns: dict[str, str], rows: int):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise PersistenceError(f"{path} is not a readable Parquet file: {exc}") from exc
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise PersistenceError(f"{path} lacks column(s) {', '.join(missing)}")
    if table.num_rows != rows:
        raise PersistenceError(f"{path} has {table.num_rows} rows, the manifest says {rows}")
    out = {}
    for c, dt in columns.items():
        col = table.column(c)
        if dt == "str":
            out[c] = col
            continue
        try:
            arr = col.to_numpy()
        except (pa.ArrowException, ValueError) as exc:
            raise PersistenceError(f"{path}: column {c} cannot be read: {exc}") from exc
        if arr.dtype != np.dtype(dt):
            raise PersistenceError(f"{path}: column {c} has dtype {arr.dtype}, expected {np.dtype(dt)}")
        out[c] = np.ascontiguousarray(arr)
    return out


def load_store(directory, build: Callable[..., object]):
    """Load the current checkpoint of ``directory`` with ``build`` (``ExperienceStore.from_persisted``).

    ``build(params, nodes, text_offsets, text, experiences, ledger)`` gets the
    columns read and checked here and returns the store; its errors become
    :class:`PersistenceError` naming the checkpoint.
    """
    try:
        return _load(directory, build)
    except PersistenceError:
        raise
    except EngineError as exc:
        raise PersistenceError(f"checkpoint in {directory} is inconsistent: {exc}") from exc


def _load(directory, build):
    import pyarrow as pa

    from engine.errors import StoreError

    ck = checkpoint_dir(directory)
    manifest = read_manifest(ck)
    atomic_io.verify_digests(ck, manifest["files"])
    p, rows = manifest["params"], manifest["rows"]
    try:
        depth, horizons = int(p["depth"]), horizon_names(p["horizons"])
        n_nodes, n_exp, n_led = int(rows["nodes"]), int(rows["experiences"]), int(rows["ledger"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PersistenceError(f"{ck / MANIFEST} has bad parameters: {exc}") from exc
    nodes = _read_table(ck / "nodes.parquet",
                        {"id": "i8", **_file_dtypes(C.NODE_PERSISTED, depth, horizons), "text": "str"}, n_nodes)
    import pyarrow.parquet as pq

    try:
        present = set(pq.read_schema(ck / "experiences.parquet").names)
    except (pa.ArrowException, OSError) as exc:
        raise PersistenceError(f"{ck / 'experiences.parquet'} is not a readable Parquet file: {exc}") from exc
    want = {c: t for c, t in {"eid": "i8", **_file_dtypes(C.EXPERIENCE_PERSISTED, depth, horizons)}.items()
            if c in present or c not in _DEFAULTS}
    exps = _read_table(ck / "experiences.parquet", want, n_exp)
    for c, default in _DEFAULTS.items():  # a checkpoint written before the column existed
        exps.setdefault(c, default(n_exp))
    led = _read_table(ck / "ledger.parquet", dict(LEDGER_COLUMNS), n_led)
    if n_nodes < 1 or not np.array_equal(nodes["id"], np.arange(n_nodes)):
        raise PersistenceError(f"checkpoint {ck}: node ids are not 0..n-1")
    if not np.array_equal(exps["eid"], np.arange(n_exp)):
        raise PersistenceError(f"checkpoint {ck}: experience ids are not 0..n-1")
    text = nodes.pop("text")
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    if not pa.types.is_large_string(text.type):
        text = text.cast(pa.large_string())
    _, offs_buf, data_buf = text.buffers()
    offs = np.frombuffer(offs_buf, dtype=np.int64)[text.offset : text.offset + n_nodes + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    base = int(offs[0])
    text_data = data[base : int(offs[-1])]
    try:
        store = build(p, _fields(nodes, C.NODE_PERSISTED, depth, horizons, n_nodes), offs - base, text_data,
                      _fields(exps, C.EXPERIENCE_PERSISTED, depth, horizons, n_exp), led)
    except StoreError as exc:
        raise PersistenceError(f"checkpoint {ck}: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise PersistenceError(f"{ck / MANIFEST} has bad parameters: {exc}") from exc
    store.extra_paths = {e: ck / "extras" / e for e in manifest.get("extras", [])}
    return store
