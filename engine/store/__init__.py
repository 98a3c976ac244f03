"""Compiled experience store: the ToE experience tree with per-horizon reliability.

Public API (stable; extended, never renamed)::

    from engine.store import ExperienceStore, StoreView, FeedbackLedger, text_key

    st = ExperienceStore(horizons=("h10", "h20", "h40"), depth=3, q0=1.0, eta=10.0,
                         eta_task=1.0, q_min=0.0, q_max=None,  # None -> 2 * q0
                         capacity=1024, node_capacity=None, levels=None)

    # building the tree (prefixes are shared; an existing path returns its eid)
    eids = st.add_paths([["Energy", "Oil supply", "OPEC spare capacity"], ...])   # texts
    eids = st.add_paths(paths, keys=[[k1, k2, k3], ...])      # texts + caller's 64-bit keys
    eids = st.add_key_paths(keys_u8_b_by_l, lengths=None, texts=None, created=None)  # fast path

    # nodes (node 0 is the virtual root; real nodes have depth 1..L)
    st.find(parent, key_or_text) -> node id | -1;   st.find_batch(parents, keys) -> i8[b]
    st.find_key(keys_or_texts) -> i8[b] (lowest node id per key, -1 if none)
    st.nodes_with_key(key) -> i8[m];   st.find_path(path) -> node | -1;   st.eid_of(path | node)
    st.children(node=0) -> i8[c];   st.node_text(node);   st.path_texts(eid)
    st.topk_children(node_or_nodes, horizon, k, agg="max") -> (ids, scores)
    st.subtree(node) -> i8[m];   st.subtree_eids(node) -> i8[e]
    st.node_column("parent" | "depth" | "key" | "eid" | ...)

    # experience columns
    st.reliability (f8[n, H] read-only view), st.hit, st.recall (i8[n]), st.created, st.paths
    st.n_experiences, st.n_nodes, st.horizons, st.levels, st.depth, st.q0, st.q_max

    # counters (ToE Table A1: hit never exceeds recall)
    st.record_recall(eids, counts=None);   st.record_hit(eids, counts=None)

    # reliability updates, batch order, repeated eids sequential; bad batch changes nothing
    st.update(eids, rewards_f8_b_by_H, rule="formula" | "asymmetric" | "binary" | "delta",
              horizon=None | index | name | i8[b], eta=None, q0=None, eta_task=None)

    # merges (finance's merger): active / merged_into columns, feedback follows merges
    st.merge(keep, drop);   st.canonical(eids) -> i8[b];   st.active, st.merged_into
    st.add_nodes([["Energy", "Oil supply"]], keys=None) -> i8[b]   # inner nodes, no experience
    normalized_key(text)   # text_key over lower-cased, whitespace-collapsed text

    # delayed feedback (ToE eq. (7)), saved with the store, applied exactly once
    entry_ids = st.defer(episode_ids, eids, horizons, due, actions)
    st.resolve(st.ledger.due(now), outcomes=o)   # r = action * outcome, or rewards=r

    # executors (engine.rounds): read-only dict of arrays and back
    snap = st.snapshot(copy=False);   view = ExperienceStore.from_snapshot(snap)  # StoreView

    # persistence: atomic checkpoints with a checksummed manifest
    st.save(directory, extras={"nodes.hnsw": lambda path: index.save_index(str(path))})
    st2 = ExperienceStore.load(directory);   st2.extra_paths["nodes.hnsw"] -> Path

    # the paper's path CSV (industry, factor, analysis_direction, q_h10.., recall, hit, eid)
    from engine.store import read_path_csv, write_path_csv

Kernels live in :mod:`kernels.reliability` (updates) and :mod:`kernels.store_tree`
(tree). Layout and formulas: docs/store.md.
"""

from engine.store.experience import (
    DEFAULT_HORIZONS,
    FINANCE_LEVELS,
    RULES,
    ExperienceStore,
    StoreReader,
    StoreView,
    horizon_names,
    normalized_key,
    text_key,
)
from engine.store.ledger import APPLIED, PENDING, FeedbackLedger

__all__ = [
    "APPLIED",
    "DEFAULT_HORIZONS",
    "FINANCE_LEVELS",
    "PENDING",
    "RULES",
    "ExperienceStore",
    "FeedbackLedger",
    "StoreReader",
    "StoreView",
    "horizon_names",
    "normalized_key",
    "text_key",
]
