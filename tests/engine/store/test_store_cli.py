"""`toe store import|export|apply|show` and the path CSV."""

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.cli import main
from engine.errors import InputError, StoreError
from engine.store import ExperienceStore
from engine.store.pathcsv import read_path_csv, write_path_csv

CSV = """industry,factor,analysis_direction,q_h10,q_h20,q_h40,recall,hit,eid
Energy,Macroeconomy,Pricing capacity utilization from aggregate-demand cycles,1.6602,0.5981,0.9529,705,208,2
Energy,Policy planning,"Supply-side constraints, and capacity-entry barriers",1.1205,0.3548,0.2004,1125,602,1
Energy,Geopolitics,Geopolitical uncertainty,1.4600,0.7345,0.8703,22446,13209,0
Banks,Policy planning,,1.0,1.0,1.0,0,0,3
"""


@pytest.fixture
def csv_path(tmp_path):
    p = tmp_path / "paths.csv"
    p.write_text(CSV, encoding="utf-8")
    return p


def test_read_path_csv(csv_path):
    st, renumbered = read_path_csv(csv_path)
    assert not renumbered
    assert st.horizons == ("h10", "h20", "h40") and st.levels == ("industry", "factor", "analysis_direction")
    assert st.path_texts(1) == ["Energy", "Policy planning", "Supply-side constraints, and capacity-entry barriers"]
    assert st.path_texts(3) == ["Banks", "Policy planning"]  # a shorter path
    np.testing.assert_allclose(st.reliability[0], [1.46, 0.7345, 0.8703])
    np.testing.assert_array_equal(st.recall, [22446, 1125, 705, 0])
    np.testing.assert_array_equal(st.hit, [13209, 602, 208, 0])
    # Energy/Policy planning and Banks/Policy planning are different nodes (different parents)
    assert st.n_nodes == 1 + 2 + 4 + 3


def test_csv_round_trip(csv_path, tmp_path):
    st, _ = read_path_csv(csv_path)
    out = tmp_path / "out.csv"
    assert write_path_csv(st, out) == 4
    back, renumbered = read_path_csv(out)
    assert not renumbered
    np.testing.assert_array_equal(back.reliability, st.reliability)
    assert [back.path_texts(e) for e in range(4)] == [st.path_texts(e) for e in range(4)]
    assert out.read_text().splitlines()[0].replace('"', "") == (
        "industry,factor,analysis_direction,q_h10,q_h20,q_h40,recall,hit,eid")


def test_sparse_eids_are_renumbered(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("a,b,q_h1,recall,hit,eid\nx,y,1.0,2,1,1049\nx,z,0.5,3,0,1040\n")
    st, renumbered = read_path_csv(p)
    assert renumbered and st.path_texts(0) == ["x", "z"] and st.path_texts(1) == ["x", "y"]


@pytest.mark.parametrize(
    "text, match",
    [
        ("a,b,recall,hit,eid\nx,y,1,1,0\n", r"missing: q_<horizon>"),
        ("a,q_h1,recall,eid\nx,1.0,1,0\n", "missing: hit"),
        ("a,q_h1,recall,hit,eid\nx,1.0,1,2,0\n", "0 <= hit <= recall"),
        ("a,q_h1,recall,hit,eid\nx,3.0,1,0,0\n", r"row 2 has q values \[3.0\] outside the store's bounds \[0.0, 2.0\]"),
        ("a,q_h1,recall,hit,eid\nx,inf,1,0,0\n", "row 2 has a q value that is not a finite number"),
        ("a,q_h1,recall,hit,eid\nx,,1,0,0\n", "column q_h1 has empty cells"),
        ("a,q_h1,recall,hit,eid\nx,abc,1,0,0\n", "could not be parsed"),
        ("a,q_h1,recall,hit,eid\nx,1,1,0,0\nx,1,1,0,1\n", r"rows \[2, 3\] repeat the same path"),
        ("a,q_h1,recall,hit,eid\nx,1,1,0,0\ny,1,1,0,0\n", "eid values must be unique"),
        ("a,b,q_h1,recall,hit,eid\n,y,1,1,0,0\n", "empty level cell before its leaf"),
        ("q_h1,recall,hit,eid\n1,1,0,0\n", "no level columns"),
    ],
)
def test_bad_csv(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(InputError, match=match):
        read_path_csv(p)


def test_cli_import_show_apply_export(csv_path, tmp_path, capsys):
    d = tmp_path / "store"
    assert main(["store", "import", str(csv_path), str(d)]) == 0
    assert "imported 4 paths" in capsys.readouterr().out
    assert main(["store", "show", str(d)]) == 0
    out = capsys.readouterr().out
    assert "experiences 4" in out and "industry=2, factor=4, analysis_direction=3" in out
    assert "reliability q_h40" in out and "recall total 24276, hit total 14019" in out
    assert main(["store", "show", str(d), "--json", "--tree", "--bins", "4"]) == 0
    js = json.loads(capsys.readouterr().out)  # the same figures as one JSON object
    assert js["experiences"] == 4 and js["recall_total"] == 24276 and js["hit_total"] == 14019
    assert js["nodes_per_level"] == {"industry": 2, "factor": 4, "analysis_direction": 3}
    assert sum(js["reliability"]["h40"]["counts"]) == 4 and len(js["reliability"]["h40"]["bin_edges"]) == 5
    assert len(js["paths"]) == 4 and all(len(p["q"]) == len(js["horizons"]) for p in js["paths"])

    upd = tmp_path / "u.parquet"
    pq.write_table(pa.table({"eid": [0, 0, 3], "r_h10": [0.01, 0.02, -0.05], "r_h20": [0.0, 0.0, 0.0],
                             "r_h40": [0.0, 0.0, 1.0]}), upd)
    assert main(["store", "apply", "--store", str(d), "--updates", str(upd), "--rule", "formula", "--eta", "5"]) == 0
    st = ExperienceStore.load(d)
    q = 1.46
    for r in (0.01, 0.02):  # sequential, with n_hit = 13209
        q = q + 5 * (1 - (q - 1) ** 2) / (1 + math.log(1 + 13209)) * r
    assert st.reliability[0, 0] == pytest.approx(q, rel=1e-12)
    assert st.reliability[3, 2] == 2.0 and st.reliability[3, 0] == pytest.approx(0.75)

    assert main(["store", "apply", "--store", str(d), "--updates", str(upd), "--rule", "binary"]) == 0
    np.testing.assert_array_equal(ExperienceStore.load(d).reliability[3], [0.0, 0.0, 1.0])

    out_csv = tmp_path / "out.csv"
    assert main(["store", "export", str(d), str(out_csv)]) == 0
    back, _ = read_path_csv(out_csv)
    np.testing.assert_array_equal(back.reliability[3], [0.0, 0.0, 1.0])


@pytest.mark.parametrize(
    "table, match",
    [
        ({"eid": [0], "r_h10": [0.1]}, "lacks column.*r_h20, r_h40"),
        ({"eid": [0], "r_h10": [0.1], "r_h20": [0.1], "r_h40": [0.1], "r_h5": [0.1]}, "unexpected column.*r_h5"),
        ({"eid": [9], "r_h10": [0.1], "r_h20": [0.1], "r_h40": [0.1]}, "unknown eid 9"),
        ({"eid": [0, 1], "r_h10": [0.1, float("nan")], "r_h20": [0.1, 0.1], "r_h40": [0.1, 0.1]}, "rewards must be finite"),
        ({"eid": [0.5], "r_h10": [0.1], "r_h20": [0.1], "r_h40": [0.1]}, "eid must be integer"),
        ({"eid": [0], "r_h10": ["x"], "r_h20": [0.1], "r_h40": [0.1]}, "must be numeric"),
        ({"eid": [0, None], "r_h10": [0.1, 0.1], "r_h20": [0.1, 0.1], "r_h40": [0.1, 0.1]}, "eid has missing values"),
        # a bool or timestamp column is never cast into rewards (numpy would promote bool beside floats)
        ({"eid": [0], "r_h10": [True], "r_h20": [0.1], "r_h40": [0.1]}, "r_h10 must be numeric.*bool"),
        ({"eid": [0], "r_h10": pa.array([0], pa.timestamp("s")), "r_h20": [0.1], "r_h40": [0.1]},
         "r_h10 must be numeric.*timestamp"),
        ({"eid": [True], "r_h10": [0.1], "r_h20": [0.1], "r_h40": [0.1]}, "eid must be integer"),
    ],
)
def test_cli_apply_bad_updates_change_nothing(csv_path, tmp_path, capsys, table, match):
    d = tmp_path / "store"
    main(["store", "import", str(csv_path), str(d)])
    before = sorted(p.name for p in d.iterdir())
    upd = tmp_path / "u.parquet"
    pq.write_table(pa.table(table), upd)
    assert main(["store", "apply", "--store", str(d), "--updates", str(upd)]) == 1
    import re

    assert re.search(match, capsys.readouterr().err)
    assert sorted(p.name for p in d.iterdir()) == before  # no new checkpoint
    np.testing.assert_allclose(ExperienceStore.load(d).reliability[0], [1.46, 0.7345, 0.8703])


def test_cli_errors(tmp_path, capsys):
    assert main(["store", "show", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "garbage.parquet").write_bytes(b"nope")
    st = ExperienceStore()
    st.add_paths([["a"]])
    st.save(tmp_path / "s")
    assert main(["store", "apply", "--store", str(tmp_path / "s"), "--updates", str(tmp_path / "garbage.parquet")]) == 1
    assert "not a readable Parquet file" in capsys.readouterr().err
    assert main(["store", "import", str(tmp_path / "missing.csv"), str(tmp_path / "x")]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["store", "apply", "--store", str(tmp_path / "s"), "--updates", "u.parquet", "--rule", "magic"])


SPARSE = """a,b,q_h1,recall,hit,eid
x,y,1.5,4,2,1211
x,z,0.5,3,0,1040
w,v,1.0,0,0,77
"""


def test_store_keeps_csv_eids_through_import_save_apply_export(tmp_path, capsys):
    """The CSV's eids are the store's external ids: kept by import, save/load and export; keys of updates."""
    csv = tmp_path / "sparse.csv"
    csv.write_text(SPARSE)
    d = tmp_path / "store"
    assert main(["store", "import", str(csv), str(d)]) == 0
    assert "eids 77..1211 are kept" in capsys.readouterr().out
    st = ExperienceStore.load(d)
    np.testing.assert_array_equal(st.external_ids, [77, 1040, 1211])  # rows are dense, in eid order
    np.testing.assert_array_equal(st.rows_of([1211, 77]), [2, 0])
    assert st.path_texts(int(st.rows_of([1211])[0])) == ["x", "y"]

    upd = tmp_path / "u.parquet"  # keyed by the CSV's own eids
    pq.write_table(pa.table({"eid": [1211, 77], "r_h1": [-1.0, 1.0]}), upd)
    assert main(["store", "apply", "--store", str(d), "--updates", str(upd), "--rule", "binary"]) == 0
    st = ExperienceStore.load(d)
    np.testing.assert_array_equal(st.reliability[:, 0], [1.0, 0.5, 0.0])  # 77 -> r=1, 1040 untouched, 1211 -> 0

    out = tmp_path / "out.csv"
    assert main(["store", "export", str(d), str(out)]) == 0
    back, sparse = read_path_csv(out)
    assert sparse
    rows = {line.split(",")[-1]: line for line in out.read_text().splitlines()[1:]}
    assert set(rows) == {"77", "1040", "1211"} and rows["1040"].replace('"', "").startswith("x,z,0.5")
    np.testing.assert_array_equal(back.external_ids, st.external_ids)

    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"eid": [77, 5], "r_h1": [1.0, 1.0]}), bad)
    before = (d / "CURRENT").read_text()
    capsys.readouterr()
    assert main(["store", "apply", "--store", str(d), "--updates", str(bad)]) != 0
    assert "unknown eid 5 at position 1" in capsys.readouterr().err
    assert (d / "CURRENT").read_text() == before  # nothing saved
    with pytest.raises(StoreError, match="unknown eid 5 at position 1"):
        st.rows_of([77, 5])


def test_rows_appended_after_an_import_get_fresh_external_ids(tmp_path):
    csv = tmp_path / "sparse.csv"
    csv.write_text(SPARSE)
    st, _ = read_path_csv(csv)
    (new,) = st.add_paths([["q", "r"]])
    assert new == 3 and st.external_ids[-1] == 1212
    st.save(tmp_path / "s")
    np.testing.assert_array_equal(ExperienceStore.load(tmp_path / "s").external_ids, [77, 1040, 1211, 1212])
    view = ExperienceStore.from_snapshot(st.snapshot())
    np.testing.assert_array_equal(view.rows_of([1212, 1040]), [3, 1])
    plain = ExperienceStore(depth=2)
    plain.add_paths([["a", "b"], ["a", "c"]])
    np.testing.assert_array_equal(plain.external_ids, [0, 1])  # never imported: the id is the row
    with pytest.raises(InputError, match="strictly increasing"):
        plain.set_external_ids([5, 5])


@pytest.mark.parametrize(
    "rows, match",
    [
        ("x,y,1,1,0,12\nx,z,1,1,0,12\n", "rows 2 and 3 both have eid 12"),
        ("x,y,1,1,0,4\nx,z,1,1,0,3.5\n", r"row 3 has eid '3.5'; an eid must be a non-negative integer"),
        ("x,y,1,1,0,abc\n", r"row 2 has eid 'abc'"),
        ("x,y,1,1,0,-4\n", r"row 2 has eid '-4'"),
        ("x,y,1,1,0,\n", r"row 2 has eid None"),
    ],
)
def test_bad_csv_eids_are_refused_with_their_row(tmp_path, rows, match, capsys):
    import re

    p = tmp_path / "bad.csv"
    p.write_text("a,b,q_h1,recall,hit,eid\n" + rows)
    with pytest.raises(InputError, match=match):
        read_path_csv(p)
    d = tmp_path / "store"
    assert main(["store", "import", str(p), str(d)]) != 0
    assert re.search(match, capsys.readouterr().err)
    assert not d.exists() or not any(d.iterdir())  # nothing written


@pytest.mark.parametrize("flags, match", [
    (["--eta", "-1"], "--eta must be a finite number >= 0, got -1.0"),
    (["--eta", "nan"], "--eta must be a finite number"),
    (["--q0", "0"], "--q0 must be a finite number > 0"),
    (["--eta-task", "1.5"], "--eta-task must be a finite number >= 0 and <= 1"),
])
def test_cli_apply_refuses_out_of_range_flags_and_changes_nothing(csv_path, tmp_path, capsys, flags, match):
    d = tmp_path / "store"
    main(["store", "import", str(csv_path), str(d)])
    before = sorted(p.name for p in d.iterdir())
    upd = tmp_path / "u.parquet"
    pq.write_table(pa.table({"eid": [0], "r_h10": [0.1], "r_h20": [0.1], "r_h40": [0.1]}), upd)
    assert main(["store", "apply", "--store", str(d), "--updates", str(upd), *flags]) == 1
    assert match in capsys.readouterr().err
    assert sorted(p.name for p in d.iterdir()) == before
    np.testing.assert_allclose(ExperienceStore.load(d).reliability[0], [1.46, 0.7345, 0.8703])


def test_path_csv_with_a_bom_and_rows_named_in_errors(tmp_path, capsys):
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeff".encode("utf-8") + CSV.encode("utf-8"))  # as spreadsheets save "CSV UTF-8"
    st, _ = read_path_csv(bom)
    assert st.levels == ("industry", "factor", "analysis_direction") and st.n_experiences == 4
    lines = CSV.splitlines()
    bad_hit = lines[:1] + [lines[1].replace(",705,208,", ",705,-208,")] + lines[2:]
    (tmp_path / "hit.csv").write_text("\n".join(bad_hit) + "\n")
    with pytest.raises(InputError, match=r"hit.csv: row 2 has hit -208 and recall 705"):
        read_path_csv(tmp_path / "hit.csv")
    bad_q = lines[:2] + [lines[2].replace("1.1205", "7.5")] + lines[3:]
    (tmp_path / "q.csv").write_text("\n".join(bad_q) + "\n")
    with pytest.raises(InputError, match=r"q.csv: row 3 has q values \[7.5, .*outside the store's bounds"):
        read_path_csv(tmp_path / "q.csv")
    assert main(["store", "import", str(tmp_path / "q.csv"), str(tmp_path / "out"), "--eta", "-2"]) == 1
    assert "--eta must be a finite number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_full_disk_during_apply_is_an_error_and_keeps_the_checkpoint(csv_path, tmp_path, capsys, monkeypatch):
    d = tmp_path / "store"
    main(["store", "import", str(csv_path), str(d)])
    before = sorted(p.name for p in d.iterdir())
    upd = tmp_path / "u.parquet"
    pq.write_table(pa.table({"eid": [0], "r_h10": [0.1], "r_h20": [0.1], "r_h40": [0.1]}), upd)
    import errno

    def full(self, directory, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ExperienceStore, "save", full)
    assert main(["store", "apply", "--store", str(d), "--updates", str(upd)]) == 1
    err = capsys.readouterr().err
    assert "the store could not be written (No space left on device); its previous checkpoint" in err
    assert "Traceback" not in err
    monkeypatch.undo()
    assert sorted(p.name for p in d.iterdir()) == before
    np.testing.assert_allclose(ExperienceStore.load(d).reliability[0], [1.46, 0.7345, 0.8703])
