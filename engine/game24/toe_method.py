"""ToT+ToE on Game of 24: the seed's state-based specialization (ToE, "Details in Game of 24").

* **Nodes are canonical states**: the sorted multiset of exact numbers left
  (4, 3 or 2 of them), keyed by a 64-bit canonical key; equality is decided on
  the canonical text, never on the key alone. States equal after
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

Experience lives in :class:`Game24Experience`, a struct-of-arrays table
(one row = one node and its experience); the snapshot is its column dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.config import check
from engine.errors import PersistenceError
from engine.game24.checks import state_key, step_ok
from engine.game24.hooks import (
    EMPTY,
    PHASE_VALUE,
    EpisodeTrace,
    Retrieval,
    StepQuery,
    Updates,
)
from engine.game24.prompts import VALUE_MAP, format_numbers, parse_number, parse_step_line
from engine.game24.trajectory import Branch, canonical_numbers, step_line

MAX_NUMBERS = 4

# One row per node (= per experience). Adding a column touches this line only.
COLUMNS: dict[str, tuple[str, tuple[int, ...]]] = {
    "key": ("i8", ()),  # 64-bit canonical state key
    "state": ("U64", ()),  # canonical state text, "4 6 10"
    "size": ("i8", ()),  # how many numbers the state has
    "nums": ("f8", (MAX_NUMBERS,)),  # the numbers as floats, NaN-padded (overlap search only)
    "suffix": ("U256", ()),  # verified continuation: step lines joined by "\n"
    "q": ("f8", ()),  # binary reliability, eq. (A4)
    "recall": ("i8", ()),
    "hit": ("i8", ()),
    "created": ("i8", ()),  # episode id that admitted it
}


def update_q_binary(q_old: np.ndarray, r: np.ndarray) -> np.ndarray:
    """ToE eq. (A5): UpdateQ_G24(Q_old, r_t) = r_t (eq. (A3) with eta_G24 = 1). ``q_old, r`` f8[n]."""
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

    def __post_init__(self):
        check(self.mode in ("supply", "guide"), f"toe.mode must be 'supply' or 'guide', got {self.mode!r}")
        check(self.overlap_max_missing >= 1,
              f"toe.overlap_max_missing must be >= 1, got {self.overlap_max_missing}")
        check(self.overlap_top_k >= 1, f"toe.overlap_top_k must be >= 1, got {self.overlap_top_k}")


def _empty_columns(n: int = 0) -> dict[str, np.ndarray]:
    return {name: np.zeros((n, *shape), dtype=dt) for name, (dt, shape) in COLUMNS.items()}


def _nums_row(numbers: Sequence[Fraction]) -> np.ndarray:
    row = np.full(MAX_NUMBERS, np.nan)
    row[: len(numbers)] = [float(x) for x in numbers]
    return row


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


class Game24Experience:
    """Struct-of-arrays table of ToE nodes for Game of 24 (one verified suffix per canonical state)."""

    def __init__(self, columns: Mapping[str, np.ndarray] | None = None):
        self.cols = _empty_columns() if columns is None else {k: np.array(columns[k]) for k in COLUMNS}
        self._index = {(int(k), str(s)): i for i, (k, s) in enumerate(zip(self.cols["key"], self.cols["state"]))}

    def __len__(self) -> int:
        return int(self.cols["key"].shape[0])

    def find(self, key: int, state: str) -> int:
        return self._index.get((int(key), state), -1)

    def admit(self, key: int, state: str, numbers: Sequence[Fraction], suffix: str, r: float, episode_id: int) -> int:
        """Admit one verified (state, suffix) pair; equivalent states consolidate into one row."""
        row = self.find(key, state)
        if row >= 0:
            self.cols["q"][row] = update_q_binary(self.cols["q"][row : row + 1], np.array([r]))[0]
            return row
        if r <= 0:  # eq. (A4): Q = 0 -> rejected, never stored
            return -1
        new = {
            "key": np.int64(key), "state": state, "size": len(numbers), "nums": _nums_row(numbers),
            "suffix": suffix, "q": update_q_binary(np.zeros(1), np.array([r]))[0], "recall": 0, "hit": 0,
            "created": episode_id,
        }
        for name, (dt, shape) in COLUMNS.items():
            self.cols[name] = np.concatenate([self.cols[name], np.asarray([new[name]], dtype=dt).reshape(1, *shape)])
        row = len(self) - 1
        self._index[(int(key), state)] = row
        return row

    def count(self, column: str, rows: np.ndarray) -> None:
        """Add 1 per occurrence of each row id to ``recall`` or ``hit`` (repeats add up)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size:
            np.add.at(self.cols[column], rows, 1)

    # -- persistence ------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        directory.mkdir(parents=True, exist_ok=True)
        table = {k: (list(v) if v.ndim > 1 else v) for k, v in self.cols.items()}
        pq.write_table(pa.table(table), directory / "game24_toe.parquet")

    @classmethod
    def load(cls, directory: Path) -> "Game24Experience":
        import pyarrow.parquet as pq

        path = directory / "game24_toe.parquet"
        if not path.is_file():
            raise PersistenceError(f"{path} does not exist; expected a saved Game-of-24 ToE table")
        table = pq.read_table(path)
        missing = sorted(set(COLUMNS) - set(table.column_names))
        if missing:
            raise PersistenceError(f"{path} lacks column(s) {missing}; expected {sorted(COLUMNS)}")
        cols = {}
        for name, (dt, shape) in COLUMNS.items():
            values = table.column(name).to_pylist()
            cols[name] = np.asarray(values, dtype=dt).reshape(len(values), *shape)
        return cls(cols)


class ToEReader:
    """Read-only retrieval over a snapshot of :class:`Game24Experience` columns."""

    def __init__(self, snapshot: Mapping[str, np.ndarray], config: ToEConfig, n_evaluate: int):
        self.cfg = config
        self.sure = VALUE_MAP["sure"] * n_evaluate
        self.key = np.asarray(snapshot.get("key", np.zeros(0, np.int64)))
        self.state = np.asarray(snapshot.get("state", np.zeros(0, "U64")))
        self.size = np.asarray(snapshot.get("size", np.zeros(0, np.int64)))
        self.nums = np.asarray(snapshot.get("nums", np.zeros((0, MAX_NUMBERS))))
        self.suffix = np.asarray(snapshot.get("suffix", np.zeros(0, "U256")))
        self.q = np.asarray(snapshot.get("q", np.zeros(0)))
        self.hit = np.asarray(snapshot.get("hit", np.zeros(0, np.int64)))
        self.order = np.argsort(self.key, kind="stable")
        self.sorted_keys = self.key[self.order]
        self._cache: dict[tuple[int, str, str], Retrieval] = {}

    def _exact(self, key: int, state: str) -> int:
        lo = np.searchsorted(self.sorted_keys, key, side="left")
        hi = np.searchsorted(self.sorted_keys, key, side="right")
        for pos in range(lo, hi):
            row = int(self.order[pos])
            if self.state[row] == state and self.q[row] > 0:
                return row
        return -1

    def _overlapping(self, numbers: Sequence[Fraction]) -> np.ndarray:
        n = len(numbers)
        same = np.flatnonzero((self.size == n) & (self.q > 0))
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
        row = self._exact(query.key, query.state)
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
                stored = [parse_number(t) for t in str(self.state[row]).split()]
                lines = reinstantiate(stored, str(self.suffix[row]).split("\n"), query.numbers)
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
        states, suffixes, keys, nums, rewards = [], [], [], [], []
        on_path: set[str] = set()
        steps = [line for line in trace.solution if not line.lower().startswith("answer")]
        if trace.success and len(steps) == 3:
            branch = Branch.start(trace.puzzle)
            for k in range(3):
                lines = tuple(steps[k:])
                on_path.add(branch.state)
                r = 1.0 if verified_suffix(branch.numbers, lines) else 0.0  # eq. (A2)
                if r > 0:  # eq. (A4): rejected continuations are not stored
                    states.append(branch.state)
                    suffixes.append("\n".join(lines))
                    keys.append(state_key(branch.numbers))
                    nums.append(_nums_row(branch.numbers))
                    rewards.append(r)
                branch = step_ok(branch, steps[k])
                if branch is None:
                    break
        hits = set(trace.used)
        if trace.success:
            hits.update(i for i in trace.retrieved if str(self.state[i]) in on_path)
        return {
            "state": np.asarray(states, dtype="U64"),
            "suffix": np.asarray(suffixes, dtype="U256"),
            "key": np.asarray(keys, dtype=np.int64),
            "nums": np.asarray(nums, dtype=np.float64).reshape(len(nums), MAX_NUMBERS),
            "r": np.asarray(rewards, dtype=np.float64),
            "recall": np.asarray(trace.retrieved, dtype=np.int64),
            "hit": np.asarray(sorted(hits), dtype=np.int64),
        }


class ToEHooks:
    """ToE for Game of 24 as :class:`engine.game24.hooks.ExperienceHooks`."""

    name = "toe"

    def __init__(self, config: ToEConfig | None = None, n_evaluate: int = 3):
        self.config = config or ToEConfig()
        self.n_evaluate = n_evaluate
        self.table = Game24Experience()

    def snapshot(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.table.cols.items()}

    def reader(self, snapshot) -> ToEReader:
        return ToEReader(snapshot, self.config, self.n_evaluate)

    def apply(self, updates: Sequence[tuple[int, Updates]]) -> None:
        for episode_id, upd in updates:
            if not upd:
                continue
            # counters refer to rows of the snapshot the episode read; rows only ever get appended
            self.table.count("recall", upd["recall"])
            self.table.count("hit", upd["hit"])
            for state, suffix, key, r in zip(upd["state"], upd["suffix"], upd["key"], upd["r"]):
                numbers = canonical_numbers(parse_number(t) for t in str(state).split())
                self.table.admit(int(key), str(state), numbers, str(suffix), float(r), int(episode_id))

    def save_state(self, directory: Path) -> None:
        self.table.save(Path(directory))

    def load_state(self, directory: Path) -> None:
        self.table = Game24Experience.load(Path(directory))


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
