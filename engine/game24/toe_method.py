"""ToT+ToE on Game of 24: the seed's state-based specialization (ToE, "Details in Game of 24").

* **Nodes are canonical states**: the sorted multiset of exact numbers left
  (4, 3 or 2 of them), keyed by a 64-bit canonical key; equality is decided on
  the canonical numbers, never on the key alone. States equal after
  canonicalization share one node ("consolidated into the same logical node").
* **Experience** at a node is a verified solution suffix: the step lines that
  lead from that state to 24. One per node (the first admitted; a later
  equivalent one consolidates into it).
* **Retrieval** at each step: first the exactly matched canonical state; then,
  if none, stored states of the same size sharing all but at most
  ``overlap_max_missing`` numbers, whose suffix is re-instantiated on the
  query's numbers (same operations, the differing number substituted). A
  candidate continuation is offered only if the exact verifier accepts it from
  the query's state (ToT checks it again before use).
* **Use**: ``mode="guide"`` puts the suffix in the propose prompt's experience
  slot and values a candidate state that has one as "sure" (no value call);
  ``mode="supply"`` lets a verified continuation complete the branch directly.
* **Update** (eq. (A2), (A4)/(A5)): after an episode whose output the verifier
  accepts (r_t = 1), every state of that trajectory gets its suffix, checked
  again by the verifier: Q_new = r_t, so a verified continuation is admitted
  with Q = 1 and a rejected one (Q = 0) is not stored.
* **Recall/hit** (ToE Table A1): recall counts every retrieval of an
  experience as a candidate, hit counts the episodes in which it was used (its
  continuation completed a branch, or its state lies on the episode's verified
  solution); hit <= recall.

Experience lives in the engine's compiled :class:`engine.store.ExperienceStore`
(:mod:`engine.game24.toe_store`: nodes = canonical states, experiences = paths
ending at a state with their verified suffix in an eid-aligned side column,
binary Q updated by ``store.update(rule="binary")``, recall/hit by the store's
counters). ``snapshot()`` is the store's snapshot plus the side columns;
readers rebuild a read-only :class:`engine.store.StoreView` from it
(``ExperienceStore.from_snapshot``) and never see the writable store.
``[toe] precomputed = "DIR"`` seeds the store from an offline
``toe game24 precompute`` directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.config import check
from engine.game24.checks import state_key, step_ok
from engine.game24.hooks import (
    EMPTY,
    PHASE_VALUE,
    EpisodeTrace,
    Retrieval,
    StepQuery,
    Updates,
)
from engine.game24.prompts import VALUE_MAP, format_numbers, parse_step_line
from engine.game24.toe_store import PREFIX, SIDE_COLUMNS, ToEStore, canon_text, parse_state
from engine.game24.trajectory import Branch, canonical_numbers, step_line
from engine.store import ExperienceStore


def update_q_binary(q_old: np.ndarray, r: np.ndarray) -> np.ndarray:
    """ToE eq. (A5): UpdateQ_G24(Q_old, r_t) = r_t (eq. (A3) with eta_G24 = 1). ``q_old, r`` f8[n].

    A NumPy reference of what ``ExperienceStore.update(rule="binary")`` computes
    (tests compare the two); the method itself updates through the store.
    """
    eta = 1.0
    r = np.asarray(r, dtype=np.float64)
    pos = r > 0
    return np.where(pos, r, (1.0 - eta) * np.asarray(q_old, dtype=np.float64) + eta * r)


@dataclass(frozen=True)
class ToEConfig:
    """[toe] section of configs/game24.toml."""

    mode: str = "supply"  # "supply": a verified continuation completes the branch; "guide": prompt + value
    overlap: bool = True  # also retrieve by number-set overlap when no exact state matches
    overlap_max_missing: int = 1  # a stored state may differ from the query in at most this many numbers
    overlap_top_k: int = 3  # overlapping states tried per query
    value_from_experience: bool = True  # a state with a verified suffix is valued "sure" without a call
    precomputed: str = ""  # a `toe game24 precompute` output directory seeding the store ("" = start empty)

    def __post_init__(self):
        check(self.mode in ("supply", "guide"), f"toe.mode must be 'supply' or 'guide', got {self.mode!r}")
        check(self.overlap_max_missing >= 1,
              f"toe.overlap_max_missing must be >= 1, got {self.overlap_max_missing}")
        check(self.overlap_top_k >= 1, f"toe.overlap_top_k must be >= 1, got {self.overlap_top_k}")
        check(isinstance(self.precomputed, str),
              f"toe.precomputed must be a directory path string or \"\", got {self.precomputed!r}")


def verified_suffix(numbers: Sequence[Fraction], lines: Sequence[str]) -> bool:
    """r_t of eq. (A2) for a (state, continuation) pair: the lines legally reach 24 from ``numbers``."""
    branch = Branch(canonical_numbers(numbers), tuple("x" for _ in numbers))
    for line in lines:
        branch = step_ok(branch, line)
        if branch is None:
            return False
    return branch.reached_24


def reinstantiate(stored: Sequence[Fraction], lines: Sequence[str], target: Sequence[Fraction]) -> tuple[str, ...] | None:
    """Replay ``lines`` (a suffix from state ``stored``) on state ``target`` of the same size.

    Shared numbers map to themselves, the others pair up in sorted order; each
    step repeats the stored operation on the mapped values. Returns the new
    step lines, or None when a step cannot be replayed (division by zero,
    malformed line). The result still has to pass the verifier to count.
    """
    stored, target = list(canonical_numbers(stored)), list(canonical_numbers(target))
    if len(stored) != len(target):
        return None
    rest_t, shared, rest_s = list(target), [], []
    for x in stored:
        if x in rest_t:
            rest_t.remove(x)
            shared.append(x)
        else:
            rest_s.append(x)
    cur_s, cur_t = shared + rest_s, shared + rest_t  # stored value -> target value, position by position
    out = []
    for line in lines:
        parsed = parse_step_line(line)
        if parsed is None:
            return None
        a, op, b, c, _left = parsed
        try:
            i = cur_s.index(a)
            ta = cur_t.pop(i)
            cur_s.pop(i)
            j = cur_s.index(b)
            tb = cur_t.pop(j)
            cur_s.pop(j)
        except ValueError:
            return None
        new = step_line(ta, op, tb, cur_t)
        if new is None:
            return None
        out.append(new)
        cur_s.append(c)
        cur_t.append(parse_step_line(new)[3])
    return tuple(out)


class ToEReader:
    """Read-only retrieval over a snapshot of :class:`ToEStore` (a :class:`engine.store.StoreView` + side columns)."""

    def __init__(self, snapshot: Mapping[str, np.ndarray], config: ToEConfig, n_evaluate: int):
        self.cfg = config
        self.sure = VALUE_MAP["sure"] * n_evaluate
        if "block" not in snapshot:  # an empty snapshot ({}): nothing stored yet
            snapshot = ToEStore().snapshot()
        self.view = ExperienceStore.from_snapshot(snapshot)
        side = {k: np.asarray(snapshot[PREFIX + k]) for k in SIDE_COLUMNS}
        self.suffix, self.canon, self.nums, self.size = side["suffix"], side["canon"], side["nums"], side["size"]
        n = self.view.n_experiences
        self.q = np.asarray(self.view.reliability[:, 0])
        self.hit = self.view.hit
        paths = self.view.paths
        self.leaf = paths[np.arange(n), (paths >= 0).sum(axis=1) - 1] if n else np.zeros(0, np.int64)
        self.node_eid = self.view.node_column("eid")
        self.live = self.canon & (self.q > 0)  # retrievable: canonical and not rejected (Q > 0)
        self._cache: dict[tuple[int, str, str], Retrieval] = {}

    def state_numbers(self, eid: int) -> tuple[Fraction, ...]:
        """Canonical numbers of experience ``eid``'s state (from its node text)."""
        return parse_state(self.view.node_text(int(self.leaf[eid])))

    def _exact(self, key: int, numbers: Sequence[Fraction]) -> int:
        nodes = self.view.nodes_with_key(int(key))
        eids = np.sort(self.node_eid[nodes])
        for e in eids[eids >= 0]:
            if self.live[e] and self.state_numbers(int(e)) == tuple(numbers):
                return int(e)
        return -1

    def _overlapping(self, numbers: Sequence[Fraction]) -> np.ndarray:
        n = len(numbers)
        same = np.flatnonzero((self.size == n) & self.live)
        if same.size == 0:
            return same
        block = self.nums[same, :n]
        shared = np.zeros(same.size, dtype=np.int64)
        values, counts = np.unique(np.array([float(x) for x in numbers]), return_counts=True)
        for v, c in zip(values, counts):
            shared += np.minimum((block == v).sum(axis=1), c)
        keep = shared >= n - self.cfg.overlap_max_missing
        keep &= shared < n  # an equal multiset is an exact match, handled first
        rows, shared = same[keep], shared[keep]
        # most shared numbers first, then most used, then oldest
        rank = np.lexsort((rows, -self.hit[rows], -shared))
        return rows[rank][: self.cfg.overlap_top_k]

    def _one(self, query: StepQuery) -> Retrieval:
        if len(query.numbers) < 2:
            return EMPTY
        conts: list[tuple[str, ...]] = []
        ids: list[int] = []
        recalled: list[int] = []
        row = self._exact(query.key, query.numbers)
        if row >= 0:
            recalled.append(row)
            lines = tuple(str(self.suffix[row]).split("\n"))
            if verified_suffix(query.numbers, lines):
                conts.append(lines)
                ids.append(row)
        elif self.cfg.overlap:
            for row in self._overlapping(query.numbers):
                row = int(row)
                recalled.append(row)
                lines = reinstantiate(self.state_numbers(row), str(self.suffix[row]).split("\n"), query.numbers)
                if lines is not None and verified_suffix(query.numbers, lines):
                    conts.append(lines)
                    ids.append(row)
                    break
        if not recalled:
            return EMPTY
        experience = ""
        if conts:
            experience = (
                f"A verified way to finish from {format_numbers(query.numbers)}:\n" + "\n".join(conts[0])
            )
        value = self.sure if (conts and self.cfg.value_from_experience and query.phase == PHASE_VALUE) else None
        supply = self.cfg.mode == "supply"
        return Retrieval(
            experience=experience,
            continuations=tuple(conts) if supply else (),
            continuation_ids=tuple(ids) if supply else (),
            experience_ids=tuple(recalled),
            value=value,
        )

    def retrieve(self, queries: Sequence[StepQuery], llm) -> list[Retrieval]:
        out = []
        for q in queries:  # a retrieval depends only on (state, phase) and the snapshot
            slot = (q.key, q.state, q.phase)
            if slot not in self._cache:
                self._cache[slot] = self._one(q)
            out.append(self._cache[slot])
        return out

    def observe(self, traces: Sequence[EpisodeTrace], llm) -> list[Updates]:
        return [self._observe_one(t) for t in traces]

    def _observe_one(self, trace: EpisodeTrace) -> Updates:
        """Rows: the trajectory's states in order (row i = after i steps) with suffix and r_t; counters."""
        states, suffixes, keys, rewards = [], [], [], []
        on_path: set[str] = set()
        steps = [line for line in trace.solution if not line.lower().startswith("answer")]
        if trace.success and len(steps) == 3:
            branch = Branch.start(trace.puzzle)
            for k in range(3):
                lines = tuple(steps[k:])
                on_path.add(canon_text(branch.numbers))
                states.append(canon_text(branch.numbers))
                suffixes.append("\n".join(lines))
                keys.append(state_key(branch.numbers))
                rewards.append(1.0 if verified_suffix(branch.numbers, lines) else 0.0)  # eq. (A2)
                branch = step_ok(branch, steps[k])
                if branch is None:
                    break
        retrieved = np.asarray(trace.retrieved, dtype=np.int64)
        hits = set(int(i) for i in trace.used)
        if trace.success:
            hits.update(int(i) for i in set(trace.retrieved)
                        if canon_text(self.state_numbers(int(i))) in on_path)
        hits &= set(retrieved.tolist())  # ToE Table A1: a hit is a recalled experience that was used
        return {
            "state": np.asarray(states, dtype=str) if states else np.zeros(0, dtype="U1"),
            "suffix": np.asarray(suffixes, dtype=str) if suffixes else np.zeros(0, dtype="U1"),
            "key": np.asarray(keys, dtype=np.int64),
            "r": np.asarray(rewards, dtype=np.float64),
            "recall": retrieved,
            "hit": np.asarray(sorted(hits), dtype=np.int64),
        }


class ToEHooks:
    """ToE for Game of 24 as :class:`engine.game24.hooks.ExperienceHooks`, experience in a :class:`ToEStore`."""

    name = "toe"

    def __init__(self, config: ToEConfig | None = None, n_evaluate: int = 3):
        self.config = config or ToEConfig()
        self.n_evaluate = n_evaluate
        self.exp = ToEStore()
        if self.config.precomputed:
            self.exp.seed_precomputed(self.config.precomputed)

    @property
    def store(self) -> ExperienceStore:
        """The compiled experience store (writable; read it, change it only through ``apply``)."""
        return self.exp.store

    def snapshot(self) -> dict[str, np.ndarray]:
        return self.exp.snapshot()

    def snapshot_views(self) -> dict[str, np.ndarray]:
        """Zero-copy views of the store (:class:`engine.rounds.ViewSnapshots`)."""
        return self.exp.snapshot(copy=False)

    def reader(self, snapshot) -> ToEReader:
        return ToEReader(snapshot, self.config, self.n_evaluate)

    def apply(self, updates: Sequence[tuple[int, Updates]]) -> None:
        """Counters then admissions, episode by episode in id order (eids refer to the snapshot; rows only append)."""
        for episode_id, upd in updates:
            if not upd:
                continue
            self.exp.count(upd["recall"], upd["hit"])
            if len(upd["key"]):
                self.exp.admit(int(episode_id), upd["key"], [str(s) for s in upd["state"]],
                               [str(s) for s in upd["suffix"]], upd["r"])

    def save_state(self, directory: Path) -> None:
        self.exp.save(Path(directory))

    def load_state(self, directory: Path) -> None:
        self.exp = ToEStore.load(Path(directory))


def make_toe_method(tot_config=None, toe_config: ToEConfig | None = None, name: str = "toe", learn_phases=("warmup", "test")):
    """ToT+ToE as an :class:`engine.rounds.Method` (ToT's search with :class:`ToEHooks`).

    ``mode="supply"`` turns on ToT's ``supply_continuations``; the other ToT
    parameters (breadth, samples, temperatures, token limits) stay the caller's,
    the same as plain ToT's.
    """
    from dataclasses import replace

    from engine.game24.tot import ToTConfig, ToTMethod

    toe_config = toe_config or ToEConfig()
    tot_config = replace(tot_config or ToTConfig(), supply_continuations=toe_config.mode == "supply")
    hooks = ToEHooks(toe_config, n_evaluate=tot_config.n_evaluate)
    return ToTMethod(name, hooks, tot_config, learn_phases)
