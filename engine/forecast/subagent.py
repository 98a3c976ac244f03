"""The memory-processing subagent and its artifact workspace (paper 2.3 eq. 2, B.1 to B.3, Prompt 5).

Each retrieved item becomes one item folder holding ``raw_data.json`` (the
question, query, cutoff, source metadata and content, B.2). The subagent
follows the active MemGuide: its system prompt carries the guide's prompt and
the OpenAI schemas of exactly the guide's MemTools, and a call to any other
tool is refused (B.7 allowlist). Every MemTool call runs in the bubblewrap
sandbox on a private copy of the item folder (``sandbox``); only regular
files come back. The guide's output ``final_data.txt``, read without following
links (``item_files``), is the factual memory ``m_{t,k}`` returned to the main
agent, with the item folder it came from. An output the engine refuses (a
symlink, a FIFO, a hard link, too large) is named in the item's call log and
the item gets no factual memory.

LLM calls are batched across every item in flight (one ``generate`` per step
for all items of all questions). ``mode = "pipeline"`` runs the guide's tools in
their listed order without an LLM (tools with required arguments are skipped);
``mode = "llm"`` falls back to that pipeline for an item whose LLM steps ended
without an output file, and marks the item ``fallback`` (reported).
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from engine.forecast import item_files, prompts
from engine.forecast.sandbox import ITEM_MOUNT, SandboxLimits, run_sandboxed
from engine.forecast.search import SearchResult
from engine.forecast.toolcalls import parse_tool_calls
from engine.llm.base import Request

INPUT_FILENAME = "raw_data.json"
OUTPUT_FILENAME = "final_data.txt"
RUNTIME = {"item_dir": ITEM_MOUNT, "input_filename": INPUT_FILENAME, "output_filename": OUTPUT_FILENAME}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:80] or "q"


def write_item(workspace: Path, qid: str, turn: int, rank: int, result: SearchResult, query: str,
               problem: str, requirements: str, cutoff: datetime, dataset: str = "prophet_arena") -> Path:
    """Write one retrieved item as ``<workspace>/<qid>/turn<t>_item<k>/raw_data.json``; return the folder."""
    folder = Path(workspace) / _safe(qid) / f"turn{turn}_item{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    raw = {
        "task_id": qid, "dataset_name": dataset, "search_turn": turn, "item_rank": rank, "query": query,
        "problem_statement": problem, "task_requirements": requirements, "search_before": cutoff.isoformat(),
        "content_source": "local_corpus", "item": {
            "title": result.title, "url": result.url, "content": result.content,
            "published_date": result.available_at.isoformat(), "score": result.score, "doc_id": result.doc_id,
            "origin": result.origin,
        },
    }
    (folder / INPUT_FILENAME).write_text(json.dumps(raw, ensure_ascii=False, indent=1), encoding="utf-8")
    return folder


def has_output(item_dir: Path) -> bool:
    """Whether the item folder holds ``final_data.txt`` as a regular file (examined without following links)."""
    try:
        return Path(item_dir, OUTPUT_FILENAME).lstat().st_mode & 0o170000 == 0o100000
    except OSError:
        return False


@dataclass
class ItemMemory:
    """The factual memory of one item and how it was produced."""

    item_dir: Path
    text: str = ""
    ok: bool = False
    fallback: bool = False
    calls: list = field(default_factory=list)  # (tool, status, short result/error)

    @property
    def source_url(self) -> str:
        try:
            return json.loads((self.item_dir / INPUT_FILENAME).read_text(encoding="utf-8"))["item"]["url"]
        except (OSError, KeyError, json.JSONDecodeError):
            return ""


@dataclass
class MemoryProcessor:
    """Applies one MemGuide with its MemTools to many item folders (eq. 2: m = P_{g,T_g}(r, q))."""

    guide: dict
    tool_paths: dict  # tool name -> published/staged file
    tool_specs: dict  # tool name -> TOOL_SPEC
    llm: object | None = None
    mode: str = "llm"  # "llm" | "pipeline"
    max_steps: int = 4
    max_tokens: int = 256
    temperature: float = 0.2
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    workers: int = 2
    max_chars: int = 4000  # factual memory kept per item

    def _call(self, item_dir: Path, name: str, args: dict):
        if name not in self.guide["tool_names"] or name not in self.tool_paths:
            return "refused", f"tool {name!r} is not allowed by MemGuide {self.guide['guide_name']!r}"
        res = run_sandboxed(self.tool_paths[name], item_dir, {"mode": "call", "arguments": args, "runtime": RUNTIME},
                            self.limits)
        msg = res.result if res.ok else res.error
        if res.refused:
            msg = "; ".join(f"refused output {n!r}: {why}" for n, why in sorted(res.refused.items())) + \
                  (f"; {msg}" if msg else "")
            if OUTPUT_FILENAME in res.refused and res.ok:
                return "refused", msg
        return res.status, msg

    def _pipeline(self, mem: ItemMemory) -> None:
        for name in self.guide["tool_names"]:
            spec = self.tool_specs.get(name, {})
            if spec.get("function", {}).get("parameters", {}).get("required"):
                continue
            status, out = self._call(mem.item_dir, name, {})
            mem.calls.append((name, status, out[:200]))
            if has_output(mem.item_dir):
                break

    def process(self, item_dirs: list[Path]) -> list[ItemMemory]:
        mems = [ItemMemory(Path(d)) for d in item_dirs]
        if self.mode == "llm" and self.llm is not None and mems:
            self._llm_loop(mems)
        todo = [m for m in mems if not has_output(m.item_dir)]
        if todo:
            for m in todo:
                m.fallback = self.mode == "llm" and self.llm is not None
            with ThreadPoolExecutor(max_workers=self.workers) as ex:
                list(ex.map(self._pipeline, todo))
        for m in mems:
            if not has_output(m.item_dir):
                continue
            try:
                m.text = item_files.read_item_text(m.item_dir, OUTPUT_FILENAME, self.limits.file_bytes)[: self.max_chars]
            except (item_files.UnsafeItemFile, OSError) as exc:
                m.calls.append(("read " + OUTPUT_FILENAME, "refused", str(exc)[:200]))
                m.text = ""
            m.ok = bool(m.text.strip())
        return mems

    def _llm_loop(self, mems: list[ItemMemory]) -> None:
        specs = [self.tool_specs[n] for n in self.guide["tool_names"] if n in self.tool_specs]
        system = prompts.subagent_system(self.guide, specs)
        convs = {i: [{"role": "system", "content": system},
                     {"role": "user", "content": prompts.subagent_user(ITEM_MOUNT, INPUT_FILENAME, OUTPUT_FILENAME)}]
                 for i in range(len(mems))}
        active = list(range(len(mems)))
        for step in range(self.max_steps):
            if not active:
                break
            reqs = [Request(messages=tuple(convs[i]), max_tokens=self.max_tokens, temperature=self.temperature,
                            seed=step, episode=str(mems[i].item_dir)) for i in active]
            resps = self.llm.generate(reqs)
            jobs = []
            for i, resp in zip(active, resps):
                text = resp.texts[0] if resp.completions else ""
                convs[i].append({"role": "assistant", "content": text})
                calls = parse_tool_calls(text)
                jobs.append((i, calls[0] if calls else None))
            with ThreadPoolExecutor(max_workers=self.workers) as ex:
                results = list(ex.map(lambda j: None if j[1] is None else self._call(mems[j[0]].item_dir, *j[1]), jobs))
            nxt = []
            for (i, call), res in zip(jobs, results):
                if call is None:
                    continue  # the subagent stopped (or wrote no call): the pipeline fallback decides
                status, out = res
                mems[i].calls.append((call[0], status, out[:200]))
                if has_output(mems[i].item_dir):
                    continue
                convs[i].append({"role": "user", "content": f"Tool result ({call[0]}, {status}):\n{out[:3000]}"})
                nxt.append(i)
            active = nxt
