"""Dual-track experience evolution (paper section 3, B.4 to B.6, Prompts 7 to 11).

Textual track (3.1, eq. 4): an :class:`ExperienceBank` whose version is the
hash of its content. One attempt: take the best validated MemGuide, roll out
one sampled evolution question with the current bank, ask the editor (Prompt 7)
for add / modify / remove suggestions in priority order, and try them in that
order; the first candidate bank whose validation score on the whole evolution
pool beats the current bank's is accepted, and the attempt stops.

Procedural track (3.2): a MemGuide tree with provenance edges. Parent
selection is validation-rank Zipf sampling (eq. 5, :func:`zipf_probabilities`);
a rollout with the parent feeds the critic (Prompt 8); when it asks to evolve,
compositional tool reuse (Prompt 9) picks at most 3 existing tools, the
generator (Prompt 10) writes the guide and any missing tools, and the candidate
goes through the admission gate (:class:`ProceduralStore.admit`: static and
sandboxed checks, then a strict sandboxed run of the guide on items of every
evolution example, then the full validation rollout) before it is published
as a child of its parent (eq. 6).

Diversity-guided exploration (3.2.3): guide categories with one
representative each; an exploration step (no rollout) generates a guide meant
to differ from every representative, admits it through the same gate, and the
classifier (Prompt 11) files it under a category or opens a new one. The
scheduler runs an exploration step every ``explore_every``-th procedural step.

Validation records (B.6) are keyed by (bank version, guide id); a record is
admissible only when every validation question was answered and every item's
factual memory was produced. Prophet Arena ranks by mean Brier (lower is better);
the ranking metric is a :class:`ValidationMetric` on the :class:`Runner`
(default :class:`BrierMetric`), so FutureX ranks by accuracy (higher is better;
B.6: "FutureX candidates are ranked by accuracy") through the same loop.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from engine import codec
from engine.config import check
from engine.errors import InputError
from engine.forecast import prompts
from engine.forecast.agent import AgentConfig, ForecastAgent
from engine.forecast.memtools import AdmissionError, Candidate, ProceduralStore
from engine.forecast.subagent import MemoryProcessor, write_item
from engine.forecast.validation_metric import BRIER, ValidationMetric
from engine.llm.base import Request
from engine.llm.structured import FORECAST_CRITIC, FORECAST_EDITOR


# --------------------------------------------------------------------------- Experience Bank

@codec.data
@dataclass(frozen=True)
class ExperienceBank:
    """Ordered ``(experience_id, text)`` entries; identified by the hash of its content (B.6)."""

    entries: tuple[tuple[str, str], ...] = ()

    @property
    def version(self) -> str:
        return hashlib.sha256(json.dumps(self.entries).encode()).hexdigest()[:12]

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def _next_id(self) -> str:
        nums = [int(e[4:]) for e, _ in self.entries if e.startswith("exp_") and e[4:].isdigit()]
        return f"exp_{(max(nums) + 1) if nums else 1}"

    def apply(self, s: dict) -> "ExperienceBank":
        """One editor suggestion -> a new bank. Raises InputError for an unusable suggestion."""
        op = str(s.get("operation", "")).strip().lower()
        target = str(s.get("target_experience_id", "") or "")
        text = str(s.get("new_text", "") or "").strip()
        ids = [e for e, _ in self.entries]
        if op == "add":
            if not text:
                raise InputError("suggestion 'add' needs a non-empty new_text")
            return ExperienceBank(self.entries + ((self._next_id(), text),))
        if op in ("modify", "remove"):
            if target not in ids:
                raise InputError(f"suggestion {op!r} targets unknown experience_id {target!r}; bank has {ids}")
            if op == "remove":
                return ExperienceBank(tuple(e for e in self.entries if e[0] != target))
            if not text:
                raise InputError("suggestion 'modify' needs a non-empty new_text")
            return ExperienceBank(tuple((e, text if e == target else t) for e, t in self.entries))
        raise InputError(f"suggestion operation must be add, modify or remove, got {op!r}")


def _suggestion_lists(text: str) -> list[dict] | None:
    """The editor reply's ``suggestions`` objects, or None when no JSON object carries a list of them."""
    from engine.forecast.toolcalls import _json_objects

    for obj in _json_objects(text):
        if isinstance(obj, dict) and isinstance(obj.get("suggestions"), list):
            return [s for s in obj["suggestions"] if isinstance(s, dict)]
    return None


def parse_suggestions(text: str) -> list[dict]:
    """Editor reply -> suggestions sorted by priority (1 first); unparseable replies give []."""
    return _by_priority(_suggestion_lists(text) or [])


def _by_priority(sug: list[dict]) -> list[dict]:
    return sorted(sug, key=lambda s: (int(s.get("priority", 99)) if str(s.get("priority", "")).lstrip("-").isdigit() else 99))


# --------------------------------------------------------------------------- Zipf parent selection

def zipf_probabilities(scores: Sequence[float], lower_is_better: bool = True) -> np.ndarray:
    """Paper eq. 5: ``p_i = (1/r_i) / sum_j (1/r_j)`` with ``r_i`` the validation rank (1 = best).

    scores f8[N] -> probabilities f8[N] in the input order; ties keep input order.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise InputError(f"scores must be a non-empty 1-D sequence, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise InputError("scores must be finite (only validated nodes are ranked)")
    order = np.argsort(s if lower_is_better else -s, kind="stable")
    ranks = np.empty(s.size, dtype=np.float64)
    ranks[order] = np.arange(1, s.size + 1)
    w = 1.0 / ranks
    return w / w.sum()


@codec.data
@dataclass
class GuideTree:
    """MemGuide nodes with provenance edges (eq. 6) and validation scores."""

    parent: dict = field(default_factory=dict)  # gid -> parent gid | None
    score: dict = field(default_factory=dict)  # gid -> validation score (valid nodes only)
    lower_is_better: bool = True  # Brier: lower; FutureX accuracy: higher

    def add(self, gid: str, parent: str | None, score: float | None) -> None:
        if parent is not None and parent not in self.parent:
            raise InputError(f"parent guide {parent!r} is not in the tree")
        self.parent[gid] = parent
        if score is not None and np.isfinite(score):
            self.score[gid] = float(score)

    @property
    def edges(self) -> list[tuple[str, str]]:
        return [(p, g) for g, p in self.parent.items() if p is not None]

    def valid(self) -> list[str]:
        return list(self.score)

    def sample_parent(self, rng: random.Random) -> str:
        nodes = self.valid()
        if not nodes:
            raise InputError("no validated guide to expand")
        p = zipf_probabilities([self.score[g] for g in nodes], self.lower_is_better)
        return nodes[int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right").clip(0, len(nodes) - 1))]

    def best(self) -> str:
        sign = 1.0 if self.lower_is_better else -1.0
        return min(self.score, key=lambda g: (sign * self.score[g], g))


# --------------------------------------------------------------------------- validation

@dataclass(frozen=True)
class EvolutionConfig:
    """``[forecast.evolution]``."""

    iterations: int = 60  # paper C.3: 60
    explore_every: int = 2  # every k-th procedural step is diversity-guided exploration (0 = never; Table 5 ablation)
    max_suggestions: int = 3
    max_reuse: int = 3  # tools the generator may reuse (0 = no reuse, Table S11)
    textual: bool = True  # the Experience Bank track (Table 3/4 ablation: false)
    procedural: bool = True  # the MemGuide/MemTool track (Table 3/4 ablation: false)
    share_across_categories: bool = False  # C.3 evolves each category from the seed guide; true: one shared store
    top_k: int = 5  # configurations evaluated on held-out questions (C.3)
    items_per_example: int = 2  # sandbox gate: items of each evolution example run strictly
    max_tokens: int = 1024
    seed: int = 0

    def __post_init__(self):
        check(self.iterations >= 0, f"evolution.iterations must be >= 0, got {self.iterations}")
        check(self.explore_every >= 0, f"evolution.explore_every must be >= 0, got {self.explore_every}")
        check(0 <= self.max_reuse <= 3, f"evolution.max_reuse must be in [0, 3], got {self.max_reuse}")
        check(self.top_k >= 1, f"evolution.top_k must be >= 1, got {self.top_k}")
        check(self.items_per_example >= 1, f"evolution.items_per_example must be >= 1, got {self.items_per_example}")


@codec.data
@dataclass
class ValidationRecord:
    bank_version: str
    guide_id: str
    score: float  # the metric over the pool, e.g. mean Brier (nan when inadmissible)
    admissible: bool
    n: int
    failed: int


class Runner:
    """Runs the agent with a given bank and guide (published or staged) on a set of questions."""

    agent_class = ForecastAgent  # a task may run a ForecastAgent subclass (FutureX evidence rows)

    def __init__(self, llm, search, agent_cfg: AgentConfig, workspace: Path, store: ProceduralStore,
                 subagent_mode: str = "llm", subagent_steps: int = 4, limits=None,
                 metric: ValidationMetric | None = None, subagent_tokens: int = 256, subagent_chars: int = 4000):
        self.llm, self.search, self.agent_cfg = llm, search, agent_cfg
        self.metric = metric or BRIER
        self.workspace = Path(workspace)
        self.store = store
        self.subagent_mode, self.subagent_steps = subagent_mode, subagent_steps
        self.subagent_tokens, self.subagent_chars = subagent_tokens, subagent_chars
        self.limits = limits or store.limits
        self._runs = 0

    def processor(self, guide: dict, paths: dict) -> MemoryProcessor:
        specs = {n: (self.store.tools[n].spec if n in self.store.tools else _staged_spec(paths[n])) for n in paths}
        return MemoryProcessor(guide, paths, specs, llm=self.llm, mode=self.subagent_mode,
                               max_steps=self.subagent_steps, limits=self.limits, max_tokens=self.subagent_tokens,
                               max_chars=self.subagent_chars)

    def rollouts(self, questions, guide: dict, paths: dict, bank=()):
        self._runs += 1
        ws = self.workspace / f"run{self._runs:05d}"
        agent = self.agent_class(self.llm, self.search, self.agent_cfg, ws, lambda: self.processor(guide, paths))
        return agent.run(list(questions), tuple(bank))

    def validate(self, questions, guide: dict, paths: dict, bank, gid: str) -> ValidationRecord:
        eps = self.rollouts(questions, guide, paths, bank)
        failed = sum(ep.failed for ep in eps)
        items_ok = all(len(ep.memories) == sum(len(s[2]) for s in ep.searches) for ep in eps)
        ok = failed == 0 and items_ok
        score = self.metric.score(eps) if ok else float("nan")
        return ValidationRecord(getattr(bank, "version", ExperienceBank(tuple(bank)).version), gid, score, ok,
                                len(eps), failed)


def _task_text(task) -> str:
    """Prophet Arena ``Question.text`` or FutureX ``FutureXItem.question``."""
    text = getattr(task, "text", None)
    return text if isinstance(text, str) else str(getattr(task, "question", ""))


def _staged_spec(path: Path) -> dict:
    from engine.forecast.memtools import inspect_tool

    return inspect_tool(Path(path).read_text(encoding="utf-8"))[1]


FATAL_STATUSES = ("timeout", "crashed", "output_limit", "disk_quota")


def strict_item_gate(questions, limits, guide_tool_specs, items=None, processor=None) -> callable:
    """validate(guide, paths) for ProceduralStore.admit: the guide must turn items of every example into memory.

    ``items(task, n) -> list[SearchResult]`` gives each example's items (default: its first ``n`` sources).
    ``processor(guide, paths) -> MemoryProcessor`` runs the guide as evaluation does (the subagent model,
    its mode and step budget: a tool with arguments gets them from the model, so a reader -> model ->
    writer guide can pass, B.4 / Prompt 6); without one the tools run in order with no model (pipeline).
    With a model, a tool call the model got wrong (an ``error`` result it can recover from) is tolerated;
    a sandbox violation (timeout, crash, output or disk limit, a refused output file) or an item without
    ``final_data.txt`` rejects the guide. Without a model every call must succeed.
    """
    items = items or BRIER.gate_items

    def validate(guide: dict, paths: dict) -> None:
        with tempfile.TemporaryDirectory(prefix="gate-") as tmp:
            dirs = []
            for q in questions:
                text = _task_text(q)
                for k, r in enumerate(items(q, max(1, validate.items_per_example)), start=1):
                    dirs.append(write_item(Path(tmp), q.qid, 0, k, r, text, text, "", q.cutoff))
            if processor is not None:
                proc = processor(guide, paths)
            else:
                proc = MemoryProcessor(guide, paths, guide_tool_specs(guide, paths), llm=None, mode="pipeline",
                                       limits=limits)
            with_model = proc.llm is not None and proc.mode == "llm"
            mems = proc.process(dirs)
            for m in mems:
                bad = [c for c in m.calls if c[1] != "ok" and (not with_model or c[1] in FATAL_STATUSES
                                                               or str(c[2]).startswith("refused output"))]
                if bad:
                    raise AdmissionError(f"validation run on {m.item_dir.parent.name}/{m.item_dir.name}: tool "
                                         f"{bad[0][0]} {bad[0][1]}: {bad[0][2]}")
                if not m.ok:
                    raise AdmissionError(f"validation run on {m.item_dir.name}: the guide wrote no final_data.txt")

    validate.items_per_example = 2
    return validate


def parse_generation(text: str) -> Candidate:
    """Generator reply -> Candidate: the first ```json block is the guide, each ```python block a tool."""
    blocks = re.findall(r"```(json|python)\s*\n(.*?)```", text or "", re.S)
    guides = [b for lang, b in blocks if lang == "json"]
    if not guides:
        raise AdmissionError("generator reply holds no ```json MemGuide block")
    try:
        guide = json.loads(guides[0])
    except json.JSONDecodeError as exc:
        raise AdmissionError(f"MemGuide block is not valid JSON: {exc}") from exc
    return Candidate(guide, [b for lang, b in blocks if lang == "python"])


# --------------------------------------------------------------------------- the loop

class Evolution:
    """Alternates procedural and textual steps on one category's evolution pool."""

    def __init__(self, llm, runner: Runner, store: ProceduralStore, evo_questions: Sequence, cfg: EvolutionConfig,
                 bank: ExperienceBank | None = None):
        if not evo_questions:
            raise InputError("evolution needs at least one evolution/validation question, got 0")
        self.llm, self.runner, self.store = llm, runner, store
        self.evo = list(evo_questions)
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.metric: ValidationMetric = getattr(runner, "metric", None) or BRIER
        self.bank = bank or ExperienceBank()
        self.banks: dict[str, ExperienceBank] = {self.bank.version: self.bank}
        self.tree = GuideTree(lower_is_better=self.metric.lower_is_better)
        self.records: dict[tuple[str, str], ValidationRecord] = {}
        self.log: list[dict] = []
        self.categories: dict[str, list[str]] = {}  # representative gid -> member gids
        self._procedural_steps = 0
        for gid in store.guides:  # published guides (seed first); manifest order keeps parents before children
            rec = self.validate(self.bank, gid)
            parent = store.manifest["guides"][gid].get("parent")
            self.tree.add(gid, parent if parent in self.tree.parent else None, rec.score if rec.admissible else None)
            if not self.categories:
                self.categories[gid] = [gid]
        self._wire_gate()

    def _wire_gate(self) -> None:
        self.gate = strict_item_gate(self.evo, self.store.limits, self._specs, self.metric.gate_items,
                                     getattr(self.runner, "processor", None))  # the subagent model, as evaluation runs it
        self.gate.items_per_example = self.cfg.items_per_example

    # --------------------------------------------------------------- state between rounds
    STATE = ("bank", "banks", "tree", "records", "log", "categories", "_procedural_steps")

    def state(self) -> dict:
        """Everything an iteration reads or changes besides the procedural store's files: plain picklable data.

        The round loop (:mod:`engine.forecast.round_methods`) carries it from one iteration to the
        next through the method's snapshot, so an iteration may run on any worker.
        """
        return {**{k: getattr(self, k) for k in self.STATE}, "rng": self.rng.getstate()}

    @classmethod
    def restore(cls, llm, runner: Runner, store: ProceduralStore, evo_questions: Sequence, cfg: EvolutionConfig,
                state: dict) -> "Evolution":
        """The evolution :meth:`state` describes, over ``store`` (no validation rollouts: they were run)."""
        if not evo_questions:
            raise InputError("evolution needs at least one evolution/validation question, got 0")
        self = cls.__new__(cls)
        self.llm, self.runner, self.store = llm, runner, store
        self.evo = list(evo_questions)
        self.cfg = cfg
        self.metric = getattr(runner, "metric", None) or BRIER
        for k in cls.STATE:
            setattr(self, k, state[k])
        self.rng = random.Random()
        self.rng.setstate(state["rng"])
        self._wire_gate()
        return self

    # --------------------------------------------------------------- helpers
    def _specs(self, guide, paths):
        return {n: (self.store.tools[n].spec if n in self.store.tools else _staged_spec(paths[n])) for n in paths}

    def _ask(self, prompt: str, temperature: float = 0.7, constraint=None) -> str:
        r = self.llm.generate([Request(messages=({"role": "user", "content": prompt},), max_tokens=self.cfg.max_tokens,
                                       temperature=temperature, seed=self.rng.randrange(1 << 30),
                                       constraint=constraint)])[0]
        return r.texts[0] if r.completions else ""

    def _paths(self, gid: str) -> dict:
        return self.store.tool_paths(self.store.guides[gid]["tool_names"])

    def validate(self, bank: ExperienceBank, gid: str, guide=None, paths=None) -> ValidationRecord:
        key = (bank.version, gid)
        if key not in self.records:
            self.banks[bank.version] = bank
            self.records[key] = self.runner.validate(self.evo, guide or self.store.guides[gid],
                                                     paths or self._paths(gid), bank, gid)
        return self.records[key]

    def _best_gid(self) -> str:
        return self.tree.best() if self.tree.valid() else next(iter(self.store.guides))

    # --------------------------------------------------------------- textual track
    def textual_step(self) -> dict:
        gid = self._best_gid()
        q = self.rng.choice(self.evo)
        ep = self.runner.rollouts([q], self.store.guides[gid], self._paths(gid), self.bank)[0]
        current = self.validate(self.bank, gid)
        result = self.metric.episode_result(ep)
        guide_ctx = json.dumps({"guide_id": gid, f"validation_{self.metric.name}": current.score,
                                **self.store.guides[gid]})[:3000]
        reply = self._ask(prompts.editor_prompt(list(self.bank), guide_ctx, json.dumps(result)[:3000], ep.summary(),
                                                self.cfg.max_suggestions), constraint=FORECAST_EDITOR)
        entry = {"track": "textual", "guide": gid, "from": self.bank.version, "tried": [], "accepted": None}
        found = _suggestion_lists(reply)
        if found is None:
            entry["unusable"] = "editor"  # counted in the run's evolution summary (an unparseable reply)
        for s in _by_priority(found or [])[: self.cfg.max_suggestions]:
            try:
                cand = self.bank.apply(s)
            except InputError as exc:
                entry["tried"].append({"suggestion": s, "error": str(exc)})
                continue
            rec = self.validate(cand, gid)
            better = rec.admissible and (not current.admissible or self.metric.better(rec.score, current.score))  # eq. 4
            entry["tried"].append({"suggestion": s, "version": cand.version, "score": rec.score, "accepted": better})
            if better:
                self.bank = cand
                entry["accepted"] = cand.version
                break
        self.log.append(entry)
        return entry

    # --------------------------------------------------------------- procedural track
    def _tool_defs(self, names) -> str:
        return "\n".join(json.dumps({"TOOL_NAME": n, "TOOL_SPEC": self.store.tools[n].spec}) for n in names)

    def _admit(self, cand: Candidate, parent: str) -> tuple[str | None, str]:
        staged_record = {}

        def validate(guide, paths):
            self.gate(guide, paths)
            rec = self.runner.validate(self.evo, guide, paths, self.bank, "staged")
            if not rec.admissible:
                raise AdmissionError(f"validation rollouts incomplete ({rec.failed} unanswered or missing memories)")
            staged_record["rec"] = rec

        try:
            gid = self.store.admit(cand, validate, parent=parent)
        except AdmissionError as exc:
            return None, str(exc)
        rec = staged_record["rec"]
        self.records[(self.bank.version, gid)] = ValidationRecord(rec.bank_version, gid, rec.score, True, rec.n, 0)
        self.tree.add(gid, parent, rec.score)
        return gid, ""

    def procedural_step(self) -> dict:
        self._procedural_steps += 1
        if self.cfg.explore_every and self._procedural_steps % self.cfg.explore_every == 0:
            return self.explore_step()
        # with no validated guide yet (a weak model), the current guide is expanded: evolution goes on (C.3)
        parent = self.tree.sample_parent(self.rng) if self.tree.valid() else self._best_gid()
        guide = self.store.guides[parent]
        q = self.rng.choice(self.evo)
        ep = self.runner.rollouts([q], guide, self._paths(parent), self.bank)[0]
        memories = "\n".join(f"[{m.item_dir.name}] {m.text[:500]}" for m in ep.memories[:4])
        rollout = f"{self.metric.rollout_text(ep)}\nProcessed memories:\n{memories}"[:6000]
        sources = "\n\n".join(self.store.tools[n].source for n in guide["tool_names"])[:12000]
        entry = {"track": "procedural", "kind": "rollout", "parent": parent, "question": q.qid}
        from engine.forecast.toolcalls import _json_objects

        critic = next((o for o in _json_objects(self._ask(prompts.critic_prompt(guide, sources, rollout), 0.3,
                                                               constraint=FORECAST_CRITIC))
                       if isinstance(o, dict) and "should_evolve" in o), None)
        if critic is None:
            entry["unusable"] = "critic"
        if not critic or not critic.get("should_evolve") or not str(critic.get("design_requirement", "")).strip():
            entry["result"] = "critic: no evolution"
            self.log.append(entry)
            return entry
        req = str(critic["design_requirement"])
        sel = next((o for o in _json_objects(self._ask(prompts.reuse_prompt(req, self._tool_defs(sorted(self.store.tools))), 0.3))
                    if isinstance(o, dict) and "candidate_tool_names" in o), {}) if self.cfg.max_reuse else {}
        reuse = [n for n in (sel.get("candidate_tool_names") or []) if n in self.store.tools][: self.cfg.max_reuse] \
            if self.cfg.max_reuse else []
        reuse_src = "\n\n".join(self.store.tools[n].source for n in reuse)
        reply = self._ask(prompts.generator_prompt(req, self._tool_defs(reuse), reuse_src))
        entry.update(requirement=req, reuse=reuse)
        self._admit_reply(reply, parent, entry)
        self.log.append(entry)
        return entry

    def _admit_reply(self, reply: str, parent: str, entry: dict) -> str | None:
        """Admit the MemGuide a generator ``reply`` holds under ``parent``: its id, or None; ``entry["result"]``
        says which (and why it was rejected)."""
        try:
            gid, why = self._admit(parse_generation(reply), parent)
        except AdmissionError as exc:  # no parsable MemGuide in the reply
            gid, why = None, str(exc)
        entry["result"] = f"admitted {gid}" if gid else f"rejected: {why}"
        return gid

    def _representatives(self) -> str:
        out = []
        for rep in self.categories:
            g = self.store.guides[rep]
            out.append(json.dumps({"guide_file": f"{rep}.json", **g,
                                   "tools": [{"TOOL_NAME": n, "TOOL_SPEC": self.store.tools[n].spec} for n in g["tool_names"]]}))
        return "\n".join(out)

    def explore_step(self) -> dict:
        """Diversity-guided exploration: generate against the category representatives, admit, classify."""
        if not self.categories:
            self.categories = {g: [g] for g in self.tree.valid()[:1]}
        entry = {"track": "procedural", "kind": "explore"}
        reply = self._ask(prompts.explore_prompt(self._representatives()))
        gid = self._admit_reply(reply, self._best_gid(), entry)
        if gid is None:
            self.log.append(entry)
            return entry
        from engine.forecast.toolcalls import _json_objects

        g = self.store.guides[gid]
        new = json.dumps({"guide_file": f"{gid}.json", **g,
                          "tools": [{"TOOL_NAME": n, "TOOL_SPEC": self.store.tools[n].spec} for n in g["tool_names"]]})
        cls = next((o for o in _json_objects(self._ask(prompts.classifier_prompt(self._representatives(), new), 0.2))
                    if isinstance(o, dict) and "matched_representative_guide_file" in o), {})
        match = str(cls.get("matched_representative_guide_file") or "").removesuffix(".json")
        if match in self.categories:
            self.categories[match].append(gid)
        else:
            self.categories[gid] = [gid]
        entry["category"] = match if match in self.categories and match != gid else "new"
        self.log.append(entry)
        return entry

    # --------------------------------------------------------------- schedule
    def run(self, iterations: int | None = None) -> list[dict]:
        """Alternate tracks (C.3): procedural on even iterations, textual on odd ones; a track switched off
        (``evolution.textual`` / ``procedural``) leaves its iterations to the other one.

        An iteration that admits nothing keeps the current guide and bank and is logged as rejected, with
        the reason; an error in one iteration (a model reply the engine cannot use) does the same, so a
        weak model never stops the run. Every entry carries its ``iteration``.
        """
        n = self.cfg.iterations if iterations is None else iterations
        for i in range(n):
            self.iteration(i)
        return self.log

    def iteration(self, i: int) -> list[dict]:
        """Iteration ``i`` of :meth:`run` (one round of the evolution stream); returns its log entries."""
        tracks = [t for t, on in (("procedural", self.cfg.procedural), ("textual", self.cfg.textual)) if on]
        if not tracks:
            return []
        track = tracks[i % len(tracks)]
        before = len(self.log)
        try:
            (self.procedural_step if track == "procedural" else self.textual_step)()
        except (InputError, AdmissionError) as exc:
            self.log.append({"track": track, "result": f"rejected: {exc}", "error": True})
        for entry in self.log[before:]:
            entry["iteration"] = i
            entry.setdefault("outcome", "accepted" if (entry.get("accepted") or
                                                       str(entry.get("result", "")).startswith("admitted"))
                             else "rejected")
        return self.log[before:]

    def top_configurations(self, k: int | None = None) -> list[tuple[ExperienceBank, str, float]]:
        """The best admissible (bank, guide) validation records, best first."""
        recs = sorted((r for r in self.records.values() if r.admissible and r.guide_id in self.store.guides),
                      key=lambda r: (self.metric.sort_key(r.score), r.guide_id, r.bank_version))
        return [(self.banks[r.bank_version], r.guide_id, r.score) for r in recs[: (k or self.cfg.top_k)]]
