"""Offline precomputation against an independent pure-Python Fraction reference."""

import itertools
import json
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest

from engine.errors import InputError, PersistenceError, PuzzleError
from engine.game24 import load_puzzles, state_key, test_split, verify_step
from engine.game24.precompute import load_into_store, precompute, read_tables, to_tables, write_tables

# ---------------------------------------------------------------- independent reference


def ref_children(state):
    out = set()
    for i, j in itertools.combinations(range(len(state)), 2):
        a, b = state[i], state[j]
        rest = [state[k] for k in range(len(state)) if k not in (i, j)]
        rs = [a + b, a - b, b - a, a * b] + ([a / b] if b else []) + ([b / a] if a else [])
        for r in rs:
            out.add(tuple(sorted(rest + [r])))
    return out


@lru_cache(maxsize=None)
def ref_solvable(state):
    if len(state) == 1:
        return state[0] == 24
    return any(ref_solvable(c) for c in ref_children(state))


def ref_precompute(puzzles):
    roots = {tuple(sorted(Fraction(n) for n in p.numbers)) for p in puzzles}
    levels = {4: roots}
    edges = {}
    for n in (4, 3):
        kids = {s: ref_children(s) for s in levels[n]}
        edges[n] = sum(len(k) for k in kids.values())
        levels[n - 1] = set().union(*kids.values())
    counts = {
        str(n): {
            "states": len(levels[n]),
            "solvable": sum(ref_solvable(s) for s in levels[n]),
            "edges_out": edges.get(n, 0),
        }
        for n in (4, 3, 2)
    }
    return levels, counts


def level_states(level):
    return {
        tuple(sorted(Fraction(int(level.num[r, c]), int(level.den[r, c])) for c in range(level.n)))
        for r in range(len(level))
    }


@pytest.fixture(scope="module")
def split():
    return test_split(load_puzzles())


@pytest.fixture(scope="module")
def split_pre(split):
    return precompute(split)


# ---------------------------------------------------------------- tests


def test_levels_and_counts_match_reference_on_test_split(split, split_pre):
    levels, counts = ref_precompute(split)
    assert split_pre.counts() == counts
    for n in (4, 3, 2):
        lv = split_pre.levels[n]
        assert level_states(lv) == levels[n]
        assert len(set(lv.key.tolist())) == len(lv)  # distinct states, distinct keys
        for r in range(0, len(lv), 97):
            state = [Fraction(int(lv.num[r, c]), int(lv.den[r, c])) for c in range(n)]
            assert int(lv.key[r]) == state_key(state)
            assert bool(lv.solvable[r]) == ref_solvable(tuple(sorted(state)))
    assert split_pre.overflow == 0


@pytest.mark.heavy  # ~35 s of pure-Python reference: pytest -m heavy
def test_counts_match_reference_on_all_1362_puzzles():
    puzzles = load_puzzles()
    pre = precompute(puzzles)
    _, counts = ref_precompute(puzzles)
    assert pre.counts() == counts
    assert counts["4"] == {"states": 1362, "solvable": 1362, "edges_out": counts["4"]["edges_out"]}


def test_tables_suffixes_verify_and_roundtrip(tmp_path, split, split_pre):
    manifest = write_tables(split_pre, tmp_path / "pre", source="tot-test")
    assert manifest["levels"] == split_pre.counts()
    t = read_tables(tmp_path / "pre")
    assert json.loads((tmp_path / "pre" / "manifest.json").read_text())["source"] == "tot-test"
    assert t["puzzles"].num_rows == len(split)
    assert t["puzzles"].column("rank").to_pylist() == list(range(901, 1001))
    states, exps, edges = t["states"], t["experiences"], t["edges"]
    assert states.num_rows == sum(len(lv) for lv in split_pre.levels.values())
    n_solvable = sum(int(lv.solvable.sum()) for lv in split_pre.levels.values())
    assert exps.num_rows == n_solvable
    assert exps.column("reliability").to_pylist() == [1.0] * n_solvable
    assert all(exps.column("verified").to_pylist())
    assert edges.num_rows == sum(e.parent.shape[0] for e in split_pre.edges.values())
    # every suffix is a legal ToT trajectory from its state to 24, checked by the text verifier
    for state, suffix, n_steps in zip(
        exps.column("state").to_pylist(), exps.column("suffix").to_pylist(), exps.column("n_steps").to_pylist()
    ):
        cur = state
        lines = suffix.split("\n")
        assert len(lines) == n_steps
        for line in lines:
            v = verify_step(line, cur)
            assert v.ok, (state, line, v)
            cur = v.state
        assert cur == (Fraction(24),)
    # every edge step is legal from its parent and lands on its child
    text_of = dict(zip(states.column("key").to_pylist(), states.column("state").to_pylist()))
    for row in edges.slice(0, 400).to_pylist():
        parent = text_of[row["parent_key"]]
        v = verify_step(f"{row['step']} (left: {text_of[row['child_key']]})", parent)
        assert v.ok, (row, v)


def test_load_into_store(split, split_pre):
    tables = to_tables(split_pre)
    load = load_into_store(tables)
    st = load.store
    # reference path count: solvable roots, their solvable children, their solvable grandchildren
    levels, _ = ref_precompute(split)
    n_paths = 0
    for r in levels[4]:
        if ref_solvable(r):
            n_paths += 1
            for c in ref_children(r):
                if ref_solvable(c):
                    n_paths += 1 + sum(ref_solvable(g) for g in ref_children(c))
    assert load.eids.shape[0] == n_paths == st.n_experiences
    assert np.all(st.reliability == 1.0)
    assert st.depth == 3 and st.levels == ("state4", "state3", "state2")
    # nodes are keyed by canonical state keys; texts are the states
    root = st.find_key([state_key([4, 9, 10, 13])])
    if (4, 9, 10, 13) in {p.numbers for p in split}:
        assert root[0] >= 0
    eid = int(load.eids[0])
    path = st.path_texts(eid)
    assert len(path) == load.path_lengths[0]
    suffix = load.suffix(eid)
    assert verify_step(suffix.split("\n")[0], path[-1]).ok
    deep = int(np.flatnonzero(load.path_lengths == 3)[0])
    texts = st.path_texts(int(load.eids[deep]))
    assert [len(t.split()) for t in texts] == [4, 3, 2]
    u64 = [int(k) & ((1 << 64) - 1) for k in load.path_keys[deep]]  # the store keys nodes by uint64
    assert st.node_column("key")[st.find_path(u64)] == np.uint64(u64[2])
    with pytest.raises(InputError, match="was not added"):
        load.suffix(10**9)


def test_duplicate_puzzles_share_roots():
    pre = precompute(["4 9 10 13", "13 10 9 4", "1 1 1 1"])
    assert len(pre.levels[4]) == 2
    assert pre.root_of_puzzle.tolist() == [0, 0, 1]
    assert pre.counts()["4"]["solvable"] == 1


def test_precompute_errors(tmp_path):
    with pytest.raises(InputError, match="at least one puzzle"):
        precompute([])
    with pytest.raises(PuzzleError, match="numbers must be in 1..13"):
        precompute(["1 2 3 99"])
    with pytest.raises(PersistenceError, match="no manifest.json"):
        read_tables(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(PersistenceError, match="has format 'other'"):
        read_tables(tmp_path)
    pre = precompute(["4 9 10 13"])
    write_tables(pre, tmp_path / "x")
    good = (tmp_path / "x" / "edges.parquet").read_bytes()
    (tmp_path / "x" / "edges.parquet").write_bytes(b"garbage")
    with pytest.raises(PersistenceError, match=r"edges.parquet has 7 bytes, the manifest says \d+ \(truncated"):
        read_tables(tmp_path / "x")
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF  # same size, one byte changed: only the sha256 sees it
    (tmp_path / "x" / "edges.parquet").write_bytes(bytes(flipped))
    with pytest.raises(PersistenceError, match="edges.parquet does not match its sha256"):
        read_tables(tmp_path / "x")
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    del manifest["files"]  # a folder written before checksums: the Parquet reader is the last check
    (tmp_path / "x" / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "x" / "edges.parquet").write_bytes(b"garbage")
    with pytest.raises(PersistenceError, match="not a readable Parquet file"):
        read_tables(tmp_path / "x")
    (tmp_path / "x" / "edges.parquet").unlink()
    with pytest.raises(PersistenceError, match="missing edges.parquet"):
        read_tables(tmp_path / "x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is not a directory"):
        write_tables(pre, tmp_path / "file")


def test_cli_precompute(tmp_path, capsys):
    from engine.cli import main

    pf = tmp_path / "p.txt"
    pf.write_text("4 9 10 13\n1 1 1 1\n")
    assert main(["game24", "precompute", "--puzzles", str(pf), "--out", str(tmp_path / "o"), "--store", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    pre = precompute(["4 9 10 13", "1 1 1 1"])
    for n, c in pre.counts().items():
        assert f"{n:>5} {c['states']:>8} {c['solvable']:>9} {c['edges_out']:>10}" in out
    assert (tmp_path / "o" / "states.parquet").is_file()
    from engine.store import ExperienceStore

    st = ExperienceStore.load(tmp_path / "s")
    assert st.n_experiences > 0 and st.depth == 3
    assert main(["game24", "precompute", "--puzzles", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 1
    assert "does not exist" in capsys.readouterr().err
