"""MemTool call overhead: one sandboxed call of a trivial tool against a bare interpreter start, one run.

A trivial MemTool (``run_tool`` returns "ok") through :func:`engine.forecast.sandbox.run_sandboxed`
(bwrap, user/pid/net/mount namespaces, seccomp filter, rlimits, item folder copied into a private
tmpfs and back) against the reference measured in the same run: ``python -I -S -c pass`` as a plain
subprocess (the interpreter start every call pays anyway). Wall time, interleaved rounds, medians.

Command (writes benchmarks/results/sandbox.json; tables in benchmarks/results/sandbox.md, by build_results.py)::

    python -m pytest benchmarks/test_sandbox.py --benchmark-only -s
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.forecast.sandbox import python_executable, run_sandboxed, sandbox_available

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import record  # noqa: E402  (benchmarks/_results.py)

OK, WHY = sandbox_available()
pytestmark = pytest.mark.skipif(not OK, reason=f"sandbox unavailable: {WHY}")

TOOL = ("TOOL_NAME = 't'\nTOOL_SPEC = {}\ndef build_runner_kwargs(arguments, config, runtime_context):\n"
        "    return {}\ndef run_tool():\n    return 'ok'\n")
REQ = {"mode": "call", "arguments": {}, "runtime": {}}


@pytest.fixture
def tool_and_item(tmp_path):
    tool = tmp_path / "tool.py"
    tool.write_text(TOOL)
    item = tmp_path / "item"
    item.mkdir()
    (item / "raw_data.json").write_text('{"item": {"content": "' + "news " * 400 + '"}}')
    return tool, item


def test_memtool_call_overhead(benchmark, tool_and_item):
    tool, item = tool_and_item
    py = python_executable()
    sandboxed, bare = [], []
    for _ in range(15):  # interleaved, so drift on the shared machine hits both alike
        t = time.perf_counter()
        assert run_sandboxed(tool, item, REQ).ok
        sandboxed.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([py, "-I", "-S", "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t)
    benchmark.pedantic(run_sandboxed, args=(tool, item, REQ), rounds=10, iterations=1)
    s, b = statistics.median(sandboxed), statistics.median(bare)
    print(f"\nsandboxed trivial MemTool call: median {s * 1e3:.1f} ms; bare interpreter start: median "
          f"{b * 1e3:.1f} ms; ratio {s / b:.2f}x")
    record("sandbox", "trivial-call", {"variant": "benchmark run", "sandboxed_s": s, "bare_s": b, "ratio": s / b,
                                       "calls": 15},
           note="median wall time per call, interleaved with a bare interpreter start")
    assert s > 0 and b > 0
