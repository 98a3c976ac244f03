"""Concatenate benchmarks/results/*.md (one per hot path) into benchmarks/RESULTS.md.

Each suite writes its own figures and the command that produced them into
benchmarks/results/<topic>.md; this script only assembles them:

    python benchmarks/build_results.py
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["store", "game24_core", "llm", "index", "cluster", "finance", "sandbox"]


def main() -> None:
    parts = sorted((HERE / "results").glob("*.md"), key=lambda p: (ORDER.index(p.stem) if p.stem in ORDER else 99, p.stem))
    body = [
        "# Benchmark results\n",
        "Every figure below was measured with pytest-benchmark on the shared 2-core, 24 GiB development",
        "machine (other jobs running), as a ratio against a reference measured in the same run. Each",
        "section gives the command that produced it. Figures from the simulated LLM policy are labelled",
        "SIMULATED: it is a test harness, not a model. Assembled by `python benchmarks/build_results.py`",
        "from `benchmarks/results/*.md`.\n",
    ]
    for p in parts:
        text = p.read_text().strip()
        lines = text.splitlines()
        if lines and lines[0].startswith("# "):
            lines[0] = "#" + lines[0]
        body.append("\n".join(lines) + "\n")
    (HERE / "RESULTS.md").write_text("\n".join(body))


if __name__ == "__main__":
    main()
