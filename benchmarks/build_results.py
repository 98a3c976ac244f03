"""Render benchmarks/RESULTS.md, the README's speed table and every docs table from the measured figures.

The suites write their figures as JSON (``benchmarks/results/<topic>.json``: command, machine,
date, figures; ``benchmarks/_results.py``). This script renders each table from them into the
marked blocks of ``benchmarks/results/*.md`` (the prose around them is kept), the README's speed
table and the docs' benchmark tables, then assembles ``benchmarks/RESULTS.md``. It is
``scripts/doc_tables.py`` (one renderer for every measured table, run summaries included):

    .venv/bin/python benchmarks/build_results.py            # rewrite
    .venv/bin/python benchmarks/build_results.py --check    # exit 1 if anything is stale
"""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _doc_tables():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "scripts" / "doc_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    sys.exit(_doc_tables().main())
