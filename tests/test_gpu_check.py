"""scripts/gpu_check.sh (run on a lent GPU machine): its commands, printed by the dry mode, are valid here."""

import os
import shlex
import subprocess
from pathlib import Path

from engine.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_commands_are_valid(tmp_path):
    out = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), str(tmp_path / "g")], cwd=ROOT, check=True,
                         capture_output=True, text=True, env={**os.environ, "GPU_CHECK_DRY": "1"}).stdout
    lines = [shlex.split(x[2:]) for x in out.splitlines() if x.startswith("+ ")]
    assert [x[1] for x in lines] == ["scripts/llm_gguf_to_hf.py", "-m"]
    run = lines[1][3:]  # after PY -m engine
    assert run[0] == "run" and "llm.backend=vllm" in run and 'methods=["tot", "toe-supply"]' in run
    assert main(run + ["--dry-run"]) == 0  # every key it sets is known and valid
