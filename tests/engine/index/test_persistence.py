"""NodeIndex save/load round-trip and the index-vs-node-table checks."""

import json
import shutil

import numpy as np
import pytest

from engine.errors import PersistenceError
from engine.index import NodeIndex, build_index
from index_helpers import lowrank


@pytest.fixture
def saved(rng, tmp_path):
    x = lowrank(rng, 1200, 16)
    ix = build_index(np.arange(1200), x, exact_max=0)
    ix.delete([5, 6])
    ix.replace([7], x[100])
    ix.set_ef(80)
    path = ix.save(tmp_path / "node_index")
    return ix, path, x


def test_round_trip(saved):
    ix, path, x = saved
    back = NodeIndex.load(path, expected_ids=ix.ids(), expected_count=1198, expected_dim=16)
    assert len(back) == 1198 and back.n_deleted == 2 and back.fingerprint() == ix.fingerprint()
    np.testing.assert_array_equal(back.vectors(back.ids()), ix.vectors(ix.ids()))
    np.testing.assert_array_equal(back.search(x[:30], 8)[0], ix.search(x[:30], 8)[0])
    assert back._ef == 80
    # the loaded index keeps working: revive, add, replace, delete
    back.add([5, 5000], x[:2])
    back.replace([7], x[7])
    back.delete([8])
    assert back.search(x[1], 1)[0][0] == 5000 and len(back) == 1199


def test_save_replaces_atomically(saved, tmp_path):
    ix, path, x = saved
    ix.add([1300], x[0])
    ix.save(path)
    assert NodeIndex.load(path).contains([1300])[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node_index"]  # no temp or .old left


def test_unknown_id_set_is_rejected(saved):
    ix, path, _ = saved
    ids = ix.ids()
    with pytest.raises(PersistenceError, match=r"does not match its node table: 1198 ids indexed, 1198 expected; missing \[5\], unexpected \[4\]"):
        NodeIndex.load(path, expected_ids=np.where(ids == 4, 5, ids))
    with pytest.raises(PersistenceError, match="holds 1198 nodes but the node table expects 1200"):
        NodeIndex.load(path, expected_count=1200)
    with pytest.raises(PersistenceError, match="has dim 16, the embedder gives 384"):
        NodeIndex.load(path, expected_dim=384)


def test_corrupted_files(saved, tmp_path):
    _, path, _ = saved
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    (bad / "hnsw.bin").write_bytes((bad / "hnsw.bin").read_bytes()[:1000])
    with pytest.raises(PersistenceError, match="hnsw.bin' is unreadable"):
        NodeIndex.load(bad)
    shutil.rmtree(bad)
    shutil.copytree(path, bad)
    st = np.load(bad / "state.npy")
    st[0] = 2
    np.save(bad / "state.npy", st)
    with pytest.raises(PersistenceError, match="state.npy does not match meta.json"):
        NodeIndex.load(bad)
    meta = json.loads((path / "meta.json").read_text())
    meta["format"] = 99
    shutil.rmtree(bad)
    shutil.copytree(path, bad)
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PersistenceError, match="has format 99, expected 1"):
        NodeIndex.load(bad)
    with pytest.raises(PersistenceError, match="missing or unreadable"):
        NodeIndex.load(tmp_path / "nowhere")


def test_graph_from_another_index(saved, rng, tmp_path):
    _, path, _ = saved
    other = build_index(np.arange(50), rng.standard_normal((50, 16)))
    other_path = other.save(tmp_path / "other")
    shutil.copy(other_path / "hnsw.bin", path / "hnsw.bin")
    with pytest.raises(PersistenceError, match="graph holds 50 elements, state.npy 1200"):
        NodeIndex.load(path)
