"""Experience-tree kernels: node hash tables, batched path insertion, children, top-k.

Nodes are rows of struct-of-arrays columns (``engine.store.columns``); node 0
is the virtual root (depth 0), real nodes have depth 1..L. Children are linked
lists threaded through ``first_child``, ``last_child`` and ``next_sibling``
(insertion order, i.e. ascending node id), so no per-node Python object exists.

Two open-addressing hash tables (linear probing, ``-1`` = empty slot, size a
power of two, load <= 1/2) hold node ids:

* ``pk_table``: (parent, key) -> node id, unique (ToE: one node per perspective
  under a parent; a batch of paths reuses existing prefixes through it);
* ``key_table``: key -> newest node id with that key; older nodes with the same
  key follow through ``next_same_key`` (Game of 24: equal canonical states under
  different parents). Optional: a table of size 0 means "not built" (the
  store builds it on the first lookup by key) and is skipped on insertion.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def mix64(x):
    """splitmix64 finaliser of a uint64."""
    x = np.uint64(x)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@numba.njit(cache=True, inline="always")
def _pk_hash(parent, key):
    return mix64(np.uint64(key) ^ mix64(np.uint64(parent + 1)))


@numba.njit(cache=True)
def pk_find(pk_table, node_parent, node_key, parent, key):
    """Node id with (parent, key), or -1. pk_table i8[cap], node_parent i8[*], node_key u8[*]."""
    mask = np.uint64(pk_table.shape[0] - 1)
    slot = _pk_hash(parent, key) & mask
    while True:
        nid = pk_table[slot]
        if nid < 0:
            return -1
        if node_parent[nid] == parent and node_key[nid] == key:
            return nid
        slot = (slot + np.uint64(1)) & mask


@numba.njit(cache=True)
def _pk_insert(pk_table, parent, key, nid):
    mask = np.uint64(pk_table.shape[0] - 1)
    slot = _pk_hash(parent, key) & mask
    while pk_table[slot] >= 0:
        slot = (slot + np.uint64(1)) & mask
    pk_table[slot] = nid


@numba.njit(cache=True)
def _key_insert(key_table, node_key, next_same_key, key, nid):
    mask = np.uint64(key_table.shape[0] - 1)
    slot = mix64(key) & mask
    while True:
        cur = key_table[slot]
        if cur < 0:
            key_table[slot] = nid
            next_same_key[nid] = -1
            return
        if node_key[cur] == key:
            next_same_key[nid] = cur
            key_table[slot] = nid
            return
        slot = (slot + np.uint64(1)) & mask


@numba.njit(cache=True)
def key_find(key_table, node_key, key):
    """Newest node id whose key is ``key``, or -1."""
    mask = np.uint64(key_table.shape[0] - 1)
    slot = mix64(key) & mask
    while True:
        cur = key_table[slot]
        if cur < 0 or node_key[cur] == key:
            return cur
        slot = (slot + np.uint64(1)) & mask


@numba.njit(cache=True)
def key_find_first(key_table, node_key, next_same_key, keys, out):
    """``out i8[b]``: the lowest node id with key ``keys[i]`` (u8[b]), or -1."""
    for i in range(keys.shape[0]):
        nid = key_find(key_table, node_key, keys[i])
        while nid >= 0 and next_same_key[nid] >= 0:
            nid = next_same_key[nid]
        out[i] = nid


@numba.njit(cache=True)
def pk_find_batch(pk_table, node_parent, node_key, parents, keys, out):
    """``out i8[b]``: node with (parents[i], keys[i]) or -1. parents i8[b], keys u8[b]."""
    for i in range(keys.shape[0]):
        out[i] = pk_find(pk_table, node_parent, node_key, parents[i], keys[i])


@numba.njit(cache=True)
def rebuild_tables(pk_table, key_table, node_parent, node_key, next_same_key, n_nodes):
    """Fill empty (all -1) tables from nodes 1..n_nodes-1 in id order (key_table may be size 0)."""
    for nid in range(1, n_nodes):
        _pk_insert(pk_table, node_parent[nid], node_key[nid], nid)
        if key_table.shape[0] > 0:
            _key_insert(key_table, node_key, next_same_key, node_key[nid], nid)


@numba.njit(cache=True)
def build_key_table(key_table, node_key, next_same_key, n_nodes):
    """Fill an empty (all -1) key table and the same-key chains from nodes 1..n_nodes-1."""
    for nid in range(1, n_nodes):
        _key_insert(key_table, node_key, next_same_key, node_key[nid], nid)


@numba.njit(cache=True)
def add_key_paths(
    keys, lengths, created, q0, n_horizons,
    node_parent, node_depth, node_key, node_eid, first_child, last_child, next_sibling,
    next_same_key, pk_table, key_table, n_nodes,
    exp_path, exp_created, block, n_exp,
    out_eids, new_node_src,
):
    """Insert a batch of root-to-leaf key paths, reusing existing prefixes.

    keys u8[b, L] (row i uses ``keys[i, :lengths[i]]``), lengths i8[b] in 1..L,
    created f8[b]. Paths are inserted in order until a capacity runs out: node
    columns (capacity = their length), the tables' load factor (at most half
    full), the experience columns or ``new_node_src``. A path cut short leaves
    its new prefix nodes in place (a retry reuses them) and is not counted as
    done. A leaf that already ends an experience returns that experience's eid.
    New experiences get ``Q = q0`` on every horizon, hit = recall = 0.

    Writes out_eids i8[b] (for the inserted paths) and new_node_src i8[m]
    (``i * L + level`` of the path element that created each new node, in
    node-id order). Returns ``(n_done, n_nodes, n_exp, n_new_nodes)``.
    """
    depth_l = keys.shape[1]
    width = block.shape[1]
    node_cap = min(node_parent.shape[0], pk_table.shape[0] // 2)
    exp_cap = block.shape[0]
    src_cap = new_node_src.shape[0]
    n_new = 0
    for i in range(keys.shape[0]):
        parent = 0
        for lev in range(lengths[i]):
            key = keys[i, lev]
            nid = pk_find(pk_table, node_parent, node_key, parent, key)
            if nid < 0:
                if n_nodes >= node_cap or n_new >= src_cap:
                    return i, n_nodes, n_exp, n_new
                nid = n_nodes
                n_nodes += 1
                node_parent[nid] = parent
                node_depth[nid] = lev + 1
                node_key[nid] = key
                node_eid[nid] = -1
                first_child[nid] = -1
                last_child[nid] = -1
                next_sibling[nid] = -1
                if last_child[parent] < 0:
                    first_child[parent] = nid
                else:
                    next_sibling[last_child[parent]] = nid
                last_child[parent] = nid
                _pk_insert(pk_table, parent, key, nid)
                next_same_key[nid] = -1
                if key_table.shape[0] > 0:
                    _key_insert(key_table, node_key, next_same_key, key, nid)
                new_node_src[n_new] = i * depth_l + lev
                n_new += 1
            parent = nid
        eid = node_eid[parent]
        if eid < 0:
            if n_exp >= exp_cap:
                return i, n_nodes, n_exp, n_new
            eid = n_exp
            n_exp += 1
            node_eid[parent] = eid
            node = parent
            for lev in range(depth_l - 1, -1, -1):
                if lev >= lengths[i]:
                    exp_path[eid, lev] = -1
                else:
                    exp_path[eid, lev] = node
                    node = node_parent[node]
            exp_created[eid] = created[i]
            for j in range(width):
                block[eid, j] = 0.0
            for j in range(n_horizons):
                block[eid, j] = q0
        out_eids[i] = eid
    return keys.shape[0], n_nodes, n_exp, n_new


@numba.njit(cache=True)
def count_children(first_child, next_sibling, nodes, out):
    """``out i8[b]``: number of children of ``nodes[i]``."""
    for i in range(nodes.shape[0]):
        c = first_child[nodes[i]]
        k = 0
        while c >= 0:
            k += 1
            c = next_sibling[c]
        out[i] = k


@numba.njit(cache=True)
def list_children(first_child, next_sibling, node, out):
    """Children of ``node`` in insertion order into ``out i8[>= n_children]``; returns the count."""
    c = first_child[node]
    k = 0
    while c >= 0:
        out[k] = c
        k += 1
        c = next_sibling[c]
    return k


@numba.njit(cache=True)
def node_score(first_child, next_sibling, node_eid, block, node, hcol, agg, stack):
    """Reliability of ``node`` for horizon column ``hcol``.

    The node's own experience if it ends one; otherwise ``agg`` over the
    experiences of its subtree (0 = max, 1 = mean); NaN if the subtree has none.
    ``stack i8[>= subtree size]`` is scratch space.
    """
    e = node_eid[node]
    if e >= 0:
        return block[e, hcol]
    best = -np.inf
    total = 0.0
    cnt = 0
    top = 0
    c = first_child[node]
    while c >= 0:
        stack[top] = c
        top += 1
        c = next_sibling[c]
    while top > 0:
        top -= 1
        v = stack[top]
        e = node_eid[v]
        if e >= 0:
            q = block[e, hcol]
            cnt += 1
            total += q
            if q > best:
                best = q
        c = first_child[v]
        while c >= 0:
            stack[top] = c
            top += 1
            c = next_sibling[c]
    if cnt == 0:
        return np.nan
    if agg == 0:
        return best
    return total / cnt


@numba.njit(cache=True)
def topk_children(first_child, next_sibling, node_eid, block, nodes, hcol, k, agg, stack, out_ids, out_scores):
    """Top-``k`` children of each ``nodes[i]`` by reliability (:func:`node_score`), descending.

    Ties and NaN scores (no experience below) go last-by-id: NaN ranks below
    every number, equal scores keep insertion order. out_ids i8[b, k] and
    out_scores f8[b, k] are padded with -1 / NaN.
    """
    for i in range(nodes.shape[0]):
        for j in range(k):
            out_ids[i, j] = -1
            out_scores[i, j] = np.nan
        filled = 0
        c = first_child[nodes[i]]
        while c >= 0:
            s = node_score(first_child, next_sibling, node_eid, block, c, hcol, agg, stack)
            # insertion into the sorted prefix; NaN sorts after everything
            pos = filled
            while pos > 0:
                prev = out_scores[i, pos - 1]
                better = (not np.isnan(s)) and (np.isnan(prev) or s > prev)
                if not better:
                    break
                pos -= 1
            if pos < k:
                last = filled if filled < k else k - 1
                for j in range(last, pos, -1):
                    out_ids[i, j] = out_ids[i, j - 1]
                    out_scores[i, j] = out_scores[i, j - 1]
                out_ids[i, pos] = c
                out_scores[i, pos] = s
                if filled < k:
                    filled += 1
            c = next_sibling[c]


@numba.njit(cache=True)
def subtree_nodes(first_child, next_sibling, node, stack, out):
    """Nodes of the subtree under ``node`` (itself included) in preorder into ``out``; returns count.

    stack and out i8[>= subtree size]; children are visited in insertion order.
    """
    n = 0
    sp = 1
    stack[0] = node
    while sp > 0:
        sp -= 1
        v = stack[sp]
        out[n] = v
        n += 1
        cnt = 0
        c = first_child[v]
        while c >= 0:
            cnt += 1
            c = next_sibling[c]
        j = sp + cnt - 1
        c = first_child[v]
        while c >= 0:
            stack[j] = c
            j -= 1
            c = next_sibling[c]
        sp += cnt
    return n


@numba.njit(cache=True)
def link_tree(node_parent, node_depth, n_nodes, first_child, last_child, next_sibling):
    """Rebuild the children lists of nodes 0..n_nodes-1 from ``node_parent`` (id order).

    Returns the first node id whose parent/depth is inconsistent (parent must
    precede the child, depth = parent depth + 1, node 0 is the root), or -1.
    """
    for v in range(n_nodes):
        first_child[v] = -1
        last_child[v] = -1
        next_sibling[v] = -1
    if n_nodes == 0 or node_parent[0] != -1 or node_depth[0] != 0:
        return 0
    for v in range(1, n_nodes):
        p = node_parent[v]
        if p < 0 or p >= v or node_depth[v] != node_depth[p] + 1:
            return v
        if last_child[p] < 0:
            first_child[p] = v
        else:
            next_sibling[last_child[p]] = v
        last_child[p] = v
    return -1


@numba.njit(cache=True)
def rebuild_tables_checked(pk_table, key_table, node_parent, node_key, next_same_key, n_nodes):
    """:func:`rebuild_tables` that returns the first node duplicating a (parent, key) pair, or -1."""
    for nid in range(1, n_nodes):
        if pk_find(pk_table, node_parent, node_key, node_parent[nid], node_key[nid]) >= 0:
            return nid
        _pk_insert(pk_table, node_parent[nid], node_key[nid], nid)
        if key_table.shape[0] > 0:
            _key_insert(key_table, node_key, next_same_key, node_key[nid], nid)
    return -1


@numba.njit(cache=True)
def link_experiences(exp_path, n_exp, node_parent, n_nodes, node_eid):
    """Set ``node_eid`` from the experiences' paths; check each path is a root-to-leaf chain.

    exp_path i8[n, L] (-1 padded after the leaf). Returns the first bad eid, or -1
    (bad: empty path, node out of range, a gap, a broken parent chain, two
    experiences on one leaf).
    """
    for v in range(n_nodes):
        node_eid[v] = -1
    depth_l = exp_path.shape[1]
    for e in range(n_exp):
        parent = 0
        length = 0
        for lev in range(depth_l):
            v = exp_path[e, lev]
            if v < 0:
                break
            if v >= n_nodes or node_parent[v] != parent:
                return e
            parent = v
            length += 1
        if length == 0:
            return e
        for lev in range(length, depth_l):
            if exp_path[e, lev] != -1:
                return e
        if node_eid[parent] >= 0:
            return e
        node_eid[parent] = e
    return -1
