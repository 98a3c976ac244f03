"""Instructions executed by one piece of Python code, counted by valgrind's callgrind: a load-free measure.

Wall and CPU time on a shared machine swing by 10-40% from run to run (other jobs, frequency
scaling, steal time), more than the differences a side-by-side benchmark is after. The number of
machine instructions a function executes does not depend on the load, so two implementations can be
compared to a fraction of a percent. It does not see what time alone shows (cache misses, stalls,
system calls): the time-based figures stay the primary ones, this is their load-free companion.

How: the workload runs in a child process under ``valgrind --tool=callgrind --instr-atstart=no``
(imports and the warm-up uncounted); the child switches counting on with ``callgrind_control -i on``
around the measured calls only and the total is read from callgrind's summary line. Python's string
hashing is fixed (``PYTHONHASHSEED=0``): with random seeds, dict and set layouts change the count by
a few percent from run to run. Needs the ``valgrind`` Debian package; :func:`available` says whether
it is installed. A run is slow (about 50x native speed), so workloads should be a single pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r'''
import importlib, os, subprocess, sys
sys.path[:0] = {paths!r}
module = importlib.import_module({module!r})
fn = getattr(module, {name!r})()  # the factory builds the workload (imports, data) uncounted
fn()  # warm-up: JIT, caches
subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
for _ in range({repeat}):
    fn()
subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, capture_output=True)
'''

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def count(module: str, factory: str, repeat: int = 1, timeout_s: float = 1800.0, root: Path | None = None) -> int:
    """Instructions of ``repeat`` calls of the function that ``module.factory()`` returns (after one uncounted call);
    ``root``: the repository tree whose engine the child imports (default: this one; see benchmarks/_revision.py)."""
    if not available():
        raise RuntimeError("valgrind (callgrind) is not installed: apt-get install valgrind")
    here = str(Path(__file__).resolve().parent)
    code = _CHILD.format(paths=[here, str(root or Path(here).parent)], module=module, name=factory, repeat=int(repeat))
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={tmp}/cg.out",
             sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s, env=env)
    found = _COLLECTED.findall(proc.stderr)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"callgrind run of {module}.{factory} failed (exit {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    return int(found[-1])
