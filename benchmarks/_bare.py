"""Two bare processes on the executor benchmark's rounds: what two workers can reach on this machine at all.

The executor benchmark (``benchmarks/test_executor.py``) compares Ray with 2 workers against the
local executor. This helper runs the same work with no executor: the rounds' snapshots are
computed once in the driver (one local pass: snapshot, run, apply), and two spawned processes then
run the halves of every round against those snapshots (the same contiguous halves as Ray's shares,
the same method, one LLM backend each). Nothing is sent between rounds: no Ray, no apply, no
snapshot. Three modes, each timed from one start line to the last process's end:

- ``bare-1``: one process runs every whole round (the one-worker reference);
- ``bare-2``: two processes run their halves of all rounds back to back, never waiting for each
  other: only the machine's two cores limit it (the *ceiling* for two workers);
- ``bare-2,barrier``: the same, with a ``multiprocessing.Barrier`` after every round (a futex, a few
  microseconds): what the rounds' own imbalance costs, before any messaging.

So ``bare-1 / bare-2`` is the machine's ceiling, ``bare-1 / bare-2,barrier`` the ceiling with
rounds, and the gap from there to ``local-1 / ray-2`` is what the executor adds (apply, snapshot,
Ray's messages). The processes' records must equal the local executor's (the same work was done).
Figures come from the SIMULATED Game-of-24 policy.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np


def records(results) -> list[dict]:
    """An episode share's records without their timings (keys ending in ``_s`` differ run to run)."""
    return [{k: v for k, v in r.record.items() if not k.endswith("_s")} for r in results]


def _child(conn, step, method, llm_factory, snapshots) -> None:
    from engine.executor import freeze
    from engine.llm.base import MeteredBackend

    llm = MeteredBackend(llm_factory(), by_episode=False)
    snaps = [freeze(s) for s in snapshots]
    while (msg := conn.recv()) is not None:
        mode, shares = msg
        if mode != "bare-1":
            step.wait()  # both processes start together
        t0, out = time.perf_counter(), []
        for snap, episodes in zip(snaps, shares):
            out.extend(method.run_episodes(snap, episodes, llm))
            if mode == "bare-2,barrier":
                step.wait()
        conn.send((t0, time.perf_counter(), records(out)))


def round_snapshots(method, rounds, llm) -> list[dict]:
    """Each round's snapshot as the local executor takes it (copied), running and applying the rounds."""
    from engine.executor import freeze

    snaps = []
    for batch in rounds:
        snap = {k: np.array(v, copy=True) for k, v in method.snapshot().items()}
        snaps.append(snap)
        method.apply(method.run_episodes(freeze(snap), batch, llm))
    return snaps


class BarePair:
    """Two spawned processes holding ``method``, an LLM from ``llm_factory`` and every round's snapshot."""

    MODES = ("bare-1", "bare-2", "bare-2,barrier")

    def __init__(self, method, llm_factory, rounds, snapshots):
        ctx = mp.get_context("spawn")  # the driver runs Ray: forking it would copy Ray's threads
        self.rounds = [list(b) for b in rounds]
        step = ctx.Barrier(2)
        self.conns, self.procs = [], []
        for _ in range(2):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_child, args=(there, step, method, llm_factory, snapshots), daemon=True)
            proc.start()
            self.conns.append(here)
            self.procs.append(proc)

    def run(self, mode: str) -> tuple[float, list[dict], list[float]]:
        """Seconds from the start line to the last process's end, the records (episode order) and each
        process's own seconds (for ``bare-2``: its busy time, it never waits)."""
        if mode == "bare-1":
            self.conns[0].send((mode, self.rounds))
            used = self.conns[:1]
        else:
            halves = [np.linspace(0, len(b), 3).round().astype(int) for b in self.rounds]
            for i, conn in enumerate(self.conns):
                conn.send((mode, [b[h[i]:h[i + 1]] for b, h in zip(self.rounds, halves)]))
            used = self.conns
        got = [conn.recv() for conn in used]
        wall = max(g[1] for g in got) - min(g[0] for g in got)
        records = sorted((r for g in got for r in g[2]), key=lambda r: r["episode_id"])
        return wall, records, [g[1] - g[0] for g in got]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:  # pragma: no cover - already gone
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():  # pragma: no cover
                proc.kill()
