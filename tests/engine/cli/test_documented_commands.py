"""Every command line the README and docs/ show in a ```bash block runs as shown (placeholders filled).

``toe run`` and ``toe llm generate`` run with ``--dry-run`` (the whole config and every override
validated, nothing started); the other commands run for real on small inputs. Lines of each block
run in order in one shell, in a scratch folder holding the repository's configs, so a block's later
lines see what its earlier lines wrote. Installation, test, Ray and vLLM server lines are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
# installation, the test suite, Ray and vLLM servers, the vLLM set-up and the calibration measurement (minutes)
SKIP = re.compile(r"^\s*(scripts/setup\.sh|(\.venv/bin/)?python3?(\.11)? -m (pytest|venv)|pip |ray |RAY_AUTH_MODE=\S+ ray |"
                  r"vllm serve|/work/vllm-venv/|VLLM_CPU_KVCACHE_SPACE=|python scripts/llm_calibrate_sim\.py)")
CSV = """industry,factor,analysis_direction,q_h10,q_h20,q_h40,recall,hit,eid
Energy,Macroeconomy,Pricing capacity utilization from aggregate-demand cycles,1.6602,0.5981,0.9529,705,208,2
Energy,Policy planning,Supply-side constraints,1.1205,0.3548,0.2004,1125,602,1
Energy,Geopolitics,Geopolitical uncertainty,1.4600,0.7345,0.8703,22446,13209,0
"""


def blocks() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"^ *```(?:bash|sh)\n(.*?)^ *```", text, re.S | re.M):
            body = "\n".join(line for line in m.group(1).splitlines() if line.strip())
            out.append((doc.name, text[: m.start()].count("\n") + 1, body))
    return out


def fill(body: str, scratch: Path, pa_data: Path) -> str:
    """Placeholders -> real paths and values in ``scratch``; shell comments are left to the shell."""
    from engine.forecast.futurex_tasks import EXAMPLE_DOCS, EXAMPLE_ITEMS

    subs = [
        (r"\.venv/bin/toe", "toe"), (r"\.venv/bin/python", "python"), (r"/tmp/", f"{scratch}/tmp/"),
        (r"\bHEAD(_IP)?:6379", "127.0.0.1:6379"), (r"--workers N\b", "--workers 2"),
        (r"\bCONFIG\b", "configs/game24.toml"),
        (r"data\.path=(DIR|/my/copy)", f"data.path={pa_data}"),
        (r"/my/futurex\.jsonl", str(EXAMPLE_ITEMS)), (r"/my/docs\.jsonl", str(EXAMPLE_DOCS)),
        (r"data\.n_evo=20", "data.n_evo=4"),  # "your own copy" filled with the 16-item shipped example
        (r"forecast baselines DIR", f"forecast baselines {pa_data}"),
        (r"--puzzles FILE", "--puzzles puzzles.txt"), (r"FILE\.parquet", "updates.parquet"),
        (r"PATHS\.csv", "paths.csv"), (r"\bDIR\b", "store_dir"),
    ]
    for pat, rep in subs:
        body = re.sub(pat, rep, body)
    return body


def _commands(body: str) -> list[str]:
    lines, keep = body.split("\n"), []
    i = 0
    while i < len(lines):  # a line and its backslash continuations are one command
        cmd = [lines[i]]
        while cmd[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        i += 1
        if not SKIP.match(cmd[0]):
            keep.append("\n".join(cmd))
    return keep


PREAMBLE = """set -euo pipefail
toe() {
  case "$1 ${2:-}" in
    "run "*|"llm generate") "$TOE_PY" -m engine "$@" --dry-run ;;
    *) "$TOE_PY" -m engine "$@" ;;
  esac
}
python() { "$TOE_PY" "$@"; }
"""

CASES = blocks()


@pytest.fixture
def scratch(tmp_path, pa_data):
    """A checkout-like folder: configs and engine linked in, ../shared/data/forecast/prophet_arena beside it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shared = tmp_path / "shared" / "data" / "forecast"
    shared.mkdir(parents=True)
    (shared / "prophet_arena").symlink_to(pa_data)
    tmp_path = tmp_path / "repo"
    tmp_path.mkdir()

    for name in ("configs", "engine"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "paths.csv").write_text(CSV)
    (tmp_path / "puzzles.txt").write_text("4 9 10 13\n1 1 4 6\n")
    (tmp_path / "p.txt").write_text("Input: 4 9 10 13\n")
    pq.write_table(pa.table({"eid": [0, 2], "r_h10": [1.0, -1.0], "r_h20": [0.5, 0.0], "r_h40": [0.0, 1.0]}),
                   tmp_path / "updates.parquet")
    subprocess.run([sys.executable, "-m", "engine", "store", "import", "paths.csv", "store_dir"], cwd=tmp_path,
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for folder in ("runs/finance", "runs/finance-synthetic"):  # the store checkpoint a finance run leaves
        subprocess.run([sys.executable, "-m", "engine", "store", "import", "paths.csv", f"{folder}/tree_formula_seed0"],
                       cwd=tmp_path, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return tmp_path


def _run_in_process(cmd: str, capsys) -> tuple[int, str]:
    """A plain ``toe ...`` line (no shell syntax) through the CLI in this process: fast, one import."""
    from engine.cli import main

    argv = shlex.split(cmd.replace("\\\n", " "), comments=True)[1:]
    if argv[:1] == ["run"] or argv[:2] == ["llm", "generate"]:
        argv.append("--dry-run")
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


@pytest.mark.slow
@pytest.mark.parametrize("doc, line, body", CASES, ids=[f"{d}:{n}" for d, n, _ in CASES])
def test_documented_commands_run(doc, line, body, scratch, pa_data, monkeypatch, capsys):
    commands = _commands(fill(body, scratch, pa_data))
    if not commands:
        pytest.skip("installation, test or server lines only")
    if any(re.match(r"toe forecast tools", c) for c in commands):
        from engine.forecast.sandbox import sandbox_available

        ok, why = sandbox_available()
        if not ok:
            pytest.skip(f"toe forecast tools needs the bubblewrap sandbox: {why}")
    monkeypatch.chdir(scratch)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOE_PY": sys.executable, "HOME": str(scratch)}
    for cmd in commands:
        if re.match(r"toe ", cmd) and not re.search(r"[$<>|;&`]", cmd.split("#")[0]):
            rc, out = _run_in_process(cmd, capsys)
        else:  # shell syntax ($(...), redirections, other programs): bash, with toe as a function
            r = subprocess.run(["bash", "-c", PREAMBLE + cmd], cwd=scratch, env=env, capture_output=True,
                               text=True, timeout=600)
            rc, out = r.returncode, r.stdout + r.stderr
        assert rc == 0, f"{doc}:{line}: {cmd}\n{out[-3000:]}"
        if re.match(r"toe (run|llm generate)", cmd):
            assert "dry run:" in out, f"{doc}:{line}: {cmd}\n{out[-3000:]}"


def test_every_block_is_seen():
    names = {d for d, _, _ in CASES}
    assert {"README.md", "cluster.md", "game24.md", "llm.md", "finance.md"} <= names


def test_no_two_documented_runs_write_one_folder():
    """Run top to bottom, the docs' commands never collide: two different runs (or sweeps) shown anywhere
    never write the same run folder (the second would be refused: 'holds a finished run')."""
    seen: dict[str, set[str]] = {}
    for name, line, body in blocks():
        text = re.sub(r"\\\n\s*", " ", body)  # continuation lines joined
        for cmd in text.splitlines():
            cmd = cmd.split(" #", 1)[0].strip()
            m = re.match(r"^(?:\S*/)?toe (run|sweep) (\S+)(.*)$", cmd)
            if not m or "--dry-run" in cmd:
                continue
            kind, config, rest = m.groups()
            out = re.search(r"--out (\S+)", rest)
            folder = out.group(1) if out else f"runs/{Path(config).stem}" + ("-sweep" if kind == "sweep" else "")
            words = shlex.split(re.sub(r"--out \S+", "", cmd))  # the same run shown with and without its default --out
            seen.setdefault(folder, set()).add(" ".join(words))
    clash = {f: sorted(c) for f, c in seen.items() if len(c) > 1}
    assert not clash, f"documented runs that write the same folder: {clash}"
