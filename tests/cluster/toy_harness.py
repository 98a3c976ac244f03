"""A deterministic toy self-evolving method and its simulated policy: the executors' test harness.

Nothing here is a real model or a real benchmark; every figure produced with
it is ``simulated``. It lives under tests/ (it is not shipped in the wheel) and
imports no ray, so the local executor's tests use it too. Processes that
unpickle it (Ray workers, driver subprocesses) find it through
:func:`with_harness_path`.

The experience is a struct-of-arrays table of nodes grouped in subtrees
(``node_id i8[N]``, ``subtree i8[N]``, ``score f8[N]``, ``hits i8[N]``) plus a
feedback ledger (``ledger i8[m, 3]``: episode id, node id, update row) that
records every update applied. An episode reads the best node of its subtree
from the round's snapshot, asks the LLM (one batched call per round share),
and returns updates ``node i8[k]``, ``reward f8[k]``. ``apply`` folds them in
with an exponential moving average, which depends on the order of
application, so a wrong barrier order or a twice-applied update changes the
final table. ``split``/``merge_snapshots``/``join`` shard it by subtree.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import StoreError
from engine.llm.base import Request
from engine.llm.simulated import SimulatedBackend, SimulatedPolicy
from engine.rounds import Episode, EpisodeResult

HARNESS_DIR = Path(__file__).resolve().parent
REPO = HARNESS_DIR.parents[1]


def with_harness_path(env) -> dict[str, str]:
    """A copy of ``env`` whose PYTHONPATH puts this folder and the repository first (subprocesses, Ray workers)."""
    parts = [str(HARNESS_DIR), str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(parts))}

COLUMNS = {"node_id": np.int64, "subtree": np.int64, "score": np.float64, "hits": np.int64}


def _answer(prompt: str, seed: int | None, sample: int, work: int) -> int:
    h = hashlib.sha256(f"{prompt}|{seed}|{sample}".encode()).digest()
    for _ in range(work):  # CPU cost standing in for decoding
        h = hashlib.sha256(h).digest()
    return int.from_bytes(h[:4], "little") % 1000


class ToyPolicy(SimulatedPolicy):
    """The toy's simulated policy: each completion is a hash of (prompt, seed, sample index)."""

    model = "toy-sha256"

    def __init__(self, work: int = 0, latency_s: float = 0.0):
        self.work = work
        self.batch_latency_s = latency_s  # one batched call: one latency

    def respond(self, request: Request, seed: int, index: int) -> str:
        return str(_answer(request.prompt or repr(request.messages), seed, index, self.work))


@dataclass(frozen=True)
class ToyLLMFactory:
    """Picklable factory of the simulated backend over :class:`ToyPolicy` (what an executor sends to its workers)."""

    work: int = 0
    latency_s: float = 0.0

    def __call__(self) -> SimulatedBackend:
        return SimulatedBackend(ToyPolicy(self.work, self.latency_s))


def toy_episodes(n: int, seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, 10_000, size=n)
    return [Episode(i, int(tasks[i]), seed * 1_000_003 + i) for i in range(n)]


class ToyMethod:
    """Counting/learning toy method over a NumPy experience table (see the module docstring)."""

    def __init__(self, n_subtrees: int = 8, nodes_per_subtree: int = 4, decay: float = 0.8, samples: int = 2,
                 name: str = "toy", think_s: float = 0.0, crash_on: int = -1, refuse_on: int = -1):
        self.name = name
        self.refuse_on = refuse_on  # episode id whose update ``apply`` refuses with StoreError (fault tests)
        self.think_s = think_s  # seconds slept per run_episodes call (lets a test kill a worker mid-share)
        self.crash_on = crash_on  # episode id whose share kills the worker process (fault tests)
        self.n_subtrees = n_subtrees
        self.nodes_per_subtree = nodes_per_subtree
        self.decay = decay
        self.samples = samples
        n = n_subtrees * nodes_per_subtree
        self.table = {
            "node_id": np.arange(n, dtype=np.int64),
            "subtree": np.arange(n, dtype=np.int64) // nodes_per_subtree,
            "score": np.full(n, 0.5),
            "hits": np.zeros(n, dtype=np.int64),
        }
        self.ledger = np.zeros((0, 3), dtype=np.int64)

    # -- Method protocol -------------------------------------------------------------------------
    def snapshot(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.table.items()}

    def run_episodes(self, snapshot, episodes, llm) -> list[EpisodeResult]:
        if any(e.episode_id == self.crash_on for e in episodes):
            os._exit(3)  # a worker process dying mid-share, as an OOM kill or a segfault would
        node_id, subtree = snapshot["node_id"], snapshot["subtree"]
        score, hits = snapshot["score"], snapshot["hits"]
        requests, members = [], []
        for e in episodes:
            s = int(e.payload) % self.n_subtrees
            rows = np.flatnonzero(subtree == s)
            best = rows[np.argmax(score[rows])]
            members.append(node_id[rows])
            requests.append(Request(
                prompt=f"task={e.payload} subtree={s} best={node_id[best]} score={score[best]:.12f} hits={hits[best]}",
                n=self.samples, seed=e.seed, episode=str(e.episode_id)))
        responses = llm.generate(requests)  # one batched call for the whole share
        if self.think_s:
            time.sleep(self.think_s)
        out = []
        for e, nodes, resp in zip(episodes, members, responses):
            answers = np.array([int(t) for t in resp.texts], dtype=np.int64)
            node = nodes[(answers // 10) % len(nodes)]
            reward = (answers % 10) / 9.0
            out.append(EpisodeResult(e.episode_id, {"episode_id": e.episode_id, "answers": answers.tolist(),
                                                    "reward": float(reward.mean())},
                                     {"node": node.astype(np.int64), "reward": reward}))
        return out

    def apply(self, results: Sequence[EpisodeResult]) -> None:
        if any(r.episode_id == self.refuse_on for r in results):
            raise StoreError(f"toy store refuses the update of episode {self.refuse_on}")
        ids, score, hits = self.table["node_id"], self.table["score"], self.table["hits"]
        rows = []
        for r in results:
            for j, (node, reward) in enumerate(zip(r.updates["node"], r.updates["reward"])):
                i = int(np.searchsorted(ids, node))
                if i == len(ids) or ids[i] != node:
                    continue  # another shard's subtree
                score[i] = self.decay * score[i] + (1.0 - self.decay) * reward
                hits[i] += 1
                rows.append((r.episode_id, int(node), j))
        if rows:
            self.ledger = np.concatenate([self.ledger, np.array(rows, dtype=np.int64)])

    # -- Checkpointable --------------------------------------------------------------------------
    def save_state(self, directory: Path) -> None:
        np.savez(Path(directory) / "toy_state.npz", ledger=self.ledger, **self.table)

    def load_state(self, directory: Path) -> None:
        with np.load(Path(directory) / "toy_state.npz", allow_pickle=False) as z:
            self.table = {k: z[k].copy() for k in COLUMNS}
            self.ledger = z["ledger"].copy()

    # -- Shardable (by subtree) ------------------------------------------------------------------
    def split(self, count: int) -> list["ToyMethod"]:
        shards = []
        for k in range(count):
            keep = self.table["subtree"] % count == k
            shard = ToyMethod(self.n_subtrees, self.nodes_per_subtree, self.decay, self.samples, self.name,
                              self.think_s, self.crash_on, self.refuse_on)
            shard.table = {c: v[keep].copy() for c, v in self.table.items()}
            shard.ledger = self.ledger[np.isin(self.ledger[:, 1], shard.table["node_id"])]
            shards.append(shard)
        return shards

    def merge_snapshots(self, parts) -> dict[str, np.ndarray]:
        merged = {k: np.concatenate([p[k] for p in parts]) for k in COLUMNS}
        order = np.argsort(merged["node_id"], kind="stable")
        return {k: v[order] for k, v in merged.items()}

    def join(self, shards: Sequence["ToyMethod"]) -> None:
        self.table = self.merge_snapshots([s.table for s in shards])
        ledger = np.concatenate([s.ledger for s in shards])
        self.ledger = ledger[np.lexsort((ledger[:, 2], ledger[:, 0]))]

    # -- for tests -------------------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        return {**{k: v.copy() for k, v in self.table.items()}, "ledger": self.ledger.copy()}
