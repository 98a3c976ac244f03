"""``--executor ray`` asking for more than the cluster holds fails at once, naming what to change."""

import time

import pytest

pytestmark = pytest.mark.ray


def test_too_many_workers_fail_at_once(ray_cluster, tmp_path, capsys):
    from engine.cli import main

    cfg = tmp_path / "g.toml"
    cfg.write_text('task = "game24"\nmethods = ["tot"]\nseeds = [0]\n'
                   "[protocol]\nwarmup_last = 0\ntest_limit = 2\nround_size = 2\n[report]\nplots = false\n")
    t0 = time.perf_counter()
    rc = main(["run", str(cfg), "--out", str(tmp_path / "o"), "--executor", "ray", "--workers", "4",
               "--no-progress"])
    took = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == 1 and took < 60, (rc, took)  # the actors' startup timeout is 900 s
    assert "asked 4 workers" in err and "2 CPUs" in err and "--workers 2" in err
    assert not (tmp_path / "o" / "summary.json").exists()
