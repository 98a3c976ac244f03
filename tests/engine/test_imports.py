"""The engine must import without ray and vllm (they load lazily)."""

import subprocess
import sys


def test_engine_imports_without_ray_or_vllm():
    code = (
        "import sys, importlib, pkgutil, engine, engine.cli\n"
        "engine.cli.build_parser()\n"
        "bad = [m for m in ('ray', 'vllm') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_help_runs():
    out = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "run" in out.stdout
