"""A tiny simulated Game of 24 run for the tracking tests."""

import pytest

TINY = """\
task = "game24"
methods = ["tot", "toe"]
seeds = [0]
[protocol]
warmup_first = 1
warmup_last = 20
warmup_sample = 4
test_first = 901
test_last = 1000
test_limit = 2
round_size = 2
[tot]
breadth = 2
[llm]
backend = "simulated"
[report]
plots = true
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path
