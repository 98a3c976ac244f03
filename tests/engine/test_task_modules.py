"""A task is one module defining TASK: the engine's own are found by file, any other by module path."""

import json
import sys

import pytest

from engine.cli import main
from engine.errors import ConfigError
from engine.tasks import TASK_MEMBERS, builtin_tasks, load_task


def test_the_engine_tasks_are_found_by_file():
    assert builtin_tasks() == {"finance": "engine.finance.task", "forecast": "engine.forecast.task",
                               "futurex": "engine.forecast.futurex_task", "game24": "engine.game24.task",
                               "generic": "engine.generic.task"}
    for name in builtin_tasks():
        task = load_task(name)
        assert task.name == name and all(hasattr(task, m) for m in TASK_MEMBERS)
        assert ":" in task.policy and task.default_metric and task.keys


MODULE = '''
from engine.generic.task import GenericTask


class Sums(GenericTask):
    """A lab's own task, written in its own package: no edit to engine.tasks or the CLI."""

    name = "mylab.sums"
    default_metric = "calls"


TASK = Sums()
'''


@pytest.fixture
def mylab(tmp_path, monkeypatch):
    pkg = tmp_path / "lib" / "mylab"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sums.py").write_text(MODULE)
    (pkg / "broken.py").write_text("class Half:\n    name = 'mylab.broken'\n\n\nTASK = Half()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    yield tmp_path
    for m in ("mylab", "mylab.sums", "mylab.broken"):
        sys.modules.pop(m, None)
    load_task.cache_clear()


def test_a_task_module_outside_the_engine_runs(mylab, capsys):
    problems = mylab / "p.jsonl"
    problems.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)})
                                + "\n" for i in range(6)))
    cfg = mylab / "sums.toml"
    cfg.write_text(f'task = "mylab.sums"\nmethods = ["plain"]\n[data]\npath = "{problems}"\n'
                   '[checker]\nkind = "numeric"\n[report]\nplots = false\n')
    assert main(["run", str(cfg), "--out", str(mylab / "run"), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["task"] == "mylab.sums" and plan["episodes"]["problems"] == 6
    assert main(["run", str(cfg), "--out", str(mylab / "run"), "--no-progress"]) == 0
    summary = json.loads((mylab / "run" / "summary.json").read_text())
    assert summary["meta"]["task"] == "mylab.sums" and [r["method"] for r in summary["methods"]] == ["plain"]
    assert load_task("mylab.sums").default_metric == "calls"


def test_a_task_module_is_checked(mylab):
    with pytest.raises(ConfigError, match="lacks keys, policy"):
        load_task("mylab.broken")
    with pytest.raises(ConfigError, match="defines no NOPE"):
        load_task("mylab.sums:NOPE")
    with pytest.raises(ConfigError, match="no module 'mylab.absent'"):
        load_task("mylab.absent")
    with pytest.raises(ConfigError, match="unknown task 'sums'; valid tasks: finance, forecast, futurex, game24"):
        load_task("sums")
