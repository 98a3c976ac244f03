"""Game-of-24 search over canonical states, memoised in a compiled hash table.

A move takes two numbers a, b at positions i < j of a canonical state and
replaces them by one of a+b, a-b, b-a, a*b, a/b, b/a (no division by zero;
negatives and fractions allowed in between). A state of one number is solved
when it equals 24/1. Every state met is canonicalised (kernels.game24_state)
and the 3- and 4-number states are memoised, so a whole puzzle set shares work
(2-number states are decided directly by :func:`solve_pair`): the memo is a struct of arrays

    t_used u1[cap], t_key i8[cap], t_num i8[cap, 4], t_den i8[cap, 4], t_size i8[cap]
    t_status i1[cap]   SOLVABLE, UNSOLVABLE or UNKNOWN (overflow met, no solution found)
    t_move i8[cap]     for SOLVABLE states: i * 64 + j * 8 + op (the first move to a solvable child)
    meta i8[2]         [number of used slots, overflow events]

with cap a power of two. Arithmetic is exact on int64 with gcd reduction and
overflow checks: magnitudes stay <= LIMIT = 2**62 - 1 and an operation whose
result would not is skipped and counted in meta[1]; a state whose search hit
such an operation and found no solution is UNKNOWN (the engine then answers it
with Python Fractions).
"""

import numba
import numpy as np

from kernels.game24_state import gcd, sort_row, state_key, table_find, table_put

LIMIT = np.int64(2**62 - 1)
TARGET = 24

UNSOLVABLE = 0
SOLVABLE = 1
UNKNOWN = 2

# ops of a move on (a, b) = (state[i], state[j])
OP_ADD, OP_SUB, OP_RSUB, OP_MUL, OP_DIV, OP_RDIV = 0, 1, 2, 3, 4, 5
N_OPS = 6
# search order: in a canonical state a <= b for integers (rows sort by (num, den)), so
# b - a and b / a come first and found solutions prefer non-negative, >= 1 intermediates
OP_ORDER = np.array([OP_ADD, OP_MUL, OP_RSUB, OP_RDIV, OP_SUB, OP_DIV], dtype=np.int64)
# operator codes in extracted steps: x SYMBOL y = r
SYM_ADD, SYM_SUB, SYM_MUL, SYM_DIV = 0, 1, 2, 3

_SMALL = 1 << 20  # below this, solve_pair decides with cross products only

MAX_NEW_PER_ROOT = 1 + 36  # states one 4-number search can add (2-number states are not memoised)


@numba.njit(cache=True)
def _mul_ok(a, b):
    """True when |a * b| <= LIMIT (a, b int64 with |a|, |b| <= LIMIT)."""
    if a == 0 or b == 0:
        return True
    return abs(a) <= LIMIT // abs(b)


@numba.njit(cache=True)
def apply_op(an, ad, bn, bd, op):
    """Exact a op b for reduced a = an/ad, b = bn/bd (ad, bd > 0).

    Returns (status, rn, rd): status 0 = ok with rn/rd reduced (rd > 0),
    1 = division by zero, 2 = int64 overflow avoided.
    """
    if op == OP_RSUB or op == OP_RDIV:
        an, ad, bn, bd = bn, bd, an, ad
    if op == OP_ADD or op == OP_SUB or op == OP_RSUB:
        if op != OP_ADD:
            bn = -bn
        if ad == 1 and bd == 1:  # integers: the common case, no gcd needed
            x = an + bn
            if abs(x) > LIMIT:
                return 2, 0, 1
            return 0, x, 1
        g = gcd(ad, bd)
        ad_g = ad // g
        bd_g = bd // g
        if not (_mul_ok(an, bd_g) and _mul_ok(bn, ad_g) and _mul_ok(ad, bd_g)):
            return 2, 0, 1
        x = an * bd_g + bn * ad_g  # |x| <= 2 * LIMIT < 2**63
        d = ad * bd_g
        if abs(x) > LIMIT:
            return 2, 0, 1
        h = gcd(x, d)
        if h > 1:
            x //= h
            d //= h
        if x == 0:
            d = 1
        return 0, x, d
    if op == OP_DIV or op == OP_RDIV:
        if bn == 0:
            return 1, 0, 1
        # a / b = a * (bd / bn)
        if bn < 0:
            bn, bd = -bd, -bn
        else:
            bn, bd = bd, bn
    # multiplication by (bn / bd), both reduced, bd > 0
    if ad == 1 and bd == 1:
        if not _mul_ok(an, bn):
            return 2, 0, 1
        return 0, an * bn, 1
    g1 = gcd(an, bd)
    g2 = gcd(bn, ad)
    if g1 > 1:
        an //= g1
        bd //= g1
    if g2 > 1:
        bn //= g2
        ad //= g2
    if not (_mul_ok(an, bn) and _mul_ok(ad, bd)):
        return 2, 0, 1
    x = an * bn
    d = ad * bd
    if x == 0:
        d = 1
    return 0, x, d


@numba.njit(cache=True)
def child_state(num, den, n, i, j, op, out_num, out_den):
    """Canonical state after the move (i, j, op) on canonical state (num, den, n).

    out_num, out_den: i8[4] scratch. Returns the apply_op status; on 0 the
    child (n - 1 numbers) is in out_* in canonical form.
    """
    st, rn, rd = apply_op(num[i], den[i], num[j], den[j], op)
    if st != 0:
        return st
    m = 0
    for k in range(n):
        if k != i and k != j:
            out_num[m] = num[k]
            out_den[m] = den[k]
            m += 1
    out_num[m] = rn
    out_den[m] = rd
    for k in range(m + 1, out_num.shape[0]):
        out_num[k] = 0
        out_den[k] = 1
    sort_row(out_num, out_den, n - 1)  # every pair is already reduced
    return 0


@numba.njit(cache=True)
def solve_pair(an, ad, bn, bd):
    """The first move (i=0, j=1) that turns the 2-number canonical state into 24.

    Returns the move code ``8 + op`` (>= 0), -1 if none exists, -2 if none was
    found but an operation overflowed (the answer is then unknown).
    """
    if abs(an) < _SMALL and ad < _SMALL and abs(bn) < _SMALL and bd < _SMALL:
        # exact cross-multiplied tests, no reduction: every product is < 2**47
        x = an * bd
        y = bn * ad
        t = TARGET * ad * bd
        for q in range(N_OPS):
            op = OP_ORDER[q]
            if op == OP_ADD:
                hit = x + y == t
            elif op == OP_SUB:
                hit = x - y == t
            elif op == OP_RSUB:
                hit = y - x == t
            elif op == OP_MUL:
                hit = an * bn == t
            elif op == OP_DIV:
                hit = bn != 0 and x == TARGET * ad * bn
            else:
                hit = an != 0 and y == TARGET * bd * an
            if hit:
                return 8 + op
        return -1
    unknown = False
    for q in range(N_OPS):
        op = OP_ORDER[q]
        st, rn, rd = apply_op(an, ad, bn, bd, op)
        if st == 0:
            if rn == TARGET and rd == 1:
                return 8 + op
        elif st == 2:
            unknown = True
    return -2 if unknown else -1


@numba.njit(cache=True)
def solve_state(num, den, n, t_used, t_key, t_num, t_den, t_size, t_status, t_move, meta):
    """Search state (num, den, n) (canonical, n in 1..4); returns its status.

    States of 3 and 4 numbers are memoised; 2-number states are decided
    directly by :func:`solve_pair` (6 operations: cheaper than a table probe).
    The table must have room for MAX_NEW_PER_ROOT more states (the caller grows
    it between roots).
    """
    if n == 1:
        if num[0] == TARGET and den[0] == 1:
            return SOLVABLE
        return UNSOLVABLE
    if n == 2:
        mv = solve_pair(num[0], den[0], num[1], den[1])
        if mv >= 0:
            return SOLVABLE
        if mv == -2:
            meta[1] += 1
            return UNKNOWN
        return UNSOLVABLE
    key = state_key(num, den, n)
    s = table_find(t_used, t_key, t_num, t_den, t_size, key, num, den, n)
    if s >= 0:
        return t_status[s]
    cn = np.zeros(4, dtype=np.int64)
    cd = np.ones(4, dtype=np.int64)
    status = UNSOLVABLE
    move = -1
    for i in range(n - 1):
        if status == SOLVABLE:
            break
        for j in range(i + 1, n):
            if status == SOLVABLE:
                break
            for q in range(N_OPS):
                # a+b == b+a and a*b == b*a: the reversed forms are separate ops only for - and /
                op = OP_ORDER[q]
                st = child_state(num, den, n, i, j, op, cn, cd)
                if st == 1:
                    continue
                if st == 2:
                    meta[1] += 1
                    status = UNKNOWN
                    continue
                cs = solve_state(cn, cd, n - 1, t_used, t_key, t_num, t_den, t_size, t_status, t_move, meta)
                if cs == SOLVABLE:
                    status = SOLVABLE
                    move = i * 64 + j * 8 + op
                    break
                if cs == UNKNOWN:
                    status = UNKNOWN
    # children were inserted meanwhile and may have taken the empty slot found above
    s = table_find(t_used, t_key, t_num, t_den, t_size, key, num, den, n)
    s = -(s + 1)
    table_put(t_used, t_key, t_num, t_den, t_size, s, key, num, den, n)
    t_status[s] = status
    t_move[s] = move
    meta[0] += 1
    return status


@numba.njit(cache=True)
def solve_batch(num, den, size, start, max_used, t_used, t_key, t_num, t_den, t_size, t_status, t_move, meta, out_status):
    """Solve rows start.. of a batch of canonical states, sharing the memo.

    num, den: i8[b, 4] canonical rows; size: i8[b]; out_status: i1[b].
    Stops before a row when meta[0] + MAX_NEW_PER_ROOT > max_used and returns
    the index of the first unsolved row (b when all are done), so the caller
    can grow the table and resume.
    """
    b = size.shape[0]
    for r in range(start, b):
        if meta[0] + MAX_NEW_PER_ROOT > max_used:
            return r
        out_status[r] = solve_state(num[r], den[r], size[r], t_used, t_key, t_num, t_den, t_size, t_status, t_move, meta)
    return b


@numba.njit(cache=True)
def extract_steps(num, den, n, t_used, t_key, t_num, t_den, t_size, t_status, t_move, out):
    """Write the memoised solution path of a SOLVABLE canonical state.

    out: i8[3, 7]; row k is step k as (x_num, x_den, symbol, y_num, y_den,
    r_num, r_den) meaning ``x SYMBOL y = r`` with SYM_ADD/SUB/MUL/DIV. Returns
    the number of steps written (n - 1), or -1 if the path is not in the memo
    or does not end at 24 (which would be a bug).
    """
    cn = np.zeros(4, dtype=np.int64)
    cd = np.ones(4, dtype=np.int64)
    wn = np.zeros(4, dtype=np.int64)
    wd = np.ones(4, dtype=np.int64)
    for k in range(n):
        wn[k] = num[k]
        wd[k] = den[k]
    m = n
    steps = 0
    while m > 1:
        if m == 2:
            mv = solve_pair(wn[0], wd[0], wn[1], wd[1])
            if mv < 0:
                return -1
        else:
            key = state_key(wn, wd, m)
            s = table_find(t_used, t_key, t_num, t_den, t_size, key, wn, wd, m)
            if s < 0 or t_status[s] != SOLVABLE:
                return -1
            mv = t_move[s]
        i = mv // 64
        j = (mv // 8) % 8
        op = mv % 8
        st, rn, rd = apply_op(wn[i], wd[i], wn[j], wd[j], op)
        if st != 0:
            return -1
        if op == OP_RSUB or op == OP_RDIV:
            xi, yi = j, i
        else:
            xi, yi = i, j
        out[steps, 0] = wn[xi]
        out[steps, 1] = wd[xi]
        if op == OP_ADD:
            out[steps, 2] = SYM_ADD
        elif op == OP_MUL:
            out[steps, 2] = SYM_MUL
        elif op == OP_SUB or op == OP_RSUB:
            out[steps, 2] = SYM_SUB
        else:
            out[steps, 2] = SYM_DIV
        out[steps, 3] = wn[yi]
        out[steps, 4] = wd[yi]
        out[steps, 5] = rn
        out[steps, 6] = rd
        child_state(wn, wd, m, i, j, op, cn, cd)
        for k in range(4):
            wn[k] = cn[k]
            wd[k] = cd[k]
        m -= 1
        steps += 1
    if wn[0] != TARGET or wd[0] != 1:
        return -1
    return steps


@numba.njit(cache=True)
def extract_batch(num, den, size, t_used, t_key, t_num, t_den, t_size, t_status, t_move, out_steps, out_count):
    """extract_steps for each row: out_steps i8[b, 3, 7], out_count i8[b] (-1 if none)."""
    for r in range(size.shape[0]):
        out_count[r] = extract_steps(num[r], den[r], size[r], t_used, t_key, t_num, t_den, t_size, t_status, t_move, out_steps[r])


@numba.njit(cache=True)
def verify_steps(num, den, n, steps, count):
    """Replay extracted steps exactly: each operand present, result right, ends at 24.

    steps: i8[3, 7] as written by :func:`extract_steps`. Returns True when the
    count == n - 1 steps are legal moves from (num, den, n) and leave 24/1.
    """
    if count != n - 1:
        return False
    wn = np.zeros(4, dtype=np.int64)
    wd = np.ones(4, dtype=np.int64)
    used = np.zeros(4, dtype=np.uint8)
    for k in range(n):
        wn[k] = num[k]
        wd[k] = den[k]
    m = n
    for s in range(count):
        xi = -1
        yi = -1
        for k in range(m):
            used[k] = 0
        for k in range(m):
            if xi < 0 and wn[k] == steps[s, 0] and wd[k] == steps[s, 1]:
                xi = k
                used[k] = 1
        for k in range(m):
            if yi < 0 and used[k] == 0 and wn[k] == steps[s, 3] and wd[k] == steps[s, 4]:
                yi = k
        if xi < 0 or yi < 0:
            return False
        sym = steps[s, 2]
        if sym == SYM_ADD:
            op = OP_ADD
        elif sym == SYM_SUB:
            op = OP_SUB
        elif sym == SYM_MUL:
            op = OP_MUL
        elif sym == SYM_DIV:
            op = OP_DIV
        else:
            return False
        st, rn, rd = apply_op(wn[xi], wd[xi], wn[yi], wd[yi], op)
        if st != 0 or rn != steps[s, 5] or rd != steps[s, 6]:
            return False
        # remove xi, yi; append r
        q = 0
        for k in range(m):
            if k != xi and k != yi:
                wn[q] = wn[k]
                wd[q] = wd[k]
                q += 1
        wn[q] = rn
        wd[q] = rd
        m -= 1
    return m == 1 and wn[0] == TARGET and wd[0] == 1


@numba.njit(cache=True)
def rehash(o_used, o_key, o_num, o_den, o_size, o_status, o_move, t_used, t_key, t_num, t_den, t_size, t_status, t_move):
    """Copy every used slot of the old table into the (larger, empty) new one."""
    for s in range(o_key.shape[0]):
        if o_used[s] == 0:
            continue
        n = o_size[s]
        d = table_find(t_used, t_key, t_num, t_den, t_size, o_key[s], o_num[s], o_den[s], n)
        d = -(d + 1)
        table_put(t_used, t_key, t_num, t_den, t_size, d, o_key[s], o_num[s], o_den[s], n)
        t_status[d] = o_status[s]
        t_move[d] = o_move[s]
