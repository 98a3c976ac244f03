"""What finance needs from the store: merges (active / merged_into), inner nodes, normalised keys."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.errors import InputError, PersistenceError, StoreError
from engine.store import ExperienceStore, normalized_key
from engine.store.pathcsv import read_path_csv, write_path_csv


@pytest.fixture
def st():
    s = ExperienceStore(capacity=1, node_capacity=1)  # tiny capacities: every add grows (amortized)
    s.add_paths([["Retail", "Policy", "Subsidies lift demand"], ["Retail", "Policy", "Subsidies lift sales"],
                 ["Retail", "Pricing", "Price cuts hurt margins"], ["Autos", "Policy", "Trade-in subsidies"]])
    s.record_recall([0, 1, 1, 2, 3], None)
    s.record_hit([0, 1])
    return s


def test_merge_folds_counts_and_hit_weighted_reliability(st):
    st.update([0, 1], np.array([[0.05, 0.0, 0.0], [-0.05, 0.0, 0.0]]))
    q0, q1 = st.reliability[0].copy(), st.reliability[1].copy()
    st.merge(0, 1)
    np.testing.assert_allclose(st.reliability[0], (1 * q0 + 1 * q1) / 2)  # one hit each
    assert st.hit.tolist() == [2, 0, 0, 0] and st.recall.tolist() == [3, 0, 1, 1]
    assert st.active.tolist() == [True, False, True, True] and st.merged_into.tolist() == [-1, 0, -1, -1]
    assert st.canonical([1, 2, 1]).tolist() == [0, 2, 0]
    with pytest.raises(StoreError, match="inactive"):
        st.merge(0, 1)
    with pytest.raises(StoreError, match="not siblings"):
        st.merge(0, 2)
    with pytest.raises(StoreError, match="into itself"):
        st.merge(2, 2)


def test_feedback_for_a_merged_experience_reaches_it_once(st):
    st.defer([7, 7, 8], [0, 1, 1], [0, 0, 0], [3, 3, 3], [1.0, 1.0, 1.0])
    st.merge(0, 1)
    before = st.reliability[0, 0]
    st.resolve(st.ledger.due(3), rewards=[0.1, 0.1, 0.1], rule="delta")
    # episode 7 used 0 and 1 (now one experience): one update; episode 8 used 1: one more
    assert st.reliability[0, 0] == pytest.approx(before + 0.2)
    assert st.ledger.n_pending == 0
    with pytest.raises(StoreError, match="already applied"):
        st.resolve([0], rewards=[0.1], rule="delta")


def test_merges_persist_export_and_are_checked_on_load(st, tmp_path):
    st.merge(0, 1)
    st.save(tmp_path / "s")
    back = ExperienceStore.load(tmp_path / "s")
    assert back.active.tolist() == st.active.tolist() and back.merged_into.tolist() == st.merged_into.tolist()
    n = write_path_csv(back, tmp_path / "p.csv")
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert n == 4 and lines[0].endswith('"eid","active","merged_into"') and lines[2].endswith("false,0")
    assert read_path_csv(tmp_path / "p.csv")[0].n_experiences == 4  # import keeps paths, drops the merge
    # a checkpoint whose merged_into disagrees with active is refused
    ck = tmp_path / "s" / (tmp_path / "s" / "CURRENT").read_text().strip()
    table = pq.read_table(ck / "experiences.parquet")
    active = table.column("active").to_pylist()
    active[1] = True
    table = table.set_column(table.column_names.index("active"), "active", [active])
    pq.write_table(table, ck / "experiences.parquet")
    from engine.atomic_io import sha256_file  # reseal the manifest so only the bad column is wrong
    import json

    man = json.loads((ck / "manifest.json").read_text())
    man["files"]["experiences.parquet"] = {"sha256": sha256_file(ck / "experiences.parquet"),
                                           "bytes": (ck / "experiences.parquet").stat().st_size}
    (ck / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(PersistenceError, match="merged_into=0 and active=True disagree"):
        ExperienceStore.load(tmp_path / "s")


def test_add_nodes_makes_inner_nodes_without_experiences(st):
    (node,) = st.add_nodes([["Retail", "Supply"]])  # text keys, as the fixture's paths
    assert st.node_text(node) == "Supply" and st.eid_of(node) == -1 and st.n_experiences == 4
    assert st.add_nodes([["Retail", "Supply"]]).tolist() == [node]  # reused
    assert node in st.children(st.find(0, "Retail")).tolist()
    (eid,) = st.add_paths([["Retail", "Supply", "Capacity grows"]])
    assert st.paths[eid, 1] == node
    keys = [[normalized_key(" retail"), normalized_key("SUPPLY")]]
    (other,) = st.add_nodes([["retail", "supply"]], keys=keys)  # normalised keys are other keys: new nodes
    assert other != node and st.add_nodes([["Retail ", "Supply"]], keys=keys).tolist() == [other]
    with pytest.raises(InputError, match="sequence of 1..3 strings"):
        st.add_nodes(["Retail"])


def test_normalized_key_ignores_case_and_spacing():
    assert normalized_key("Policy  planning ") == normalized_key("policy planning")
    assert normalized_key("Policy planning") != normalized_key("Policy plan")
