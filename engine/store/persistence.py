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

A save holds an exclusive ``flock`` on ``DIR/.lock`` (a second concurrent
saver gets :class:`PersistenceError`), writes everything into ``DIR/.staging-*``, fsyncs every file and the
folder, renames the folder to ``ckpt-N`` (atomic), fsyncs ``DIR``, then swaps
``CURRENT`` with ``os.replace`` (atomic) and fsyncs again. ``CURRENT`` always
names a complete checkpoint, so a crash at any stage leaves the previous
checkpoint loadable; leftovers of an interrupted save are removed by the next
save. The two newest checkpoints are kept (the files of a loaded store's
``extra_paths`` stay valid until the second save after the load).

Loading verifies the manifest, every checksum and size, the schemas and the
tree's consistency before building a new store; on any problem it raises
:class:`PersistenceError` and touches nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from engine.errors import EngineError, PersistenceError
from engine.store import columns as C
from engine.store.ledger import LEDGER_COLUMNS, FeedbackLedger
from engine.fsutil import fsync_dir as _fsync_dir, fsync_file as _fsync_file

# 1-D experience columns persisted as themselves; a checkpoint written before a column existed
# loads it from its default (external_id: the row)
_PERSISTED_1D = tuple(n for n in C.EXPERIENCE_PERSISTED if C.EXPERIENCE_COLUMNS[n][1] is None)
_PERSISTED_DEFAULT = {"external_id": lambda n: np.arange(n, dtype=np.int64)}

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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _current_name(directory: Path) -> str | None:
    cur = directory / CURRENT
    if not cur.is_file():
        return None
    name = cur.read_text(encoding="utf-8", errors="replace").strip()
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


# --- tables -------------------------------------------------------------------------------
def _node_table(store):
    import pyarrow as pa

    n = store.n_nodes
    nodes = store._nodes
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = nodes["text_end"][:n]
    text = pa.LargeStringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(store._text[: store._text_used])))
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "parent": pa.array(nodes["parent"][:n]),
        "depth": pa.array(nodes["depth"][:n]),
        "key": pa.array(nodes["key"][:n]),
        "text": text,
    })


def _experience_table(store):
    import pyarrow as pa

    n, H = store.n_experiences, store.n_horizons
    cols = {"eid": pa.array(np.arange(n, dtype=np.int64))}
    path = store._exp["path"][:n]
    for lev in range(store.depth):
        cols[f"path_{lev + 1}"] = pa.array(np.ascontiguousarray(path[:, lev]))
    blk = store._block[:n]
    for j, h in enumerate(store.horizons):
        cols[f"q_{h}"] = pa.array(np.ascontiguousarray(blk[:, j]))
    cols["recall"] = pa.array(blk[:, C.recall_col(H)].astype(np.int64))
    cols["hit"] = pa.array(blk[:, C.hit_col(H)].astype(np.int64))
    for name in _PERSISTED_1D:  # created, external_id (engine.store.columns)
        cols[name] = pa.array(np.ascontiguousarray(store._exp[name][:n]))
    return pa.table(cols)


def _ledger_table(ledger: FeedbackLedger):
    import pyarrow as pa

    return pa.table({k: pa.array(np.ascontiguousarray(v)) for k, v in ledger.columns().items()})


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
            "params": {
                "horizons": list(store.horizons), "levels": list(store.levels), "depth": store.depth,
                "q0": store.q0, "eta": store.eta, "eta_task": store.eta_task,
                "q_min": store.q_min, "q_max": store._q_max,
            },
            "rows": {"nodes": store.n_nodes, "experiences": store.n_experiences, "ledger": len(store.ledger)},
            "files": {f: {"sha256": sha256_file(staging / f), "bytes": (staging / f).stat().st_size} for f in listing},
            "extras": list(extras),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
        _stage("manifest")
        for f in listing + [MANIFEST]:
            _fsync_file(staging / f)
        if extras:
            _fsync_dir(staging / "extras")
        _fsync_dir(staging)
        _stage("fsync")
        final = directory / name
        os.rename(staging, final)
        _fsync_dir(directory)
        _stage("rename")
        tmp = directory / f".{CURRENT}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(name + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / CURRENT)
        _fsync_dir(directory)
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
        if p.name.startswith(".staging-") or (p.name.startswith(f".{CURRENT}.") and p.name.endswith(".tmp")):
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


def _verify_files(ck: Path, manifest: dict) -> None:
    for f, meta in manifest["files"].items():
        if not isinstance(meta, dict) or ".." in Path(f).parts or Path(f).is_absolute():
            raise PersistenceError(f"manifest entry {f!r} is malformed")
        p = ck / f
        if not p.is_file():
            raise PersistenceError(f"checkpoint file {p} is missing")
        size = p.stat().st_size
        if size != meta.get("bytes"):
            raise PersistenceError(f"checkpoint file {p} has {size} bytes, the manifest says {meta.get('bytes')} (truncated?)")
        if sha256_file(p) != meta.get("sha256"):
            raise PersistenceError(f"checkpoint file {p} does not match its sha256 checksum (corrupted)")


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


def load_store(directory):
    """Load the current checkpoint of ``directory`` into a new :class:`ExperienceStore`."""
    try:
        return _load(directory)
    except PersistenceError:
        raise
    except EngineError as exc:
        raise PersistenceError(f"checkpoint in {directory} is inconsistent: {exc}") from exc


def _load(directory):
    import pyarrow as pa

    from engine.store.experience import ExperienceStore
    from kernels import store_tree as KT

    ck = checkpoint_dir(directory)
    manifest = read_manifest(ck)
    _verify_files(ck, manifest)
    p, rows = manifest["params"], manifest["rows"]
    try:
        store = ExperienceStore(
            horizons=tuple(p["horizons"]), depth=int(p["depth"]), q0=p["q0"], eta=p["eta"],
            eta_task=p["eta_task"], q_min=p["q_min"], q_max=p["q_max"], levels=tuple(p["levels"]),
            capacity=max(1, int(rows["experiences"])), node_capacity=max(1, int(rows["nodes"])))
        n_nodes, n_exp, n_led = int(rows["nodes"]), int(rows["experiences"]), int(rows["ledger"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PersistenceError(f"{ck / MANIFEST} has bad parameters: {exc}") from exc
    H, L = store.n_horizons, store.depth
    nodes = _read_table(ck / "nodes.parquet", {"id": "i8", "parent": "i8", "depth": "i8", "key": "u8", "text": "str"}, n_nodes)
    import pyarrow.parquet as pq

    try:
        present = set(pq.read_schema(ck / "experiences.parquet").names)
    except (pa.ArrowException, OSError) as exc:
        raise PersistenceError(f"{ck / 'experiences.parquet'} is not a readable Parquet file: {exc}") from exc
    ecols = {"eid": "i8", **{f"path_{i + 1}": "i8" for i in range(L)}, **{f"q_{h}": "f8" for h in store.horizons},
             "recall": "i8", "hit": "i8",
             **{c: C.EXPERIENCE_COLUMNS[c][0] for c in _PERSISTED_1D
                if c in present or c not in _PERSISTED_DEFAULT}}
    exps = _read_table(ck / "experiences.parquet", ecols, n_exp)
    for c in _PERSISTED_1D:
        if c not in exps:
            exps[c] = _PERSISTED_DEFAULT[c](n_exp)
    led = _read_table(ck / "ledger.parquet", dict(LEDGER_COLUMNS), n_led)

    bad = lambda what: PersistenceError(f"checkpoint {ck}: {what}")  # noqa: E731
    if n_nodes < 1 or not np.array_equal(nodes["id"], np.arange(n_nodes)):
        raise bad("node ids are not 0..n-1")
    if not np.array_equal(exps["eid"], np.arange(n_exp)):
        raise bad("experience ids are not 0..n-1")
    # nodes
    store._reserve_nodes(n_nodes)
    nd = store._nodes
    nd["parent"][:n_nodes] = nodes["parent"]
    nd["depth"][:n_nodes] = nodes["depth"]
    nd["key"][:n_nodes] = nodes["key"]
    if n_nodes and (nodes["depth"].max() > L):
        raise bad(f"a node is deeper than depth={L}")
    first = KT.link_tree(nd["parent"], nd["depth"], n_nodes, nd["first_child"], nd["last_child"], nd["next_sibling"])
    if first >= 0:
        raise bad(f"node {first} has an inconsistent parent or depth")
    store._pk_table[:] = -1
    store._key_table[:] = -1
    dup = KT.rebuild_tables_checked(store._pk_table, store._key_table, nd["parent"], nd["key"], nd["next_same_key"], n_nodes)
    if dup >= 0:
        raise bad(f"node {dup} duplicates the (parent, key) of an earlier node")
    text = nodes["text"].combine_chunks() if isinstance(nodes["text"], pa.ChunkedArray) else nodes["text"]
    if not pa.types.is_large_string(text.type):
        text = text.cast(pa.large_string())
    _, offs_buf, data_buf = text.buffers()
    offs = np.frombuffer(offs_buf, dtype=np.int64)[text.offset : text.offset + n_nodes + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    base = int(offs[0]) if offs.size else 0
    used = int(offs[-1]) - base if offs.size else 0
    store._text = np.array(data[base : base + used], dtype=np.uint8) if used else np.empty(64, np.uint8)
    store._text_used = used
    nd["text_end"][:n_nodes] = offs[1:] - base
    # experiences
    store._reserve_experiences(n_exp)
    path = np.stack([exps[f"path_{i + 1}"] for i in range(L)], axis=1) if n_exp else np.zeros((0, L), np.int64)
    store._exp["path"][:n_exp] = path
    for c in _PERSISTED_1D:
        store._exp[c][:n_exp] = exps[c]
    ext = exps["external_id"]
    if n_exp and (ext[0] < 0 or (np.diff(ext) <= 0).any()):
        raise bad("external ids must be non-negative and strictly increasing with the row")
    first = KT.link_experiences(store._exp["path"], n_exp, nd["parent"], n_nodes, nd["eid"])
    if first >= 0:
        raise bad(f"experience {first} has an invalid path")
    q = np.stack([exps[f"q_{h}"] for h in store.horizons], axis=1) if n_exp else np.zeros((0, H))
    if n_exp and (not np.isfinite(q).all() or q.min() < store.q_min or q.max() > store.q_max):
        raise bad(f"reliability values outside [{store.q_min}, {store.q_max}] or not finite")
    if n_exp and (exps["hit"].min() < 0 or (exps["hit"] > exps["recall"]).any()):
        raise bad("hit counts must satisfy 0 <= hit <= recall")
    blk = store._block
    blk[:n_exp] = 0.0
    blk[:n_exp, :H] = q
    blk[:n_exp, C.hit_col(H)] = exps["hit"]
    blk[:n_exp, C.recall_col(H)] = exps["recall"]
    store._n_nodes, store._n_exp = n_nodes, n_exp
    # ledger
    if n_led:
        if led["eid"].min() < 0 or led["eid"].max() >= n_exp or led["horizon"].min() < 0 or led["horizon"].max() >= H:
            raise bad("ledger entries name unknown eids or horizons")
        if not np.isin(led["status"], (0, 1)).all():
            raise bad("ledger status values must be 0 (pending) or 1 (applied)")
    store.ledger = FeedbackLedger.from_columns(led)
    store.extra_paths = {e: ck / "extras" / e for e in manifest.get("extras", [])}
    return store
