"""Puzzle parsing, the shipped ToT puzzle file, the test split and all 1,820 multisets."""

import itertools
from fractions import Fraction
from functools import lru_cache

import pytest

from engine.errors import PersistenceError, PuzzleError
from engine.game24 import Puzzle, all_multisets, load_puzzles, parse_puzzle, test_split
from engine.game24.puzzles import default_puzzle_file, with_solvable


@lru_cache(maxsize=None)
def ref_solvable(values):
    if len(values) == 1:
        return values[0] == 24
    for i, j in itertools.combinations(range(len(values)), 2):
        a, b = values[i], values[j]
        rest = [values[k] for k in range(len(values)) if k not in (i, j)]
        rs = [a + b, a - b, b - a, a * b] + ([a / b] if b else []) + ([b / a] if a else [])
        if any(ref_solvable(tuple(sorted(rest + [r]))) for r in rs):
            return True
    return False


def test_parse_puzzle_forms():
    assert parse_puzzle("4 9 10 13").numbers == (4, 9, 10, 13)
    assert parse_puzzle(" 13, 4,9 ,10 ").numbers == (13, 4, 9, 10)
    assert parse_puzzle([1, 1, 4, 6]).numbers == (1, 1, 4, 6)
    assert parse_puzzle(("2", "3", "4", "5")).text == "2 3 4 5"
    assert parse_puzzle("0 20 3 4", lo=0, hi=20).numbers == (0, 20, 3, 4)
    assert parse_puzzle(Puzzle(rank=3, numbers=(1, 2, 3, 4))).numbers == (1, 2, 3, 4)


@pytest.mark.parametrize(
    "bad, match",
    [
        ("1 2 3", r"'1 2 3' must have exactly 4 numbers, got 3"),
        ("1 2 3 4 5", r"must have exactly 4 numbers, got 5"),
        ("", r"must have exactly 4 numbers, got 0"),
        ("1 2 3 14", r"'1 2 3 14': numbers must be in 1\.\.13, got \[14\]"),
        ("0 2 3 4", r"numbers must be in 1\.\.13, got \[0\]"),
        ("1 two 3 4", r"'two' is not an integer"),
        ("1 2.5 3 4", r"'2\.5' is not an integer"),
        ([1, 2, 3, 4.0], r"4\.0 is not an integer"),
        ([1, 2, True, 4], r"True is not an integer"),
        (1234, r"got int 1234"),
    ],
)
def test_parse_puzzle_rejects(bad, match):
    with pytest.raises(PuzzleError, match=match):
        parse_puzzle(bad)


def test_parse_puzzle_bounds_are_configurable():
    with pytest.raises(PuzzleError, match=r"numbers must be in 1\.\.10, got \[11, 12\]"):
        parse_puzzle("11 12 1 2", hi=10)
    with pytest.raises(PuzzleError, match="lo <= hi"):
        parse_puzzle("1 2 3 4", lo=5, hi=2)
    with pytest.raises(PuzzleError, match="lo must be an int"):
        parse_puzzle("1 2 3 4", lo=1.5)


def test_shipped_file_is_the_tot_file(shared_dir):
    shipped = default_puzzle_file().read_bytes()
    assert shipped == (shared_dir / "data" / "game24" / "24.csv").read_bytes()


def test_load_default_puzzles_and_test_split():
    puzzles = load_puzzles()
    assert len(puzzles) == 1362
    assert [p.rank for p in puzzles] == list(range(1, 1363))
    assert puzzles[0].numbers == (1, 1, 4, 6) and puzzles[0].amt_s == pytest.approx(4.4)
    assert puzzles[0].solved_rate == pytest.approx(0.992)
    split = test_split(puzzles)
    assert len(split) == 100
    assert split[0].rank == 901 and split[-1].rank == 1000
    assert split[0] == puzzles[900]
    # the file holds exactly the solvable multisets of 1..13
    assert {tuple(sorted(p.numbers)) for p in puzzles} == {m.numbers for m in all_multisets() if m.solvable}


def test_all_multisets_flags_match_reference():
    ms = all_multisets()
    assert len(ms) == 1820
    assert ms[0].numbers == (1, 1, 1, 1) and ms[-1].numbers == (13, 13, 13, 13)
    assert sum(m.solvable for m in ms) == 1362
    for m in ms[::7]:  # a spread subset: the full check is in tests/kernels
        assert m.solvable == ref_solvable(tuple(Fraction(n) for n in m.numbers))
    assert len(all_multisets(1, 3)) == 15


def test_with_solvable():
    ps = with_solvable([parse_puzzle("1 1 1 1"), parse_puzzle("4 9 10 13")])
    assert [p.solvable for p in ps] == [False, True]


def test_load_plain_and_csv_files(tmp_path):
    plain = tmp_path / "p.txt"
    plain.write_text("# my puzzles\n4 9 10 13\n\n1 1 4 6  # easy\n")
    ps = load_puzzles(plain)
    assert [(p.rank, p.numbers) for p in ps] == [(1, (4, 9, 10, 13)), (2, (1, 1, 4, 6))]
    csvf = tmp_path / "p.csv"
    csvf.write_text("Rank,Puzzles,AMT (s),Solved rate\n7,3 3 8 8,100.5,50%\n")
    (p,) = load_puzzles(csvf)
    assert p.rank == 7 and p.numbers == (3, 3, 8, 8) and p.solved_rate == pytest.approx(0.5)


def test_load_puzzles_errors(tmp_path):
    with pytest.raises(PersistenceError, match="does not exist"):
        load_puzzles(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("Rank,Numbers\n1,1 2 3 4\n")
    with pytest.raises(PersistenceError, match=r"missing columns \['Puzzles'\]"):
        load_puzzles(bad)
    bad.write_text("Rank,Puzzles\n1,1 2 3 40\n")
    with pytest.raises(PuzzleError, match=r"line 2: puzzle '1 2 3 40'"):
        load_puzzles(bad)
    bad.write_text("Rank,Puzzles\nx,1 2 3 4\n")
    with pytest.raises(PersistenceError, match="Rank 'x' is not an integer"):
        load_puzzles(bad)
    bad.write_text("# nothing\n")
    with pytest.raises(PersistenceError, match="holds no puzzles"):
        load_puzzles(bad)
    with pytest.raises(PuzzleError, match="first <= last"):
        test_split([], 10, 1)


def test_cli_solve(capsys):
    from engine.cli import main

    assert main(["game24", "solve", "4", "9", "10", "13", "--steps"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("= 24") and len(out) == 4 and out[-1].endswith("(left: 24)")
    assert main(["game24", "solve", "1", "1", "1", "1"]) == 0
    assert "no solution" in capsys.readouterr().out
    assert main(["game24", "solve", "1", "2", "3", "4", "--all", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["game24", "solve", "1", "2", "3", "14"]) == 1
    assert "numbers must be in 1..13, got [14]" in capsys.readouterr().err
    assert main(["game24", "solve", "1", "2", "3"]) == 1
    assert "exactly 4 numbers, got 3" in capsys.readouterr().err
    assert main(["game24", "solve", "1", "2", "three", "4"]) == 1
    assert "'three' is not an integer" in capsys.readouterr().err
    assert main(["game24", "solve", "14", "20", "30", "1", "--hi", "30"]) == 0


def test_cli_verify(capsys):
    from engine.cli import main

    assert main(["game24", "verify", "--puzzle", "4 9 10 13", "Answer: (10 - 4) * (13 - 9) = 24"]) == 0
    assert capsys.readouterr().out.strip() == "ok"
    assert main(["game24", "verify", "--puzzle", "4 9 10 13", "Answer: (10 - 4) * (13 - 10) = 24"]) == 1
    assert "rejected (reused)" in capsys.readouterr().out
