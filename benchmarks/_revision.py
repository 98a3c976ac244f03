"""Time a workload on another revision of this repository, side by side with the working tree.

A benchmark that asks "is the change no slower?" compares the same workload on two engines. Rather
than keep a copy of the old code in benchmarks/, the old engine is checked out from git
(:func:`revision_tree`: ``git worktree add --detach``, removed afterwards) and the workload runs in a
child process whose ``engine``/``kernels`` come from that tree, while the workload's own code (a
factory in a benchmark module of the working tree) stays the same, so only the engine differs
(:func:`timed`; ``_instructions.count`` takes the same ``root``). The workload must use
API that both revisions have.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_CHILD = r'''
import importlib, json, sys, time
sys.path[:0] = {paths!r}
module = importlib.import_module({module!r})
fn = getattr(module, {name!r})()  # the factory builds the workload (imports, data) untimed
fn()  # warm-up: JIT, caches
wall, cpu = [], []
for _ in range({repeat}):
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
print("TIMES " + json.dumps({{"wall": wall, "cpu": cpu}}))
'''


@contextlib.contextmanager
def revision_tree(rev: str):
    """A checkout of ``rev`` (any git revision of this repository) in a temporary folder, removed on exit."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], check=True,
                         capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="toe-rev-") as tmp:
        tree = Path(tmp) / sha[:12]
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), sha], check=True,
                       capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def timed(module: str, factory: str, root: Path = ROOT, repeat: int = 1, timeout_s: float = 1800.0) -> dict:
    """Wall and CPU seconds of ``repeat`` calls of ``module.factory()``'s function (after one untimed call), in a
    child process whose engine is ``root``'s (``module`` is a benchmark module of the working tree)."""
    code = _CHILD.format(paths=[str(HERE), str(root)], module=module, name=factory, repeat=int(repeat))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                          cwd=str(ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("TIMES ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{module}.{factory} on {root} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][6:])
