"""state_keys' vectorised door gives the checked path's keys and refuses what the checked path refuses."""

from fractions import Fraction

import numpy as np
import pytest

from engine.errors import InputError
from engine.game24 import solver as S
from engine.game24.solver import state_key, state_keys


def _random_states(n, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 5))
        vals = []
        for _ in range(k):
            a, d = int(rng.integers(-60, 61)), int(rng.integers(1, 13)) * int(rng.choice([-1, 1]))
            vals.append(Fraction(a, d) if rng.random() < 0.7 else a)  # ints and Fractions mixed
        out.append(tuple(vals))
    return out


def test_fast_door_equals_one_state_at_a_time_on_fractions_and_mixed_ints():
    mixed = _random_states(500)
    fractions_only = [tuple(Fraction(v) for v in s) for s in mixed]
    for states in (mixed, fractions_only):
        assert S._pack_fast(states) is not None
        assert state_keys(states).tolist() == [state_key(s) for s in states]
    # text and NumPy integers take the checked path and give the same keys
    texts = [[str(Fraction(v)) for v in s] for s in mixed[:50]]
    assert S._pack_fast(texts) is None
    assert state_keys(texts).tolist() == state_keys(mixed[:50]).tolist()
    npints = [np.array([4, 9, 10, 13])]
    assert state_keys(npints).tolist() == state_keys([(4, 9, 10, 13)]).tolist()
    assert state_keys(iter(mixed[:5])).tolist() == state_keys(mixed[:5]).tolist()


@pytest.mark.parametrize("bad, match", [
    ([(1, 2), ()], r"states\[1\] must hold 1 to 4 numbers"),
    ([(1, 2, 3, 4, 5)], r"states\[0\] must hold 1 to 4 numbers"),
    ([(1, True)], r"bool"),
    ([(1, 2.5)], r"states\[0\]\[1\]"),
    ([(Fraction(2**63, 3), 1)], r"states\[0\] exceeds the int64 key range"),
    ([(2**62, 1)], r"states\[0\] exceeds the int64 key range"),
])
def test_bad_states_still_get_the_checked_paths_errors(bad, match):
    assert S._pack_fast(bad) is None
    with pytest.raises(InputError, match=match):
        state_keys(bad)
