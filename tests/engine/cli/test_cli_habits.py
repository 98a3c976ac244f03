"""The `toe` command behaves like its peers: --version, help when called alone, quiet on a closed pipe,
TOML-native dates for --set, and a cluster address where nothing listens refused at once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_version_and_bare_command(capsys):
    from engine import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"toe {__version__}"
    assert main([]) == 0 and "COMMAND" in capsys.readouterr().out
    assert main(["store"]) == 2  # a group without its subcommand: the help, and a usage error


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    rows = ["industry,factor,analysis_direction,q_h10,recall,hit,eid"]
    rows += [f"ind{i % 30},fac{i % 200},direction number {i} with some words,1.0,2,1,{i}" for i in range(4000)]
    (tmp_path / "paths.csv").write_text("\n".join(rows) + "\n")
    assert main(["store", "import", str(tmp_path / "paths.csv"), str(tmp_path / "s")]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "engine", "store", "show", str(tmp_path / "s"), "--tree"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()  # `| head -1`: one line read, then the reader goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert first and "Traceback" not in err and "BrokenPipe" not in err


def test_a_toml_date_is_accepted_where_a_key_is_a_date(capsys):
    cfg = str(ROOT / "configs" / "finance-synthetic.toml")
    assert main(["run", cfg, "--set", "protocol.end=2025-11-28", "--dry-run"]) == 0
    assert main(["run", cfg, "--set", 'protocol.end="2025-11-28"', "--dry-run"]) == 0
    capsys.readouterr()


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_address_where_no_head_listens_is_refused_at_once(tmp_path):
    pytest.importorskip("ray")
    from cluster.ray_executor import probe_head
    from engine.errors import BackendError

    port = _free_port()
    with pytest.raises(BackendError, match=rf"no Ray head answers at 127.0.0.1:{port} .*connect_timeout_s"):
        probe_head(f"127.0.0.1:{port}", 2.0)
    probe_head(None, 2.0)
    probe_head("auto", 2.0)
    # the whole command in a fresh process (this one may hold a Ray cluster of its own, which a run would reuse)
    proc = subprocess.run([sys.executable, "-m", "engine", "run", str(ROOT / "configs" / "game24.toml"), "--executor",
                           "ray", "--workers", "2", "--address", f"127.0.0.1:{port}", "--out", str(tmp_path / "o"),
                           "--set", "protocol.test_limit=1", "--set", "protocol.warmup_sample=1", "--set",
                           'methods=["tot"]', "--set", "seeds=[0]", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    # the probe's message: the run failed before ray.init, whose own retries took minutes
    assert proc.returncode == 1 and f"no Ray head answers at 127.0.0.1:{port}" in proc.stderr, proc.stderr[-2000:]


def test_dry_run_json_is_the_resolved_plan(capsys, tmp_path):
    assert main(["run", "configs/game24.toml", "--dry-run", "--json", "--out", str(tmp_path / "o"),
                 "--set", "seeds=[0, 1]"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["task"] == "game24" and plan["seeds"] == [0, 1] and plan["finished_run"] is False
    assert plan["out"] == str(tmp_path / "o") and plan["methods"][0] == "tot"
    assert main(["run", "configs/game24.toml", "--json", "--out", str(tmp_path / "o")]) == 1
    assert "--json goes with --dry-run" in capsys.readouterr().err
