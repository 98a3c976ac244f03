"""A user's template file changes the prompts a Game-of-24 run sends (seen through a replay trace)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.ipc as ipc
import pytest

from engine import templates
from engine.errors import ConfigError
from engine.game24 import prompts as P
from engine.game24.experiment import parse_config
from engine.tasks import run
from engine.tasks import RunOptions

EXTRA = " Think it through before the last line."


@pytest.fixture(autouse=True)
def _restore_shipped():
    yield
    templates.use("game24")
    templates.use("baselines")


def _cfg(trace: Path, prompts: dict | None = None) -> dict:
    cfg = {"task": "game24", "methods": ["tot", "reme"], "seeds": [0],
           "protocol": {"warmup_sample": 3, "test_limit": 3, "round_size": 3},
           "llm": {"backend": "replay", "replay_path": str(trace), "replay_mode": "passthrough",
                   "replay_backend": "simulated"},
           "reme": {"extraction": "llm"},
           "report": {"plots": False}}
    if prompts is not None:
        cfg["prompts"] = prompts
    return cfg


def _prompts(trace: Path) -> list[str]:
    with ipc.open_file(trace) as f:
        return f.read_all().column("prompt").to_pylist()


def _user_file(tmp_path: Path) -> Path:
    """A user file: the value prompt with one more sentence on its first line, a reworded ReMe success prompt."""
    shipped = templates.load("game24").sources["value"]
    first, rest = shipped.split("\n", 1)
    path = tmp_path / "my_game24.toml"
    path.write_text(f"value = '''\n{first}{EXTRA}\n{rest}'''\n")
    return path


def test_a_user_template_changes_the_prompts_a_run_sends(tmp_path, capsys):
    base = tmp_path / "base.arrow"
    assert run(_cfg(base), RunOptions(config_path=Path("x.toml"), out=tmp_path / "a", progress=False)) == 0
    capsys.readouterr()
    sent = _prompts(base)
    value_prompts = [p for p in sent if p.startswith(P.VALUE_MARK)]
    assert value_prompts and not any(EXTRA in p for p in sent)

    user = _user_file(tmp_path)
    base_file = tmp_path / "my_baselines.toml"
    base_file.write_text("reme_success = '''MY SUCCESS PROMPT for {{ task }}:\n{{ attempt }}\n'''\n")
    mine = tmp_path / "mine.arrow"
    out = tmp_path / "b"
    cfg = _cfg(mine, {"file": str(user), "baselines": str(base_file)})
    assert run(cfg, RunOptions(config_path=Path("x.toml"), out=out, progress=False)) == 0
    printed = capsys.readouterr()
    sent2 = _prompts(mine)
    value2 = [p for p in sent2 if p.startswith(P.VALUE_MARK)]
    assert value2 and all(EXTRA in p.splitlines()[0] for p in value2)
    # prompts the file does not override fall back to the shipped text
    head = templates.load("game24").sources["propose"].split("{%")[0]  # the shipped text before the placeholders
    proposes = [p for p in sent2 if p.startswith(P.PROPOSE_MARK)]
    assert proposes and all(p.startswith(head) for p in proposes)
    assert any("MY SUCCESS PROMPT for " in p for p in sent2)  # ReMe's prompts are chat messages (stored as JSON)
    assert not any("MY SUCCESS PROMPT" in p for p in sent)
    meta = json.loads((out / "summary.json").read_text())["meta"]
    assert meta["prompts"]["game24"] == {"file": str(user), "custom": ["value"]}
    assert meta["prompts"]["baselines"]["custom"] == ["reme_success"]
    assert "simulated policies parse the shipped prompts" in meta["prompts_warning"]
    assert "warning: custom prompt templates" in printed.err and "Warning: custom prompt" in printed.out


def test_prompts_section_is_validated(tmp_path):
    with pytest.raises(ConfigError, match=r"prompts\.file: no template file at"):
        parse_config({"task": "game24", "prompts": {"file": str(tmp_path / "absent.toml")}})
    with pytest.raises(ConfigError, match="prompts"):
        parse_config({"task": "game24", "prompts": {"fil": "x.toml"}})
    bad = tmp_path / "bad.toml"
    bad.write_text("propose = '''Input: {{ numbers }}\n'''\n")  # drops {{ experience }}
    cfg = _cfg(tmp_path / "t.arrow", {"file": str(bad)})
    with pytest.raises(ConfigError, match=r"bad\.toml.*prompt 'propose' lacks required placeholder\(s\) "
                                          r"\['experience'\]"):
        run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path / "c", progress=False))
    assert not (tmp_path / "t.arrow").exists()  # refused before any request


def test_custom_templates_need_the_local_executor(tmp_path):
    cfg = _cfg(tmp_path / "t.arrow", {"file": str(_user_file(tmp_path))})
    with pytest.raises(ConfigError, match="need the local executor"):
        run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path / "d", progress=False, executor="ray"))
