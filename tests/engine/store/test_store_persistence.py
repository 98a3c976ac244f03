"""Atomic checkpoints: round trip, extras, interrupted saves, corrupt and foreign files."""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from engine.errors import PersistenceError
from engine.store import ExperienceStore
from engine.store import persistence as P
from store_factory import make_store

STAGES = ["tables", "extras", "manifest", "fsync", "rename", "current", "cleanup"]


def same(a, b):
    np.testing.assert_array_equal(a.reliability, b.reliability)
    np.testing.assert_array_equal(a.hit, b.hit)
    np.testing.assert_array_equal(a.recall, b.recall)
    np.testing.assert_array_equal(a.paths, b.paths)
    np.testing.assert_array_equal(a.created, b.created)
    np.testing.assert_array_equal(a.node_column("key"), b.node_column("key"))
    assert [a.node_text(i) for i in range(a.n_nodes)] == [b.node_text(i) for i in range(b.n_nodes)]
    for k, v in a.ledger.columns().items():
        np.testing.assert_array_equal(v, b.ledger.column(k))


def test_round_trip(tmp_path):
    st = make_store()
    ck = st.save(tmp_path / "s")
    assert ck.name == "ckpt-000001" and (tmp_path / "s" / "CURRENT").read_text().strip() == ck.name
    back = ExperienceStore.load(tmp_path / "s")
    same(st, back)
    assert back.find_path(["ind1", "fac1", "dir 1 é"]) == st.find_path(["ind1", "fac1", "dir 1 é"])
    # loaded store keeps working: structure, tables and params rebuilt
    back.add_paths([["ind0", "fac0", "new"]])
    assert back.n_experiences == 51 and back.q0 == st.q0 and back.horizons == st.horizons
    manifest = json.loads((ck / "manifest.json").read_text())
    assert manifest["rows"] == {"nodes": st.n_nodes, "experiences": 50, "ledger": 3}
    assert set(manifest["files"]) == {"nodes.parquet", "experiences.parquet", "ledger.parquet"}


def test_empty_store_round_trip(tmp_path):
    st = ExperienceStore(horizons=(1,), depth=2)
    st.save(tmp_path)
    back = ExperienceStore.load(tmp_path)
    assert back.n_experiences == 0 and back.n_nodes == 1 and back.depth == 2


def test_extras_are_saved_checksummed_and_exposed(tmp_path):
    st = make_store()
    st.save(tmp_path, extras={"nodes.hnsw": lambda p: p.write_bytes(b"index-bytes")})
    back = ExperienceStore.load(tmp_path)
    assert back.extra_paths["nodes.hnsw"].read_bytes() == b"index-bytes"
    manifest = json.loads((back.extra_paths["nodes.hnsw"].parents[1] / "manifest.json").read_text())
    assert "extras/nodes.hnsw" in manifest["files"]
    back.extra_paths["nodes.hnsw"].write_bytes(b"tampered!!!")
    with pytest.raises(PersistenceError, match="extras/nodes.hnsw.*(bytes|checksum)"):
        ExperienceStore.load(tmp_path)


@pytest.mark.parametrize(
    "extras, match",
    [
        ({"../escape": lambda p: None}, "must be a plain file name"),
        ({"ok.bin": "not callable"}, "must be a callable"),
        ({"ok.bin": lambda p: None}, "did not write a file"),
    ],
)
def test_bad_extras(tmp_path, extras, match):
    st = make_store()
    st.save(tmp_path)
    with pytest.raises(PersistenceError, match=match):
        st.save(tmp_path, extras=extras)
    same(st, ExperienceStore.load(tmp_path))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging")]


def test_keeps_two_newest_checkpoints(tmp_path):
    st = make_store()
    for _ in range(4):
        st.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "CURRENT", "ckpt-000003", "ckpt-000004"]


@pytest.mark.parametrize("stage", STAGES)
def test_failure_at_each_stage_keeps_previous_checkpoint(tmp_path, monkeypatch, stage):
    old = make_store(seed=1)
    old.save(tmp_path)
    new = make_store(seed=2)
    new.update([0], [[1.0, 1.0, 1.0]], rule="delta")

    def boom(name):
        if name == stage:
            raise OSError(f"injected failure at {name}")

    monkeypatch.setattr(P, "fault_hook", boom)
    with pytest.raises(OSError, match="injected"):
        new.save(tmp_path)
    monkeypatch.setattr(P, "fault_hook", None)
    loaded = ExperienceStore.load(tmp_path)
    if STAGES.index(stage) < STAGES.index("current"):
        same(old, loaded)  # CURRENT not yet swapped: the previous checkpoint
    else:
        same(new, loaded)  # swapped: the new one, complete
    # the next save succeeds and cleans up
    new.save(tmp_path)
    same(new, ExperienceStore.load(tmp_path))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".lock"]


SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from store_factory import make_store
    st = make_store(n={n}, seed=2)
    st.update([0], [[1.0, 1.0, 1.0]], rule="delta")
    print("ready", flush=True)
    for _ in range({repeats}):
        st.save({directory!r})
    """
)


def _saver(tmp_path, n=50, repeats=1, env=None):
    code = SAVER.format(tests=os.path.dirname(__file__), n=n, repeats=repeats, directory=str(tmp_path))
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _expected(stage):
    return "old" if STAGES.index(stage) < STAGES.index("current") else "new"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("stage", STAGES)
def test_forked_saver_killed_at_each_stage(tmp_path, stage):
    """A forked child SIGKILLs itself at each save stage; the parent loads what is left."""
    old = make_store(seed=1)
    old.save(tmp_path)
    new = make_store(seed=2)
    new.update([0], [[1.0, 1.0, 1.0]], rule="delta")
    pid = os.fork()
    if pid == 0:  # child: no cleanup, no pytest machinery, just die at the stage
        try:
            os.environ["TOE_STORE_FAULT"] = stage
            new.save(tmp_path)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    same(old if _expected(stage) == "old" else new, ExperienceStore.load(tmp_path))


@pytest.mark.parametrize("stage", ["fsync", "current"])
def test_subprocess_killed_mid_save(tmp_path, stage):
    """A separate Python process killed (SIGKILL) inside a save."""
    old = make_store(seed=1)
    old.save(tmp_path)
    proc = _saver(tmp_path, env={"TOE_STORE_FAULT": stage})
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -9, err
    new = make_store(seed=2)
    new.update([0], [[1.0, 1.0, 1.0]], rule="delta")
    same(old if _expected(stage) == "old" else new, ExperienceStore.load(tmp_path))


@pytest.mark.slow
def test_process_killed_at_random_times(tmp_path):
    old = make_store(n=3000, seed=1)
    old.save(tmp_path)
    new = make_store(n=3000, seed=2)
    new.update([0], [[1.0, 1.0, 1.0]], rule="delta")
    rng = np.random.default_rng(0)
    for _ in range(3):
        proc = _saver(tmp_path, n=3000, repeats=1000)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(float(rng.uniform(0.0, 0.5)))
        proc.kill()
        proc.communicate()
        loaded = ExperienceStore.load(tmp_path)
        try:
            same(new, loaded)
        except AssertionError:
            same(old, loaded)


# --- corrupt, truncated and foreign files ----------------------------------------------
@pytest.fixture
def saved(tmp_path):
    st = make_store()
    ck = st.save(tmp_path)
    return tmp_path, ck


def _rewrite_manifest(ck, fn):
    m = json.loads((ck / "manifest.json").read_text())
    fn(m)
    (ck / "manifest.json").write_text(json.dumps(m))


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda d, ck: _truncate(ck / "experiences.parquet"), r"experiences.parquet has \d+ bytes.*truncated"),
        (lambda d, ck: _flip(ck / "nodes.parquet"), "nodes.parquet does not match its sha256"),
        (lambda d, ck: (ck / "ledger.parquet").unlink(), "ledger.parquet is missing"),
        (lambda d, ck: _truncate(ck / "manifest.json"), "not valid JSON"),
        (lambda d, ck: (ck / "manifest.json").write_text('{"format": "something-else"}'), "not a toe-experience-store manifest"),
        (lambda d, ck: _rewrite_manifest(ck, lambda m: m.update(schema_version=99)), "schema_version 99"),
        (lambda d, ck: _rewrite_manifest(ck, lambda m: m["files"].pop("nodes.parquet")), "does not list nodes.parquet"),
        (lambda d, ck: _rewrite_manifest(ck, lambda m: m["rows"].update(experiences=7)), "has 50 rows, the manifest says 7"),
        (lambda d, ck: (d / "CURRENT").write_text("../../etc"), "does not name a checkpoint"),
        (lambda d, ck: (d / "CURRENT").write_text("ckpt-000009"), "which does not exist"),
        (lambda d, ck: (d / "CURRENT").unlink(), "is not a store checkpoint"),
    ],
)
def test_damaged_checkpoints_are_refused(saved, damage, match):
    d, ck = saved
    damage(d, ck)
    before = sorted(p.name for p in d.rglob("*"))
    with pytest.raises(PersistenceError, match=match):
        ExperienceStore.load(d)
    assert sorted(p.name for p in d.rglob("*")) == before  # loading changed nothing


def _reseal(ck, fname, table):
    import pyarrow.parquet as pq

    pq.write_table(table, ck / fname)
    _rewrite_manifest(ck, lambda m: m["files"].update(
        {fname: {"sha256": P.sha256_file(ck / fname), "bytes": (ck / fname).stat().st_size}}))


@pytest.mark.parametrize(
    "fname, edit, match",
    [
        ("nodes.parquet", lambda t: t.set_column(1, "parent", __import__("pyarrow").array(
            [-1] + [5] * (t.num_rows - 1))), "inconsistent parent or depth"),
        ("experiences.parquet", lambda t: t.set_column(t.column_names.index("hit"), "hit",
            __import__("pyarrow").array([99] * t.num_rows)), "hit <= recall"),
        ("experiences.parquet", lambda t: t.set_column(t.column_names.index("q_h10"), "q_h10",
            __import__("pyarrow").array([5.0] * t.num_rows)), "reliability values outside"),
        ("experiences.parquet", lambda t: t.set_column(t.column_names.index("path_3"), "path_3",
            __import__("pyarrow").array([1] * t.num_rows)), "invalid path"),
        ("experiences.parquet", lambda t: t.drop(["created"]), "lacks column"),
        ("experiences.parquet", lambda t: t.set_column(t.column_names.index("recall"), "recall",
            t.column("recall").cast(__import__("pyarrow").float64())), "dtype float64, expected int64"),
        ("ledger.parquet", lambda t: t.set_column(1, "eid", __import__("pyarrow").array([999] * t.num_rows)), "unknown eids"),
    ],
)
def test_inconsistent_tables_with_valid_checksums_are_refused(saved, fname, edit, match):
    import pyarrow.parquet as pq

    d, ck = saved
    _reseal(ck, fname, edit(pq.read_table(ck / fname)))
    with pytest.raises(PersistenceError, match=match):
        ExperienceStore.load(d)


def test_garbage_parquet_with_valid_checksum_is_refused(saved):
    d, ck = saved
    (ck / "nodes.parquet").write_bytes(b"PAR1 this is not parquet")
    _rewrite_manifest(ck, lambda m: m["files"].update(
        {"nodes.parquet": {"sha256": P.sha256_file(ck / "nodes.parquet"), "bytes": 24}}))
    with pytest.raises(PersistenceError, match="not a readable Parquet file"):
        ExperienceStore.load(d)


def test_refuses_to_save_into_foreign_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(PersistenceError, match="not store checkpoints"):
        make_store().save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(PersistenceError, match="is not a folder"):
        make_store().save(tmp_path / "file")


def test_missing_directory(tmp_path):
    with pytest.raises(PersistenceError, match="does not exist"):
        ExperienceStore.load(tmp_path / "nope")


def test_concurrent_save_is_refused(tmp_path):
    import fcntl

    st = make_store()
    st.save(tmp_path)
    fd = os.open(tmp_path / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another saver holds the lock
        with pytest.raises(PersistenceError, match="another process is saving"):
            st.save(tmp_path)
    finally:
        os.close(fd)
    assert st.save(tmp_path).name == "ckpt-000002"


def test_bad_extras_create_nothing(tmp_path):
    with pytest.raises(PersistenceError, match="plain file name"):
        make_store().save(tmp_path / "new", extras={"a/b": lambda p: None})
    assert not (tmp_path / "new").exists()
