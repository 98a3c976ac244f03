"""FLEX's library on disk (seed 002 step 1): append-only, fsynced, reloaded; torn last lines refused or repaired."""

import json

import pytest

from engine.cli import main
from engine.errors import PersistenceError
from engine.flex.library import Experience, ExperienceLibrary, TornLibraryError, read_library


def _exp(i, correct=True, problem=None, domain="math"):
    return Experience(key=f"k{i}", step=i, problem=problem or f"problem {i}", solution_attempt=f"s{i}",
                      ground_truth="", is_correct=correct, domain=domain, difficulty="easy",
                      timestamp="2026-01-01T00:00:00+00:00", reflection="r")


def test_append_reload_and_keys_are_not_appended_twice(tmp_path):
    path = tmp_path / "lib.jsonl"
    lib = ExperienceLibrary(path)
    assert lib.add([_exp(0), _exp(1, False)]) and path.read_text().count("\n") == 2
    assert lib.add([_exp(1, False)]) == []  # a resumed run re-applies a record: not appended again
    again = ExperienceLibrary(path)  # a restart
    assert [e.key for e in again.experiences] == ["k0", "k1"] and again.experiences[1].is_correct is False
    assert again.next_step() == 2
    assert again.experiences[0] == _exp(0)  # every field survives the round trip


def test_torn_last_line_is_refused_then_repaired(tmp_path):
    path = tmp_path / "lib.jsonl"
    ExperienceLibrary(path).add([_exp(0), _exp(1)])
    good = path.read_bytes()
    path.write_bytes(good + b'{"key": "k2", "step"')  # a crash mid-append
    with pytest.raises(TornLibraryError, match=rf"torn line at byte {len(good)}"):
        ExperienceLibrary(path)
    assert path.read_bytes().startswith(good) and len(path.read_bytes()) > len(good)  # refusing changes nothing
    lib = ExperienceLibrary(path, repair=True)
    assert lib.repaired_bytes == len(b'{"key": "k2", "step"') and path.read_bytes() == good
    assert [e.key for e in lib.experiences] == ["k0", "k1"]


def test_a_bad_line_in_the_middle_is_corruption_not_repaired(tmp_path):
    path = tmp_path / "lib.jsonl"
    ExperienceLibrary(path).add([_exp(0)])
    path.write_bytes(path.read_bytes() + b"not json\n" + json.dumps(_exp(1).to_dict()).encode() + b"\n")
    with pytest.raises(PersistenceError, match="line 2 is not a JSON record"):
        read_library(path, repair=True)


def test_archive_moves_records_and_keeps_them(tmp_path):
    path = tmp_path / "lib.jsonl"
    lib = ExperienceLibrary(path)
    lib.add([_exp(i) for i in range(4)])
    assert lib.archive(["k0", "k2"], "duplicate") == 2
    assert [e.key for e in ExperienceLibrary(path).experiences] == ["k1", "k3"]
    archived = [json.loads(x) for x in lib.archive_path.read_text().splitlines()]
    assert [a["key"] for a in archived] == ["k0", "k2"] and archived[0]["metadata"]["archived"] == "duplicate"


def test_cli_show_stats_prune(tmp_path, capsys):
    path = tmp_path / "lib.jsonl"
    ExperienceLibrary(path).add([_exp(0, problem="same"), _exp(1, problem="same"), _exp(2, False), _exp(3)])
    assert main(["flex", "show", str(path), "--last", "1"]) == 0
    assert "problem 3" in capsys.readouterr().out
    assert main(["flex", "stats", str(path), "--window", "2"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["records"] == 4 and st["successes"] == 3 and st["tracking"]["window_rates"] == [1.0, 0.5]
    assert main(["flex", "prune", str(path), "--dedup"]) == 0  # k0 and k1 are the same problem and outcome
    assert [e.key for e in ExperienceLibrary(path).experiences] == ["k1", "k2", "k3"]
    assert main(["flex", "prune", str(path), "--max-records", "2"]) == 0
    assert [e.key for e in ExperienceLibrary(path).experiences] == ["k2", "k3"]
    path.write_bytes(path.read_bytes() + b"{")
    assert main(["flex", "stats", str(path)]) == 1  # a torn line: a clear error, nothing changed
    assert "torn line" in capsys.readouterr().err
    assert main(["flex", "prune", str(path), "--repair"]) == 0
    assert "cut a torn last line of 1 bytes" in capsys.readouterr().out
