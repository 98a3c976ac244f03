"""Level-by-level expansion of Game-of-24 states for offline experience-tree precomputation.

ToE "Details in Game of 24": each canonical number state is a node, a move is
an edge from a parent state to one of its child states, and states equal after
canonicalisation are one node. :func:`expand_level` turns the distinct states
of one level (n numbers) into the distinct states of the next (n - 1) and the
distinct (parent, child) edges, each with the first move that produces it.
Solvability and solution suffixes come from :mod:`kernels.game24_solver`.
"""

import numba
import numpy as np

from kernels.game24_solver import (
    N_OPS,
    OP_MUL,
    OP_ORDER,
    OP_RDIV,
    OP_RSUB,
    OP_SUB,
    OP_ADD,
    SYM_ADD,
    SYM_DIV,
    SYM_MUL,
    SYM_SUB,
    apply_op,
    child_state,
    verify_steps,
)
from kernels.game24_state import state_key


@numba.njit(cache=True)
def _find_child(t_key, t_row, c_num, c_den, key, cn, cd, n):
    """Slot of the child state (cn, cd, n) in the level table, or -(empty slot + 1).

    t_key i8[cap], t_row i8[cap] (-1 = empty; cap a power of two) index rows of
    c_num/c_den; equality is decided on the canonical row, never on the key alone.
    """
    mask = t_key.shape[0] - 1
    s = np.int64(np.uint64(key) & np.uint64(mask))
    while True:
        row = t_row[s]
        if row < 0:
            return -(s + 1)
        if t_key[s] == key:
            same = True
            for c in range(n):
                if c_num[row, c] != cn[c] or c_den[row, c] != cd[c]:
                    same = False
                    break
            if same:
                return s
        s = (s + 1) & mask


@numba.njit(cache=True)
def expand_level(num, den, size, t_key, t_row, c_num, c_den, c_key, e_parent, e_child, e_move, counts):
    """Distinct children of a level and the distinct parent -> child edges.

    num, den: i8[b, 4] canonical parents, all with the same size n >= 2.
    t_key i8[cap], t_row i8[cap] filled with -1: the level's table (cap a power
    of two >= 2 * m). c_num, c_den: i8[m, 4] (padding 0/1 pre-filled), c_key
    i8[m] receive the children, m >= b * n * (n - 1) / 2 * 6. e_parent,
    e_child, e_move: i8[m] receive the edges (parent row, child row, move
    i * 64 + j * 8 + op as in kernels.game24_solver). counts: i8[3] receives
    (children, edges, overflowing moves skipped). Moves that divide by zero are
    not edges.
    """
    b = size.shape[0]
    cn = np.zeros(4, dtype=np.int64)
    cd = np.ones(4, dtype=np.int64)
    local = np.empty(64, dtype=np.int64)
    n_child = 0
    n_edge = 0
    for r in range(b):
        n = size[r]
        n_local = 0
        for i in range(n - 1):
            for j in range(i + 1, n):
                for q in range(N_OPS):
                    op = OP_ORDER[q]
                    st = child_state(num[r], den[r], n, i, j, op, cn, cd)
                    if st == 1:
                        continue
                    if st == 2:
                        counts[2] += 1
                        continue
                    key = state_key(cn, cd, n - 1)
                    s = _find_child(t_key, t_row, c_num, c_den, key, cn, cd, n - 1)
                    if s < 0:
                        s = -(s + 1)
                        t_key[s] = key
                        t_row[s] = n_child
                        for c in range(n - 1):
                            c_num[n_child, c] = cn[c]
                            c_den[n_child, c] = cd[c]
                        c_key[n_child] = key
                        n_child += 1
                    child = t_row[s]
                    seen = False
                    for k in range(n_local):
                        if local[k] == child:
                            seen = True
                            break
                    if not seen:
                        local[n_local] = child
                        n_local += 1
                        e_parent[n_edge] = r
                        e_child[n_edge] = child
                        e_move[n_edge] = i * 64 + j * 8 + op
                        n_edge += 1
    counts[0] = n_child
    counts[1] = n_edge


@numba.njit(cache=True)
def verify_batch(num, den, size, steps, count, out_ok):
    """verify_steps for each row: out_ok u1[b] = 1 when the suffix replays exactly to 24."""
    for r in range(size.shape[0]):
        out_ok[r] = 1 if verify_steps(num[r], den[r], size[r], steps[r], count[r]) else 0


@numba.njit(cache=True)
def move_steps(num, den, rows, moves, out):
    """The step ``x SYMBOL y = r`` of each move, as in kernels.game24_solver.extract_steps.

    num, den: i8[b, 4] canonical states; rows: i8[m] state row of each move;
    moves: i8[m] codes i * 64 + j * 8 + op; out: i8[m, 7] receives
    (x_num, x_den, symbol, y_num, y_den, r_num, r_den).
    """
    for e in range(rows.shape[0]):
        r = rows[e]
        mv = moves[e]
        i = mv // 64
        j = (mv // 8) % 8
        op = mv % 8
        st, rn, rd = apply_op(num[r, i], den[r, i], num[r, j], den[r, j], op)
        if op == OP_RSUB or op == OP_RDIV:
            xi, yi = j, i
        else:
            xi, yi = i, j
        out[e, 0] = num[r, xi]
        out[e, 1] = den[r, xi]
        if op == OP_ADD:
            out[e, 2] = SYM_ADD
        elif op == OP_MUL:
            out[e, 2] = SYM_MUL
        elif op == OP_SUB or op == OP_RSUB:
            out[e, 2] = SYM_SUB
        else:
            out[e, 2] = SYM_DIV
        out[e, 3] = num[r, yi]
        out[e, 4] = den[r, yi]
        out[e, 5] = rn
        out[e, 6] = rd
