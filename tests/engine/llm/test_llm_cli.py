"""``toe llm generate``."""

import json

import pytest

from engine.cli import main
from engine.game24 import prompts as P


def _lines(capsys):
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_generate_simulated_prints_one_json_line_per_completion(capsys, tmp_path):
    assert main(["llm", "generate", "--backend", "simulated", "--n", "3", "--seed", "2",
                 "--prompt", P.propose_prompt("4 9 10 13")]) == 0
    rows = _lines(capsys)
    assert [r["sample"] for r in rows] == [0, 1, 2]
    assert all(r["backend"] == "simulated" and r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in rows)
    assert all(P.parse_step_line(r["text"].splitlines()[0]) or r["text"] for r in rows)
    f = tmp_path / "p.txt"
    f.write_text(P.value_prompt("4 6"))
    assert main(["llm", "generate", "--prompt-file", str(f), "--max-tokens", "1",
                 "--set", "simulated.p_value_malformed=0.0"]) == 0
    (row,) = _lines(capsys)
    assert row["finish_reason"] == "length" and row["completion_tokens"] == 1


def test_generate_replay_passthrough_then_strict(capsys, tmp_path):
    trace = tmp_path / "t.arrow"
    args = ["llm", "generate", "--backend", "replay", "--set", f'replay_path="{trace}"', "--n", "2",
            "--prompt", P.value_prompt("2 5 7")]
    assert main(args + ["--set", "replay_mode=passthrough"]) == 0
    first = _lines(capsys)
    assert main(args) == 0
    assert _lines(capsys) == first


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--prompt", "x", "--n", "0"], "Request.n must be >= 1"),
        (["--prompt", "x", "--set", "nope=1"], "unknown key"),
        (["--prompt-file", "/nonexistent/p.txt"], "does not exist"),
        (["--prompt", ""], "must not be empty"),
        (["--backend", "replay", "--prompt", "x"], "replay_path must name"),
    ],
)
def test_generate_errors(argv, match, capsys):
    assert main(["llm", "generate"] + argv) == 1
    assert match in capsys.readouterr().err
