"""The node index next to the experience store: build, save with its checkpoint, load, check.

The store's checkpoint takes ``extras={name: writer(path)}`` and writes them
atomically with its tables (engine/store/persistence.py); on load
``store.extra_paths[name]`` is the file. The index file records the node
table it was built against (``n_nodes`` and a SHA-256 of the indexed nodes'
64-bit keys) and the embedder; :func:`load_store_index` refuses a file that
does not match the loaded store, or an embedder of another name or width.

    index = index_store_nodes(store, embedder)                 # embed + add all real nodes
    store.save(ckpt, extras=index_extras(index, store, embedder))
    store2 = ExperienceStore.load(ckpt)
    index2 = load_store_index(store2, embedder)               # checked against store2
"""

from __future__ import annotations

import hashlib

import numpy as np

from engine.errors import InputError, PersistenceError
from engine.index.config import IndexConfig
from engine.index.node_index import NodeIndex

INDEX_EXTRA = "node_index.bin"


def node_binding(store, ids: np.ndarray) -> dict:
    """What ties an index to a node table: node count and a hash of the indexed nodes' keys."""
    ids = np.asarray(ids, dtype=np.int64)
    keys = np.ascontiguousarray(np.asarray(store.node_column("key"))[ids], dtype=np.uint64)
    h = hashlib.sha256(ids.tobytes() + b"|" + keys.tobytes()).hexdigest()[:32]
    return {"n_nodes": int(store.n_nodes), "keys_sha256": h}


def index_store_nodes(store, embedder, index: NodeIndex | None = None, nodes=None,
                      config: IndexConfig | None = None) -> NodeIndex:
    """Embed the texts of ``nodes`` (default: every real node not yet indexed) and add them.

    Returns ``index`` (a new one built from ``config`` when None). Node 0, the
    virtual root, has no text and is never indexed by default.
    """
    if index is None:
        index = NodeIndex(embedder.dim, config)
    elif index.dim != embedder.dim:
        raise InputError(f"index dim {index.dim} does not match embedder {embedder.name!r} dim {embedder.dim}")
    if nodes is None:
        nodes = np.arange(1, store.n_nodes, dtype=np.int64)
        nodes = nodes[~index.contains(nodes)]
    nodes = np.asarray(nodes, dtype=np.int64)
    if nodes.size:
        index.reserve(len(index) + index.n_deleted + nodes.shape[0])
        index.add(nodes, embedder.embed(store.node_texts(nodes)))
    return index


def index_extras(index: NodeIndex, store, embedder=None) -> dict:
    """``extras`` for ``store.save``: writes the index, tagged with the store it matches."""
    tag = {"store": node_binding(store, index.ids()), "embedder": getattr(embedder, "name", None)}
    return {INDEX_EXTRA: lambda path: index.save(path, tag=tag)}


def load_store_index(store, embedder=None) -> NodeIndex:
    """Load the index saved with ``store``'s checkpoint and check that they agree."""
    path = (getattr(store, "extra_paths", None) or {}).get(INDEX_EXTRA)
    if path is None:
        raise PersistenceError(
            f"the store checkpoint holds no {INDEX_EXTRA!r}; save it with extras=index_extras(...) "
            f"or rebuild the index with index_store_nodes()"
        )
    index = NodeIndex.load(path, expected_dim=None if embedder is None else embedder.dim)
    ids = index.ids()
    if ids.size and ids[-1] >= store.n_nodes:
        raise PersistenceError(
            f"node index {str(path)!r} holds node {int(ids[-1])} but the store has {store.n_nodes} nodes"
        )
    saved = index.tag.get("store", {})
    now = node_binding(store, ids)
    if saved != now:
        raise PersistenceError(
            f"node index {str(path)!r} was built for another node table "
            f"(saved {saved}, this store {now}); rebuild it with index_store_nodes()"
        )
    want = getattr(embedder, "name", None)
    got = index.tag.get("embedder")
    if embedder is not None and got is not None and got != want:
        raise PersistenceError(f"node index {str(path)!r} was built with embedder {got!r}, not {want!r}")
    return index
