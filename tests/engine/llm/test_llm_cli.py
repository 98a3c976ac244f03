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
                 "--set", "llm.simulated.p_value_malformed=0.0"]) == 0
    (row,) = _lines(capsys)
    assert row["finish_reason"] == "length" and row["completion_tokens"] == 1


def test_generate_replay_passthrough_then_strict(capsys, tmp_path):
    trace = tmp_path / "t.arrow"
    args = ["llm", "generate", "--backend", "replay", "--set", f'llm.replay.path="{trace}"', "--n", "2",
            "--prompt", P.value_prompt("2 5 7")]
    assert main(args + ["--set", "llm.replay.mode=passthrough"]) == 0
    first = _lines(capsys)
    assert main(args) == 0
    assert _lines(capsys) == first


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--prompt", "x", "--n", "0"], "Request.n must be >= 1"),
        (["--prompt", "x", "--set", "llm.nope=1"], "unknown key(s) 'nope' in [llm]"),
        (["--prompt", "x", "--set", "base_url=http://h/v1"], "--set takes llm.KEY=VALUE"),
        (["--prompt", "x", "--set", "tot.k=1"], "reads only [llm]"),
        (["--prompt", "x", "--set", "llm.openai.base_url=ftp://h"], "llm.openai.base_url must start with http://"),
        (["--prompt-file", "/nonexistent/p.txt"], "does not exist"),
        (["--prompt", ""], "must not be empty"),
        (["--backend", "replay", "--prompt", "x"], "llm.replay.path must name"),
    ],
)
def test_generate_errors(argv, match, capsys):
    assert main(["llm", "generate"] + argv) == 1
    assert match in capsys.readouterr().err


def test_generate_backend_is_the_one_asked_for(capsys, tmp_path):
    """--backend openai with llm.openai.base_url answers from that server or fails; never from the simulated policy."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('task = "game24"\n[llm]\nbackend = "simulated"\n')
    for extra in ([], ["--config", str(cfg)]):
        rc = main(["llm", "generate", "--backend", "openai", *extra, "--set", "llm.openai.base_url=http://127.0.0.1:9/v1",
                   "--set", "llm.openai.retries=0", "--set", "llm.openai.connect_timeout_s=2", "--prompt", "hi"])
        captured = capsys.readouterr()
        assert rc == 1 and captured.out == ""
        assert "127.0.0.1:9" in captured.err


def test_generate_config_table_then_overrides(capsys, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('task = "game24"\n[llm]\nbackend = "simulated"\nmodel = "from-file"\n')
    assert main(["llm", "generate", "--config", str(cfg), "--prompt", P.value_prompt("4 6")]) == 0
    assert _lines(capsys)[0]["model"] == "from-file"
    assert main(["llm", "generate", "--config", str(cfg), "--set", "llm.model=from-set",
                 "--prompt", P.value_prompt("4 6")]) == 0
    assert _lines(capsys)[0]["model"] == "from-set"


def test_generate_dry_run_builds_no_backend(capsys):
    assert main(["llm", "generate", "--backend", "openai", "--set", "llm.openai.base_url=http://127.0.0.1:9/v1",
                 "--set", "llm.model=M", "--prompt", "hi", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["llm"]["backend"] == "openai" and plan["llm"]["openai"]["base_url"] == "http://127.0.0.1:9/v1"
    assert plan["llm"]["model"] == "M" and plan["request"]["prompt_chars"] == 2
