"""The node index saved and loaded with the experience store's checkpoint."""

import numpy as np
import pytest

from engine.embed import HashingEmbedder
from engine.errors import PersistenceError
from engine.index import NodeIndex
from engine.index.store_link import INDEX_EXTRA, index_extras, index_store_nodes, load_store_index

store_mod = pytest.importorskip("engine.store")

PATHS = [["Energy", "Oil supply", "OPEC spare capacity"], ["Energy", "Oil supply", "Shale output"],
         ["Energy", "Demand", "Jet fuel"], ["Banks", "Rates", "Net interest margin"]]


@pytest.fixture
def store():
    st = store_mod.ExperienceStore(horizons=("h10", "h20"), depth=3)
    st.add_paths(PATHS)
    return st


def test_checkpoint_round_trip(store, tmp_path):
    emb = HashingEmbedder(64)
    ix = index_store_nodes(store, emb)
    assert len(ix) == store.n_nodes - 1 and not ix.contains([0])[0]
    # children of "Oil supply" searched by the text of one of them
    oil = store.find_path(["Energy", "Oil supply"])
    ids, _ = ix.search(emb.embed(["OPEC spare capacity"])[0], 1, within=store.children(oil))
    assert store.node_text(int(ids[0])) == "OPEC spare capacity"
    store.save(tmp_path / "ck", extras=index_extras(ix, store, emb))
    st2 = store_mod.ExperienceStore.load(tmp_path / "ck")
    back = load_store_index(st2, emb)
    assert back.fingerprint() == ix.fingerprint()
    # new nodes appended later are indexed incrementally
    st2.add_paths([["Banks", "Rates", "Deposit beta"]])
    index_store_nodes(st2, emb, back)
    assert len(back) == st2.n_nodes - 1


def test_index_of_another_store_is_refused(store, tmp_path):
    emb = HashingEmbedder(64)
    other = store_mod.ExperienceStore(horizons=("h10", "h20"), depth=3)
    other.add_paths([["Energy", "Oil supply", "Refinery margins"]] + PATHS[1:])  # same shape, one text differs
    ix_other = index_store_nodes(other, emb)
    store.save(tmp_path / "ck", extras=index_extras(ix_other, other, emb))
    st2 = store_mod.ExperienceStore.load(tmp_path / "ck")
    with pytest.raises(PersistenceError, match="was built for another node table"):
        load_store_index(st2, emb)
    with pytest.raises(PersistenceError, match="has dim 64, the embedder gives 32"):
        load_store_index(st2, HashingEmbedder(32))


def test_missing_extra_and_wrong_embedder(store, tmp_path):
    emb = HashingEmbedder(64)
    store.save(tmp_path / "plain")
    with pytest.raises(PersistenceError, match=f"holds no '{INDEX_EXTRA}'"):
        load_store_index(store_mod.ExperienceStore.load(tmp_path / "plain"))
    store.save(tmp_path / "ck", extras=index_extras(index_store_nodes(store, emb), store, emb))
    with pytest.raises(PersistenceError, match="built with embedder 'hashing-64', not 'hashing-64b'"):
        e2 = HashingEmbedder(64)
        e2.name = "hashing-64b"
        load_store_index(store_mod.ExperienceStore.load(tmp_path / "ck"), e2)
