"""NodeIndex save/load round-trip and the index-vs-node-table checks."""

import json

import numpy as np
import pytest

from engine.errors import PersistenceError
from engine.index import NodeIndex, build_index
from engine.index.node_index import _MAGIC
from index_helpers import lowrank


@pytest.fixture
def saved(rng, tmp_path):
    x = lowrank(rng, 1200, 16)
    ix = build_index(np.arange(1200), x, exact_max=0)
    ix.delete([5, 6])
    ix.replace([7], x[100])
    ix.set_ef(80)
    path = ix.save(tmp_path / "nodes.idx", tag={"embedder": "hashing-16"})
    return ix, path, x


def test_round_trip(saved):
    ix, path, x = saved
    assert path.is_file()
    back = NodeIndex.load(path, expected_ids=ix.ids(), expected_count=1198, expected_dim=16)
    assert len(back) == 1198 and back.n_deleted == 2 and back.fingerprint() == ix.fingerprint()
    assert back.tag == {"embedder": "hashing-16"} and back._ef == 80
    np.testing.assert_array_equal(back.vectors(back.ids()), ix.vectors(ix.ids()))
    np.testing.assert_array_equal(back.search(x[:30], 8)[0], ix.search(x[:30], 8)[0])
    # the loaded index keeps working: revive, add, replace, delete
    back.add([5, 5000], x[:2])
    back.replace([7], x[7])
    back.delete([8])
    assert set(back.search(x[1], 2)[0].tolist()) == {1, 5000} and len(back) == 1199


def test_empty_index_round_trip(tmp_path):
    back = NodeIndex.load(NodeIndex(8).save(tmp_path / "e.idx"))
    assert len(back) == 0 and back.dim == 8


def test_save_replaces_atomically(saved, tmp_path):
    ix, path, x = saved
    ix.add([1300], x[0])
    ix.save(path)
    assert NodeIndex.load(path).contains([1300])[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes.idx"]  # no temp files left


def test_mismatch_with_node_table(saved):
    ix, path, _ = saved
    ids = ix.ids()
    with pytest.raises(PersistenceError, match=r"does not match its node table: 1198 ids indexed, 1198 expected; missing \[5\], unexpected \[4\]"):
        NodeIndex.load(path, expected_ids=np.where(ids == 4, 5, ids))
    with pytest.raises(PersistenceError, match="holds 1198 nodes but the node table expects 1200"):
        NodeIndex.load(path, expected_count=1200)
    with pytest.raises(PersistenceError, match="has dim 16, the embedder gives 384"):
        NodeIndex.load(path, expected_dim=384)


def _header_len(path):
    raw = path.read_bytes()
    n = int(np.frombuffer(raw[8:16], np.uint64)[0])
    return raw, n


def test_corrupted_files(saved, tmp_path):
    _, path, _ = saved
    raw, n_head = _header_len(path)
    bad = tmp_path / "bad.idx"
    bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(PersistenceError, match="graph is unreadable"):
        NodeIndex.load(bad)
    bad.write_bytes(raw[: 16 + n_head + 100])
    with pytest.raises(PersistenceError, match=r"truncated \(state\)"):
        NodeIndex.load(bad)
    bad.write_bytes(b"PAR1" + raw[4:])
    with pytest.raises(PersistenceError, match="not a node index file"):
        NodeIndex.load(bad)
    meta = json.loads(raw[16 : 16 + n_head])
    for change, match in [({"format": 99}, "has format 99, expected 1"), ({"count": 3}, "do not match the header")]:
        head = json.dumps({**meta, **change}).encode()
        bad.write_bytes(_MAGIC + np.uint64(len(head)).tobytes() + head + raw[16 + n_head :])
        with pytest.raises(PersistenceError, match=match):
            NodeIndex.load(bad)
    with pytest.raises(PersistenceError, match="missing or unreadable"):
        NodeIndex.load(tmp_path / "nowhere.idx")


def test_graph_from_another_index(saved, rng, tmp_path):
    _, path, _ = saved
    other_path = build_index(np.arange(50), rng.standard_normal((50, 16))).save(tmp_path / "other.idx")
    raw, n_head = _header_len(path)
    o_raw, o_head = _header_len(other_path)
    n_state = int(np.frombuffer(raw[16 + n_head : 24 + n_head], np.uint64)[0])
    o_state = int(np.frombuffer(o_raw[16 + o_head : 24 + o_head], np.uint64)[0])
    mixed = raw[: 24 + n_head + n_state] + o_raw[24 + o_head + o_state :]
    (tmp_path / "mixed.idx").write_bytes(mixed)
    with pytest.raises(PersistenceError, match="graph holds 50 elements, the header 1200"):
        NodeIndex.load(tmp_path / "mixed.idx")
