"""The day-by-day Pipe+ToE before the round loop, kept only as the benchmark's reference.

A verbatim copy (imports joined) of ``engine/finance/tree.py`` (ExperienceTree),
``engine/finance/ledger.py`` (PendingFeedback), the ``FinanceMethod`` base of
``engine/finance/methods.py`` and ``engine/finance/toe.py`` (PipeToE.step) at
commit 15eab27, the last one with its own tree. benchmarks/test_finance_step.py
times it against the round-loop method on the compiled store in the same run.
Nothing outside benchmarks/ imports it.
"""
# ruff: noqa
from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import InputError, PersistenceError, StoreError
from engine.finance import prompts as P
from engine.finance.config import ToEConfig
from engine.finance.methods import StreamContext
from engine.llm.base import LLMBackend, Request
from kernels import reliability as K
_LUT = K.inv_log_lut(4096)


def text_key(parent: int, text: str) -> int:
    """64-bit key of ``text`` under node ``parent`` (normalised: case and spaces)."""
    norm = " ".join(text.lower().split())
    h = hashlib.blake2b(f"{parent}\x00{norm}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def _width(h: int) -> int:
    return 8 * ((h + 2 + 7) // 8)


class ExperienceTree:
    """Industry > factor > direction tree with experience rows for the directions."""

    def __init__(self, horizons: Sequence[int] = (10, 20, 40), q0: float = 1.0,
                 q_min: float = 0.0, q_max: float = 2.0, eta: float = 10.0):
        if not 0 <= q_min <= q0 <= q_max:
            raise InputError(f"need 0 <= q_min <= q0 <= q_max, got {q_min}, {q0}, {q_max}")
        self.horizons = tuple(int(h) for h in horizons)
        self.H = len(self.horizons)
        self.q0, self.q_min, self.q_max, self.eta = float(q0), float(q_min), float(q_max), float(eta)
        # nodes (node 0 is the root)
        self.parent = np.full(1, -1, dtype=np.int64)
        self.depth = np.zeros(1, dtype=np.int64)
        self.key = np.zeros(1, dtype=np.uint64)
        self.text: list[str] = ["root"]
        self._child: dict[tuple[int, int], int] = {}
        self._children: dict[int, list[int]] = {0: []}
        # experiences (one per direction leaf)
        self.block = np.zeros((0, _width(self.H)), dtype=np.float64)
        self.leaf = np.zeros(0, dtype=np.int64)
        self.created = np.zeros(0, dtype=np.int64)
        self.active = np.zeros(0, dtype=bool)
        self.merged_into = np.zeros(0, dtype=np.int64)
        self.node_eid: dict[int, int] = {}

    # ------------------------------------------------------------------ sizes
    @property
    def n_nodes(self) -> int:
        return int(self.parent.shape[0])

    @property
    def n_experiences(self) -> int:
        return int(self.leaf.shape[0])

    @property
    def n_active(self) -> int:
        return int(self.active.sum())

    @property
    def q(self) -> np.ndarray:
        """``Q f8[n, H]`` (a view)."""
        return self.block[:, : self.H]

    @property
    def hit(self) -> np.ndarray:
        return self.block[:, self.H]

    @property
    def recall(self) -> np.ndarray:
        return self.block[:, self.H + 1]

    # ------------------------------------------------------------------ nodes
    def _node(self, parent: int, text: str) -> int:
        text = " ".join(str(text).split())
        if not text:
            raise InputError(f"node text under node {parent} must be non-empty")
        k = text_key(parent, text)
        nid = self._child.get((parent, k))
        if nid is not None:
            return nid
        nid = self.n_nodes
        self.parent = np.append(self.parent, parent)
        self.depth = np.append(self.depth, self.depth[parent] + 1)
        self.key = np.append(self.key, np.uint64(k))
        self.text.append(text)
        self._child[(parent, k)] = nid
        self._children.setdefault(parent, []).append(nid)
        self._children[nid] = []
        return nid

    def find(self, parent: int, text: str) -> int | None:
        return self._child.get((parent, text_key(parent, " ".join(str(text).split()))))

    def prefix(self, industry: str, factor: str) -> int:
        """Node id of the (industry, factor) prefix, created when missing."""
        return self._node(self._node(0, industry), factor)

    def children(self, node: int) -> list[int]:
        return list(self._children.get(node, []))

    def factors(self, industry: str) -> list[str]:
        nid = self.find(0, industry)
        return [] if nid is None else [self.text[c] for c in self._children[nid]]

    def directions(self, factor_node: int) -> np.ndarray:
        """Active experience ids ``i8[k]`` under a factor node, in creation order."""
        eids = [self.node_eid[c] for c in self._children.get(factor_node, []) if c in self.node_eid]
        eids = [e for e in eids if self.active[e]]
        return np.asarray(eids, dtype=np.int64)

    def path(self, eid: int) -> tuple[str, str, str]:
        n = int(self.leaf[eid])
        f = int(self.parent[n])
        return self.text[int(self.parent[f])], self.text[f], self.text[n]

    # ------------------------------------------------------------------ experiences
    def add(self, factor_node: int, direction: str, day: int) -> tuple[int, bool]:
        """Add a direction under ``factor_node``; returns ``(eid, created)`` (an equal text reuses its eid)."""
        if self.depth[factor_node] != 2:
            raise StoreError(f"factor_node must be a depth-2 node, got node {factor_node} at depth {self.depth[factor_node]}")
        leaf = self._node(factor_node, direction)
        if leaf in self.node_eid:
            eid = self.resolve(self.node_eid[leaf])
            return eid, False
        eid = self.n_experiences
        row = np.zeros((1, self.block.shape[1]))
        row[0, : self.H] = self.q0  # ToE: a new path gets the neutral prior q0
        self.block = np.ascontiguousarray(np.vstack([self.block, row]))
        self.leaf = np.append(self.leaf, leaf)
        self.created = np.append(self.created, int(day))
        self.active = np.append(self.active, True)
        self.merged_into = np.append(self.merged_into, -1)
        self.node_eid[leaf] = eid
        return eid, True

    def resolve(self, eid: int) -> int:
        """The active experience that ``eid`` was merged into (itself when active)."""
        e = int(eid)
        if not 0 <= e < self.n_experiences:
            raise StoreError(f"unknown eid {e}; the tree has {self.n_experiences} experiences")
        while self.merged_into[e] >= 0:
            e = int(self.merged_into[e])
        return e

    def _check_eids(self, eids) -> np.ndarray:
        eids = np.asarray(eids, dtype=np.int64).reshape(-1)
        if eids.size and (eids.min() < 0 or eids.max() >= self.n_experiences):
            raise StoreError(f"eids out of range [0, {self.n_experiences}): {eids[(eids < 0) | (eids >= self.n_experiences)][:5].tolist()}")
        return eids

    def count_recall(self, eids) -> None:
        """Recall: retrieved as a candidate (Table A1)."""
        eids = self._check_eids(eids)
        K.add_counts(self.block, eids, self.H + 1, np.ones(eids.size))

    def count_hit(self, eids) -> None:
        """Hit: selected for one news item (incremented once per news item, ToE appendix)."""
        eids = self._check_eids(eids)
        K.add_counts(self.block, eids, self.H, np.ones(eids.size))

    def formula_update(self, eids, hcols, rewards) -> None:
        """ToE eq. (A6) per (eid, horizon) in batch order; ``rewards f8[b]`` must be finite."""
        eids = self._check_eids(eids)
        hcols = np.asarray(hcols, dtype=np.int64).reshape(-1)
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        self._check_batch(eids, hcols, rewards)
        K.formula_update_h(self.block, eids, hcols, rewards, self.H, self.eta, self.q0, self.q_min, self.q_max, _LUT)

    def delta_update(self, eids, hcols, deltas) -> None:
        """LLM-based updater, ToE eq. (10): ``Q <- clip(Q + delta)`` per (eid, horizon), in batch order."""
        eids = self._check_eids(eids)
        hcols = np.asarray(hcols, dtype=np.int64).reshape(-1)
        deltas = np.asarray(deltas, dtype=np.float64).reshape(-1)
        self._check_batch(eids, hcols, deltas)
        K.delta_update_h(self.block, eids, hcols, deltas, self.q_min, self.q_max)

    def _check_batch(self, eids, hcols, values) -> None:
        if not (eids.shape == hcols.shape == values.shape):
            raise InputError(f"eids, hcols and values must have one shape, got {eids.shape}, {hcols.shape}, {values.shape}")
        if hcols.size and (hcols.min() < 0 or hcols.max() >= self.H):
            raise InputError(f"horizon columns must be in [0, {self.H}), got {hcols.tolist()[:5]}")
        if not np.all(np.isfinite(values)):
            raise InputError("rewards must be finite; got NaN or inf")

    def merge(self, keep: int, drop: int) -> None:
        """Fold experience ``drop`` into ``keep`` (siblings under one factor)."""
        keep, drop = self.resolve(keep), self.resolve(drop)
        if keep == drop:
            raise StoreError(f"cannot merge experience {keep} into itself")
        if self.parent[self.leaf[keep]] != self.parent[self.leaf[drop]]:
            raise StoreError(f"experiences {keep} and {drop} are not siblings under one factor")
        hk, hd = self.hit[keep], self.hit[drop]
        wk, wd = (hk, hd) if hk + hd > 0 else (1.0, 1.0)
        q = (wk * self.q[keep] + wd * self.q[drop]) / (wk + wd)
        self.block[keep, : self.H] = q
        self.block[keep, self.H] += hd
        self.block[keep, self.H + 1] += self.recall[drop]
        self.block[drop, : self.H + 2] = 0.0
        self.active[drop] = False
        self.merged_into[drop] = keep

    # ------------------------------------------------------------------ persistence
    def rows(self) -> dict[str, list]:
        """Path-table columns for the active experiences."""
        eids = np.flatnonzero(self.active)
        paths = [self.path(int(e)) for e in eids]
        out = {"industry": [p[0] for p in paths], "factor": [p[1] for p in paths],
               "analysis_direction": [p[2] for p in paths]}
        for k, h in enumerate(self.horizons):
            out[f"q_h{h}"] = self.q[eids, k].tolist()
        out["recall"] = self.recall[eids].astype(np.int64).tolist()
        out["hit"] = self.hit[eids].astype(np.int64).tolist()
        out["eid"] = eids.tolist()
        out["created"] = self.created[eids].tolist()
        return out

    def save_csv(self, path: str | Path) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        pacsv.write_csv(pa.table(self.rows()), tmp)
        tmp.replace(path)  # atomic: a crash leaves the previous file

    @classmethod
    def load_csv(cls, path: str | Path, q0: float = 1.0, q_min: float = 0.0, q_max: float = 2.0,
                 eta: float = 10.0) -> "ExperienceTree":
        import pyarrow.csv as pacsv

        path = Path(path)
        if not path.is_file():
            raise PersistenceError(f"tree file {str(path)!r} does not exist")
        try:
            table = pacsv.read_csv(path)
        except Exception as exc:
            raise PersistenceError(f"cannot read tree file {str(path)!r}: {exc}") from exc
        cols = table.column_names
        hcols = [c for c in cols if c.startswith("q_h")]
        need = ["industry", "factor", "analysis_direction", "recall", "hit"]
        missing = [c for c in need if c not in cols]
        if missing or not hcols:
            raise PersistenceError(
                f"tree file {str(path)!r} lacks column(s) {missing or ['q_h<horizon>']}; got {cols}")
        horizons = [int(c[3:]) for c in hcols]
        tree = cls(horizons, q0, q_min, q_max, eta)
        d = {c: table.column(c).to_pylist() for c in cols}
        created = d.get("created", [0] * table.num_rows)
        for r in range(table.num_rows):
            fnode = tree.prefix(str(d["industry"][r]), str(d["factor"][r]))
            eid, _ = tree.add(fnode, str(d["analysis_direction"][r]), int(created[r] or 0))
            tree.block[eid, : tree.H] = [float(d[c][r]) for c in hcols]
            tree.block[eid, tree.H] = float(d["hit"][r])
            tree.block[eid, tree.H + 1] = float(d["recall"][r])
        return tree
@dataclass(frozen=True)
class Entry:
    entry_id: int
    industry: int
    day: int  # prediction day t (index into the market's days)
    hcol: int  # horizon column
    horizon: int
    due: int  # t + h: first day on which alpha[industry, t, h] is known
    sentiment: float  # a_t
    eids: tuple[int, ...]  # experiences (or memory ids) used for this prediction


class PendingFeedback:
    """Pending per-horizon feedback; each entry resolves exactly once."""

    def __init__(self):
        self._entries: list[Entry] = []
        self._next = 0
        self.resolved = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, industry: int, day: int, hcol: int, horizon: int, sentiment: float, eids) -> Entry:
        if horizon < 1:
            raise InputError(f"horizon must be >= 1, got {horizon}")
        if not np.isfinite(sentiment):
            raise InputError(f"sentiment must be finite, got {sentiment}")
        e = Entry(self._next, int(industry), int(day), int(hcol), int(horizon), int(day) + int(horizon),
                  float(sentiment), tuple(int(x) for x in eids))
        self._next += 1
        self._entries.append(e)
        return e

    def peek(self, today: int) -> list[Entry]:
        """The entries :meth:`due` would return, without removing them (compute first, then commit)."""
        return [e for e in self._entries if e.due <= today]

    def due(self, today: int) -> list[Entry]:
        """Remove and return the entries with ``due <= today`` (their returns are known), oldest first."""
        ready = [e for e in self._entries if e.due <= today]
        if ready:
            self._entries = [e for e in self._entries if e.due > today]
            self.resolved += len(ready)
        return ready


def feedback(entry: Entry, alpha: np.ndarray) -> float:
    """``r_env = a_t * o_{t+h}`` (ToE eq. (7) for FinEvolveBench); ``alpha f8[N, T, H]``."""
    o = float(alpha[entry.industry, entry.day, entry.hcol])
    if not np.isfinite(o):
        raise InputError(
            f"return of industry {entry.industry} on day {entry.day} at horizon {entry.horizon} is not known yet"
        )
    return entry.sentiment * o
class FinanceMethod:
    """Base: ``step(day, llm) -> f8[N, H]``; ``stats`` counts prompts and parse failures."""

    name = "method"

    def __init__(self, ctx: StreamContext):
        self.ctx = ctx
        self.stats: dict[str, int] = defaultdict(int)

    def step(self, day: int, llm: LLMBackend) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _generate(self, llm: LLMBackend, requests: list[Request], stage: str) -> list[list[str]]:
        if not requests:
            return []
        self.stats[f"prompts_{stage}"] += len(requests)
        return [r.texts for r in llm.generate(requests)]

    def _predict(self, day: int, llm: LLMBackend, industries: list[int], extra) -> tuple[np.ndarray, list]:
        """Shared prediction stage: one PREDICT prompt per industry, one batch. ``extra(i)`` -> (experiences, memories)."""
        ctx = self.ctx
        out = np.full((ctx.market.n_industries, len(ctx.horizons)), np.nan)
        reqs, parsed = [], []
        for i in industries:
            exps, mems = extra(i)
            prompt = P.predict_prompt(ctx.market.industries[i], ctx.date(day), ctx.horizons,
                                      ctx.news_lines(ctx.retained(i, day)), exps, mems)
            reqs.append(ctx.request(prompt, f"{self.name}:{day}:{i}"))
        for i, texts in zip(industries, self._generate(llm, reqs, "predict")):
            pred = P.parse_prediction(texts[0] if texts else "", ctx.horizons)
            if pred is None:
                self.stats["parse_failures"] += 1
                out[i] = 0.0
            else:
                out[i] = pred.sentiment
            parsed.append(pred)
        return out, parsed


class PipeToE(FinanceMethod):
    name = "Pipe+ToE"

    def __init__(self, ctx: StreamContext, cfg: ToEConfig, update: str = "formula", n_channels: int = 0):
        super().__init__(ctx)
        if update not in ("formula", "llm"):
            raise ValueError(f"update must be 'formula' or 'llm', got {update!r}")
        self.cfg = cfg
        self.update = update
        if update == "llm":
            self.name = "Pipe+ToE (LLM update)"
        self.tree = ExperienceTree(ctx.horizons, cfg.q0, cfg.q_min, cfg.q_max, cfg.eta)
        self.ledger = PendingFeedback()
        self.route: dict[tuple[int, int], str] = {}
        self.applied_updates = 0
        # ground-truth attribution (synthetic data): hits per (experience, news channel)
        self.n_channels = int(n_channels)
        self.channel_hits = np.zeros((0, max(1, self.n_channels)), dtype=np.int64)

    # ------------------------------------------------------------------ stages
    def _apply_feedback(self, day, llm) -> None:
        # a failed update (bad reward, backend error) must change nothing: peek, apply, then pop
        entries = [e for e in self.ledger.peek(day) if e.eids]
        if not entries:
            self.ledger.due(day)
            return
        alpha = self.ctx.market.alpha
        tree = self.tree
        if self.update == "formula":
            eids, hcols, rewards = [], [], []
            for e in entries:
                r = feedback(e, alpha)
                for eid in dict.fromkeys(tree.resolve(x) for x in e.eids):
                    eids.append(eid)
                    hcols.append(e.hcol)
                    rewards.append(r)
            tree.formula_update(eids, hcols, rewards)  # ToE eq. (A6), entry order
            self.applied_updates += len(eids)
            self.ledger.due(day)
            return
        reqs, shown = [], []
        for e in entries:
            r = feedback(e, alpha)
            used = list(dict.fromkeys(tree.resolve(x) for x in e.eids))
            exps = [(eid, tree.path(eid), float(tree.q[eid, e.hcol])) for eid in used]
            prompt = P.update_prompt(self.ctx.market.industries[e.industry], self.ctx.date(e.day), e.horizon,
                                     e.sentiment, float(alpha[e.industry, e.day, e.hcol]), r, exps)
            reqs.append(self.ctx.request(prompt, f"{self.name}:update:{e.entry_id}"))
            shown.append((e, exps))
        eids, hcols, deltas = [], [], []
        for (e, exps), texts in zip(shown, self._generate(llm, reqs, "update")):
            new = P.parse_update(texts[0] if texts else "", [x[0] for x in exps], self.cfg.q_min, self.cfg.q_max)
            if new is None:
                self.stats["parse_failures"] += 1
                continue
            for eid, _, q in exps:
                if eid in new:
                    eids.append(eid)
                    hcols.append(e.hcol)
                    deltas.append(new[eid] - q)  # eq. (10) as a delta on the value the LLM saw
        self.tree.delta_update(eids, hcols, deltas)
        self.applied_updates += len(eids)
        self.ledger.due(day)

    def _route(self, day, llm, pairs) -> None:
        ctx = self.ctx
        nw = ctx.market.news
        todo = [(k, i) for k, i in pairs if (k, i) not in self.route]
        reqs = []
        for k, i in todo:
            name = ctx.market.industries[i]
            factors = list(dict.fromkeys(list(self.cfg.factors) + self.tree.factors(name)))
            reqs.append(ctx.request(P.route_prompt(name, factors, nw.title[k], nw.content[k]), f"{self.name}:route:{k}"))
        for key, texts in zip(todo, self._generate(llm, reqs, "route")):
            f = P.parse_route(texts[0] if texts else "")
            if f is None:
                self.stats["parse_failures"] += 1
                f = self.cfg.factors[0]
            self.route[key] = f

    def _candidates(self, fnode: int, news_vec: np.ndarray) -> np.ndarray:
        eids = self.tree.directions(fnode)
        if eids.size > self.cfg.k1:
            vecs = self.ctx.embedder.embed([self.tree.text[int(self.tree.leaf[e])] for e in eids])
            sims = vecs @ news_vec
            order = np.lexsort((np.arange(eids.size), -sims))[: self.cfg.k1]
            eids = eids[np.sort(order)]
        return eids

    def _merge_new(self, day, llm, new_eids: list[int]) -> None:
        """Near-duplicate siblings of new experiences (cosine >= lam) go to the LLM merger; one batch."""
        tree = self.tree
        reqs, pairs = [], []
        for eid in new_eids:
            fnode = int(tree.parent[tree.leaf[eid]])
            sibs = [s for s in tree.directions(fnode).tolist() if s < eid]  # older siblings
            if not sibs:
                continue
            texts = [tree.text[int(tree.leaf[s])] for s in sibs]
            vecs = self.ctx.embedder.embed(texts + [tree.text[int(tree.leaf[eid])]])
            sims = vecs[:-1] @ vecs[-1]
            best = int(np.argmax(sims))
            if sims[best] < self.cfg.lam:
                continue
            ind, fac, _ = tree.path(eid)
            reqs.append(self.ctx.request(P.merge_prompt(ind, fac, texts[best], tree.text[int(tree.leaf[eid])]),
                                         f"{self.name}:merge:{eid}"))
            pairs.append((sibs[best], eid))
        for (keep, drop), texts in zip(pairs, self._generate(llm, reqs, "merge")):
            ans = P.parse_merge(texts[0] if texts else "")
            if ans is None:
                self.stats["parse_failures"] += 1
                continue
            if ans[0] and tree.resolve(keep) != tree.resolve(drop):
                k, d = tree.resolve(keep), tree.resolve(drop)
                tree.merge(k, d)
                self.channel_hits[k] += self.channel_hits[d]
                self.channel_hits[d] = 0
                self.stats["merges"] += 1

    def _grow_channel_hits(self) -> None:
        n = self.tree.n_experiences
        if self.channel_hits.shape[0] < n:
            pad = np.zeros((n - self.channel_hits.shape[0], self.channel_hits.shape[1]), dtype=np.int64)
            self.channel_hits = np.vstack([self.channel_hits, pad])

    # ------------------------------------------------------------------ step
    def step(self, day, llm):
        ctx = self.ctx
        nw = ctx.market.news
        tree = self.tree
        self._apply_feedback(day, llm)
        industries = ctx.industries_with_news(day)
        pairs = [(k, i) for i in industries for k in ctx.retained(i, day)]
        self._route(day, llm, pairs)

        # retrieval + rerank/propose: one RERANK prompt per (news, industry)
        news_vecs = ctx.embedder.embed([ctx.news_text(k) for k, _ in pairs]) if pairs else None
        reqs, meta = [], []
        for j, (k, i) in enumerate(pairs):
            name = ctx.market.industries[i]
            factor = self.route[(k, i)]
            fnode = tree.prefix(name, factor)
            cands = self._candidates(fnode, news_vecs[j])
            tree.count_recall(cands)
            listed = [(int(e), tree.text[int(tree.leaf[e])]) for e in cands]
            reqs.append(ctx.request(P.rerank_prompt(name, factor, nw.title[k], nw.content[k], listed),
                                    f"{self.name}:rerank:{day}:{k}"))
            meta.append((k, i, fnode, cands))
        selected: list[list[int]] = []
        new_eids: list[int] = []
        for (k, i, fnode, cands), texts in zip(meta, self._generate(llm, reqs, "rerank")):
            ans = P.parse_rerank(texts[0] if texts else "", cands.tolist())
            if ans is None:
                self.stats["parse_failures"] += 1
                selected.append([])
                continue
            sel, new = ans
            if not sel and new:  # the proposer: at most one new direction, only when none fits
                eid, created = tree.add(fnode, new, day)
                self.stats["proposals"] += 1
                if created:
                    new_eids.append(eid)
                tree.count_recall([eid])  # a proposed path is a candidate too: hit never exceeds recall
                sel = [eid]
            selected.append(sel)
        self._grow_channel_hits()
        if self.cfg.merge and new_eids:
            self._merge_new(day, llm, new_eids)

        # hits: once per news item that selects the experience
        per_ind: dict[int, list[P.ExperienceLine]] = defaultdict(list)
        used: dict[int, list[int]] = defaultdict(list)
        for (k, i, _, _), sel in zip(meta, selected):
            sel = list(dict.fromkeys(tree.resolve(e) for e in sel))
            if not sel:
                continue
            tree.count_hit(sel)
            if self.n_channels and nw.channel[k] >= 0:
                self.channel_hits[sel, nw.channel[k]] += 1
            pos = ctx.retained(i, day).index(k) + 1
            for e in sel:
                per_ind[i].append(P.ExperienceLine(pos, tree.path(e), tuple(float(x) for x in tree.q[e])))
                used[i].append(e)

        out, _ = self._predict(day, llm, industries, lambda i: (tuple(per_ind[i]), ()))
        for i in industries:
            eids = tuple(dict.fromkeys(used[i]))
            for hc, h in enumerate(ctx.horizons):
                self.ledger.add(i, day, hc, h, float(out[i, hc]), eids)
        return out
