"""LightMem (re-implementation): buffered fact extraction and sleep-time (offline) update.

Source: J. Fang et al., "LightMem: Lightweight and Efficient Memory-Augmented
Generation" (arXiv:2510.18866); code zjunlp/LightMem@8fc9a91
``src/lightmem/memory/lightmem.py`` (``add_memory``, ``offline_update``,
``construct_update_queue_all_entries``, ``offline_update_all_entries``,
``retrieve``), ``configs/base.py`` (defaults), ``factory/memory_buffer/
short_term_memory.py`` (``ShortMemBufferManager.add_segments``),
``factory/memory_manager/openai.py`` (``_extract_with_prompt``,
``_call_update_llm``), ``memory/prompts.py`` (``METADATA_GENERATE_PROMPT``,
``UPDATE_PROMPT``), ``experiments/longmemeval/`` (the paper's settings:
``force_extract`` on a session's last turn, ``offline_update_all_entries(
score_threshold=0.8)``). The PyPI name ``lightmem`` holds a 16 kB placeholder
(0.0.0) of an older layout, not this system.

Defaults kept: ``pre_compress = False`` and ``topic_segment = False`` (so all
messages of one ``add`` form one segment), ``messages_use = "user_only"``,
``extraction_mode = "flat"``, ``update = "offline"``, ``index_strategy`` /
``retrieve_strategy = "embedding"``.

``add``: the segment goes into the short-term buffer (``buffer_tokens`` 512,
counted by the backend-free token estimate); a segment that would overflow it
first flushes the buffer to an extraction call; the caller's last message
forces extraction (``force_extract``). Extraction: the system prompt
``METADATA_GENERATE_PROMPT`` and one user message ``--- Topic N ---`` with
``[time, weekday] i.user: message`` lines; the answer's ``{"data": [{source_id,
fact}]}`` become memory entries with that message's timestamp. Update queues
(``construct_update_queue_all_entries``): each entry lists the ``keep_top_n``
(10) most similar of its ``update_top_k`` (20) nearest entries that are not
newer. Offline update (``offline_update_all_entries``): an entry that appears
in a newer entry's queue with score >= ``update_score_threshold`` (0.8) is sent,
with those newer entries, to ``UPDATE_PROMPT``: ``update`` replaces its text,
``delete`` removes it, ``ignore`` keeps it.

``retrieve``: cosine top ``top_k`` of the entries (the experiments use 20).

Differences (docs/forecast_baselines.md): the sleep-time update runs after
each ``add`` (an agent turn has no idle time between reading and writing);
tokens are counted by :func:`engine.llm.tokens.count_tokens`, not the model's
tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from engine.baselines import prompts as baseline_prompts
from engine.baselines.common import Hit, parse_json
from engine.baselines.docmem import Job, normalise
from engine.config import check
from engine.llm.base import Request
from engine.llm.tokens import count_tokens


@dataclass(frozen=True)
class LightMemConfig:
    """LightMem parameters (defaults: ``configs/base.py``, ``lightmem.py``, ``experiments/longmemeval``)."""

    top_k: int = 20  # retrieve(limit=20) in experiments/longmemeval
    buffer_tokens: int = 512  # ShortMemBufferManager(max_tokens=512)
    update_top_k: int = 20
    keep_top_n: int = 10
    update_score_threshold: float = 0.8
    max_tokens: int = 800
    temperature: float = 0.0

    def __post_init__(self):
        check(self.top_k >= 1, f"lightmem.top_k must be >= 1, got {self.top_k}")
        check(self.buffer_tokens >= 1, f"lightmem.buffer_tokens must be >= 1, got {self.buffer_tokens}")
        check(1 <= self.keep_top_n <= self.update_top_k,
              f"lightmem.keep_top_n must be in [1, update_top_k={self.update_top_k}], got {self.keep_top_n}")
        check(-1.0 <= self.update_score_threshold <= 1.0,
              f"lightmem.update_score_threshold must be in [-1, 1], got {self.update_score_threshold}")


def extraction_user_prompt(topics: list[list[tuple[int, str, datetime]]], first_topic: int) -> str:
    """``_extract_with_prompt``: one ``--- Topic N ---`` block per segment, ``[time, weekday] i.user: text`` lines."""
    parts = []
    for t, seg in enumerate(topics):
        lines = [f"[{ts.isoformat(timespec='milliseconds')}, {ts.strftime('%a')}] {sid}.user: {text}" for sid, text, ts in seg]
        parts.append(f"--- Topic {first_topic + t} ---\n" + "\n".join(lines))
    return "\n".join(parts)


def rule_facts(user_prompt: str) -> list[dict]:
    """Rule extraction (simulated backend): every message is one fact, as written."""
    out = []
    for line in user_prompt.splitlines():
        if line.startswith("[") and "] " in line and ".user: " in line:
            sid, text = line.split("] ", 1)[1].split(".user: ", 1)
            if sid.strip().isdigit() and text.strip():
                out.append({"source_id": int(sid), "fact": text.strip()})
    return out


def rule_update(target: str, candidates: list[str]) -> dict:
    """Rule update (simulated backend): a newer candidate with the same text supersedes the target (delete); else ignore."""
    return {"action": "delete"} if any(normalise(c) == normalise(target) for c in candidates) else {"action": "ignore"}


def update_user_prompt(target: str, candidates: list[str]) -> str:
    """``_call_update_llm``'s user message."""
    return f"Target memory:{target}\nCandidate memories:\n" + "\n".join(f"- {m}" for m in candidates)


def parse_facts(text: str) -> list[dict] | None:
    data = parse_json(text)
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None
    return [r for r in rows if isinstance(r, dict) and str(r.get("fact", "")).strip()]


def parse_update(text: str) -> dict:
    data = parse_json(text)
    return data if isinstance(data, dict) and "action" in data else {"action": "ignore"}


def simulated_reply(messages: list[dict]) -> str | None:
    if not messages or messages[0].get("role") != "system":
        return None
    system, user = messages[0]["content"], messages[-1]["content"]
    if system == baseline_prompts.render("lightmem_extraction"):
        return json.dumps({"data": rule_facts(user)})
    if system == baseline_prompts.render("lightmem_update"):
        target = user.split("Target memory:", 1)[-1].split("\nCandidate memories:\n", 1)[0]
        cands = [ln[2:] for ln in user.split("\nCandidate memories:\n", 1)[-1].splitlines() if ln.startswith("- ")]
        return json.dumps(rule_update(target, cands))
    return None


class LightMemMemory:
    """LightMem's short-term buffer and its embedding store of memory entries."""

    name = "lightmem"

    def __init__(self, config: LightMemConfig | None = None, *, embedder):
        self.config = config or LightMemConfig()
        self.embedder = embedder
        self.buffer: list[list[tuple[int, str, datetime]]] = []
        self.buffer_tokens = 0
        self.next_source = 0
        self.next_topic = 1
        self.next_id = 0
        self.entries: list[dict] = []  # id, memory, time, vector, update_queue, source
        self.actions: list[tuple[int, str]] = []  # audit: (entry id, update / delete) applied

    def add(self, texts, *, mode: str = "rule", key: str = "", seed: int = 0, when: datetime | str = "",
            force_extract: bool = True) -> Job:
        cfg = self.config
        base = when if isinstance(when, datetime) else datetime(2000, 1, 1)
        seg = []
        for text in map(str, texts):  # assign_sequence_numbers_with_timestamps: 500 ms apart
            seg.append((self.next_source, text, base + timedelta(milliseconds=500 * self.next_source)))
            self.next_source += 1
        batches = []
        need = count_tokens(" ".join(t for _, t, _ in seg)) if seg else 0
        if seg:
            if self.buffer_tokens + need > cfg.buffer_tokens and self.buffer:
                batches.append(self.buffer)
                self.buffer, self.buffer_tokens = [], 0
            self.buffer.append(seg)
            self.buffer_tokens += need
        if force_extract and self.buffer:
            batches.append(self.buffer)
            self.buffer, self.buffer_tokens = [], 0
        new = []
        for b, topics in enumerate(batches):
            user = extraction_user_prompt(topics, self.next_topic)
            self.next_topic += len(topics)
            if mode == "llm":
                (answer,) = yield [Request(messages=({"role": "system", "content": baseline_prompts.render("lightmem_extraction")},
                                                     {"role": "user", "content": user}),
                                           max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=seed + b,
                                           episode=key or None)]
                facts, source = parse_facts(answer), "llm"
                if facts is None:
                    facts, source = rule_facts(user), "rule-fallback"
            else:
                facts, source = rule_facts(user), "rule"
            times = {sid: ts for seg_ in topics for sid, _, ts in seg_}
            for f in facts:
                sid = int(f.get("source_id", -1)) if str(f.get("source_id", "")).lstrip("-").isdigit() else -1
                ts = times.get(sid, base)
                new.append({"id": self.next_id, "memory": str(f["fact"]).strip(), "time": ts, "source": source,
                            "update_queue": []})
                self.next_id += 1
        if new:
            vecs = self.embedder.embed([e["memory"] for e in new])
            for e, v in zip(new, vecs):
                e["vector"] = v
            self.entries += new
            self.construct_update_queues()
            yield from self.offline_update(mode, key, seed + 500)
        return {"entries": len(self.entries), "extracted": len(new)}

    def construct_update_queues(self) -> None:
        """``construct_update_queue_all_entries``: nearest not-newer entries, best ``keep_top_n``."""
        cfg = self.config
        if not self.entries:
            return
        vecs = np.stack([e["vector"] for e in self.entries])
        for e in self.entries:
            ok = [i for i, o in enumerate(self.entries) if o["time"] <= e["time"]]
            sims = vecs[ok] @ e["vector"]
            order = np.argsort(-sims, kind="stable")[: cfg.update_top_k]
            cands = [{"id": self.entries[ok[r]]["id"], "score": float(sims[r])} for r in order
                     if self.entries[ok[r]]["id"] != e["id"]]
            cands.sort(key=lambda c: -c["score"])
            e["update_queue"] = cands[: cfg.keep_top_n]

    def update_sources(self, entry: dict) -> list[dict]:
        """Newer entries whose update queue holds ``entry`` with score >= the threshold."""
        thr = self.config.update_score_threshold
        return [o for o in self.entries
                if any(c["id"] == entry["id"] and c["score"] >= thr for c in o["update_queue"])]

    def offline_update(self, mode: str, key: str, seed: int) -> Job:
        """``offline_update_all_entries``: one update call per entry with candidates, all in one batch."""
        cfg = self.config
        jobs = [(e, self.update_sources(e)) for e in self.entries]
        jobs = [(e, s) for e, s in jobs if s]
        if not jobs:
            return
        if mode == "llm":
            answers = yield [Request(messages=({"role": "system", "content": baseline_prompts.render("lightmem_update")},
                                               {"role": "user", "content": update_user_prompt(e["memory"], [c["memory"] for c in s])}),
                                     max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=seed + j,
                                     episode=key or None) for j, (e, s) in enumerate(jobs)]
            decisions = [parse_update(a) for a in answers]
        else:
            decisions = [rule_update(e["memory"], [c["memory"] for c in s]) for e, s in jobs]
        dead = set()
        for (e, _), d in zip(jobs, decisions):
            if d.get("action") == "delete":
                dead.add(e["id"])
                self.actions.append((e["id"], "delete"))
            elif d.get("action") == "update" and d.get("new_memory"):
                nm = d["new_memory"]
                e["memory"] = nm if isinstance(nm, str) else json.dumps(nm)  # the vector stays (as the original)
                self.actions.append((e["id"], "update"))
        self.entries = [e for e in self.entries if e["id"] not in dead]

    def retrieve(self, query: str) -> list[Hit]:
        if not self.entries:
            return []
        q = self.embedder.embed([query])[0]
        sims = np.stack([e["vector"] for e in self.entries]) @ q
        order = np.argsort(-sims, kind="stable")[: self.config.top_k]
        return [Hit(int(self.entries[i]["id"]), self.entries[i]["memory"], float(sims[i]),
                    {"time": self.entries[i]["time"].isoformat()}) for i in order]

    def texts(self) -> list[str]:
        return [e["memory"] for e in self.entries]


__all__ = ["LightMemConfig", "LightMemMemory", "rule_facts", "rule_update"]
