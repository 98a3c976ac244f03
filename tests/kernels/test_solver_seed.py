"""The shipped solver seed is the domain's memo as a fresh search builds it, and a seeded memo
answers exactly like an empty one; a damaged seed is ignored with a warning."""

import hashlib
import itertools
import io
from fractions import Fraction

import numpy as np
import pytest

from engine.errors import InputError
from engine.game24 import solver as S

MULTISETS = [[Fraction(v) for v in m] for m in itertools.combinations_with_replacement(range(1, 14), 4)]


def _load_shipped():
    with np.load(S.SEED_PATH, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_shipped_seed_is_a_fresh_build():
    assert hashlib.sha256(S.SEED_PATH.read_bytes()).hexdigest() == S.SEED_SHA256, \
        "run scripts/build_solver_seed.py and record the digest in engine.game24.solver.SEED_SHA256"
    shipped, fresh = _load_shipped(), S.domain_memo().seed_arrays()
    assert sorted(shipped) == sorted(fresh)
    for k in fresh:
        np.testing.assert_array_equal(shipped[k], fresh[k], err_msg=k)
        assert shipped[k].dtype == fresh[k].dtype


@pytest.fixture
def fresh_process_memo(monkeypatch):
    monkeypatch.setattr(S, "_MEMO", None)
    yield
    S._MEMO = None


def _answers(memo, states):
    num, den, size, _ = S.canonicalize_batch(states)
    status = memo.solve_canonical(num, den, size)
    steps, count = memo.steps_canonical(num, den, size)
    return status.tolist(), steps.tolist(), count.tolist()


def test_seeded_memo_answers_like_an_empty_one(fresh_process_memo):
    seeded = S.shared_memo()
    assert seeded.size == _load_shipped()["size"].shape[0] > 9000
    rng = np.random.default_rng(5)
    extra = [[Fraction(int(a), int(d)) for a, d in zip(rng.integers(-30, 31, k), rng.integers(1, 7, k))]
             for k in rng.integers(2, 5, 500)]
    states = MULTISETS + extra
    assert _answers(seeded, states) == _answers(S.SolverMemo(), states)


def test_damaged_seed_is_ignored_with_a_warning(tmp_path, monkeypatch, fresh_process_memo):
    raw = bytearray(S.SEED_PATH.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    bad = tmp_path / "solver_memo.npz"
    bad.write_bytes(bytes(raw))
    monkeypatch.setattr(S, "SEED_PATH", bad)
    with pytest.warns(UserWarning, match="solver seed not used .*digest"):
        memo = S.shared_memo()
    assert memo.size == 0
    assert S.solve_steps([4, 9, 10, 13]) is not None
    monkeypatch.setattr(S, "SEED_PATH", tmp_path / "missing.npz")
    S._MEMO = None
    with pytest.warns(UserWarning, match="solver seed not used"):
        assert S.shared_memo().size == 0


def _seed(**change):
    arrays = _load_shipped()
    arrays.update(change)
    return arrays


@pytest.mark.parametrize("key, edit, match", [
    ("num", lambda a: a["num"][:, ::-1].copy(), "canonical"),
    ("status", lambda a: np.full_like(a["status"], 2), "domain"),
    ("move", lambda a: np.where(a["status"] == 1, -1, a["move"]).astype(a["move"].dtype), "domain"),
    ("size", lambda a: np.full_like(a["size"], 2), "domain"),
])
def test_bad_seed_arrays_are_refused(key, edit, match):
    arrays = _load_shipped()
    arrays[key] = edit(arrays)
    memo = S.SolverMemo()
    with pytest.raises(InputError, match=match):
        memo.load_seed(arrays)
    assert memo.size == 0


def test_seed_checks_duplicates_shapes_and_an_empty_memo():
    arrays = _load_shipped()
    dup = {k: np.concatenate([v, v[:1]]) for k, v in arrays.items()}
    with pytest.raises(InputError, match="twice"):
        S.SolverMemo().load_seed(dup)
    with pytest.raises(InputError, match="shapes"):
        S.SolverMemo().load_seed(_seed(move=arrays["move"][:-1]))
    with pytest.raises(InputError, match="missing"):
        S.SolverMemo().load_seed({"num": arrays["num"]})
    memo = S.SolverMemo()
    memo.load_seed(arrays)
    with pytest.raises(InputError, match="empty memo"):
        memo.load_seed(arrays)
