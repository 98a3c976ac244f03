"""Pipe+ToE on the news stream, on the compiled store and the round loop (ToE eqs. (2)-(10)).

The experience tree is an :class:`engine.store.ExperienceStore` (levels
industry > factor > analysis direction, node keys scoped by parent over
normalised text: :func:`engine.store.normalized_key`); delayed feedback is its
:class:`~engine.store.FeedbackLedger`. One round is one trading day; episode
``(day, industry)`` reads the frozen snapshot and sends, as one batched
``llm.generate`` per stage:

1. **LLM update** (the Table 3 ablation, eq. (10)): one UPDATE prompt per
   (prediction, horizon) of this industry whose return became known today;
   its answer is a delta on the value the prompt showed. The episode applies
   the deltas to its own copy of the rows it reads (an industry's experiences
   belong to that industry only), and the barrier applies the same deltas to
   the store through ``store.resolve(..., rule="delta")``: the day's
   predictions see the updated reliabilities, as in a day-by-day run;
2. **routing** (decoupled execution): each (news, industry) pair is routed to
   a factor once; the factor's node is kept (``route[k, i]``); a newly routed
   factor within ``merge_threshold`` (cosine) of a known factor of the industry
   goes to the factor merger, and on a merge the news takes the known node;
3. **retrieval** (appendix "Hyperparameters"): under the (industry, factor)
   prefix, the first level keeps the ``k1`` directions most similar to the news
   by embedding, the leaf level those with cosine >= ``lam``; each counts a recall;
4. **rerank / propose**: the LLM selects the applicable directions or, when
   none fits, proposes at most one new direction (eqs. (3)-(5));
5. **merge** ("Maintenance"): a new direction whose cosine with an older
   sibling (in the snapshot or proposed earlier by this episode) is at least
   ``merge_threshold`` goes to the LLM merger with its most similar sibling; on
   a merge both fold into the direction of the text the merger writes (hit-
   weighted reliability), which the episode uses for its own prediction; the
   barrier applies the same with ``store.merge``;
6. **hits**: each news item counts one hit on every experience it selected;
7. **prediction** (eq. (6)): the shared prompt plus the selected paths with
   their per-horizon reliabilities; one ledger entry per (used experience,
   horizon), ``store.defer`` with ``r = a_t * o_{t+h}`` due on day ``t + h``.

Pre-test span: the first ``n_pretest`` days are walked like the others (they
are not scored); at the barrier of the last one the initial hierarchy is
induced from the collected paths (:meth:`PipeToE._induce_hierarchy`,
``toe.init = "cluster"``), unless the tree came from a path CSV
(``toe.init_tree``).

At the barrier the updates apply in episode order (new factor nodes, recall
counts, new directions, merges, hits, ledger entries); then, with the formula
rule (eq. (A6)), ``store.resolve`` applies every entry due by the next day's
predictions, exactly once. New structure is written at the barrier, so an
episode does not see directions another episode proposed the same day; the
directions of one (industry, day) are all proposed by one episode, which sees
its own.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.finance import prompts as P
from engine.finance.config import ToEConfig
from engine.finance.methods import FinanceMethod, StreamContext, stats_for
from engine.finance.toe_index import prefix_index, prefix_index_writers, prefix_top, restore_prefix_index
from engine.llm import structured as S
from engine.rounds import EpisodeResult
from engine.errors import StoreError
from engine.store import PENDING, ExperienceStore, normalized_key


_NONE = np.zeros(0, np.int64)  # shared empty update columns (never written to)
_NONE.flags.writeable = False
_NO_TEXT = np.zeros(0, dtype="U1")
_NO_TEXT.flags.writeable = False


def _collapse(text: str) -> str:
    return " ".join(str(text).split())


def leader_clusters(vecs: np.ndarray, weights: np.ndarray, threshold: float) -> list[tuple[int, list[int]]]:
    """Leader clustering of unit vectors ``f4/f8[n, d]``: in order of ``weights f8[n]`` (largest first,
    ties by index) each item joins the most similar leader at cosine >= ``threshold``, else leads a new
    cluster. Returns ``(leader, members)`` pairs (members include the leader, in visit order)."""
    n = int(np.asarray(weights).shape[0])
    order = np.lexsort((np.arange(n), -np.asarray(weights, np.float64)))
    leaders: list[int] = []
    groups: list[list[int]] = []
    for idx in order.tolist():
        if leaders:
            sims = np.asarray(vecs)[leaders] @ np.asarray(vecs)[idx]
            b = int(np.argmax(sims))
            if sims[b] >= threshold:
                groups[b].append(idx)
                continue
        leaders.append(idx)
        groups.append([idx])
    return list(zip(leaders, groups))


# an episode's updates with nothing in them (read-only, shared)
_EMPTY_UPDATES = {"fb_entries": _NONE, "fb_deltas": np.zeros(0),
                  **{k: _NONE for k in ("route_news", "recall", "proposal_recall", "merge_keep", "merge_drop",
                                        "merge_into", "hit", "hit_channel", "used")},
                  **{k: _NO_TEXT for k in ("route_factor", "new_factor", "new_direction")}}
_EMPTY_UPDATES["fb_deltas"].flags.writeable = False


class _FastView:
    """The snapshot's store read through its unchecked columns (:meth:`engine.store.StoreReader.columns`),
    node texts decoded once per call.

    Ids come from the snapshot itself (already checked by the store that wrote them), so the
    hot path skips :class:`~engine.store.StoreView`'s boundary checks.
    """

    def __init__(self, view, texts: dict | None = None, dirs: dict | None = None,
                 factor_into: dict[int, int] | None = None):
        self.factor_into = factor_into or {}  # merged factor nodes are hidden and resolve to their target
        cols = self.cols = view.columns()
        self.nodes, exp = cols.nodes, cols.experiences
        self.H = view.n_horizons
        self.active = exp["active"]
        self.merged_into = exp["merged_into"]
        self.reliability, self.hit = cols.reliability, cols.hit
        self._ends = self.nodes["text_end"]
        self._paths = exp["path"]
        self.leaf = exp["path"][:, -1]  # an experience's direction node (fixed once the row exists)
        # decoded texts by (node, end of its bytes): the text buffer only grows, so a key never changes
        # meaning and the cache may outlive one snapshot (the method keeps it across rounds)
        self._texts: dict[tuple[int, int], str] = {} if texts is None else texts
        self._dirs: dict[tuple[int, int, int], np.ndarray] = {} if dirs is None else dirs
        self._n_inactive = int(view.n_experiences - np.count_nonzero(self.active))

    def node_text(self, nid: int) -> str:
        ends = self._ends
        key = (nid, ends.item(nid))
        t = self._texts.get(key)
        if t is None:
            t = self._texts[key] = self.cols.text_of(nid)
        return t

    def find(self, parent: int, key: int) -> int:
        n = self.cols.find(parent, key)
        while n in self.factor_into:
            n = self.factor_into[n]
        return n

    def children(self, nid: int) -> list[int]:
        """Children in insertion order (a Python walk: faster than a compiled call for a few)."""
        first, nxt = self.nodes["first_child"], self.nodes["next_sibling"]
        out, c = [], first.item(nid)
        while c >= 0:
            if c not in self.factor_into:
                out.append(c)
            c = nxt.item(c)
        return out

    def path_texts(self, eid: int) -> list[str]:
        return [self.node_text(v) for v in self._paths[eid].tolist() if v >= 0]

    def leaf_texts(self, eids: np.ndarray) -> list[str]:
        """The direction text of each experience row in ``eids``."""
        return [self.node_text(n) for n in self.leaf[eids].tolist()]

    def directions(self, fnode: int) -> np.ndarray:
        """Active experience rows under a factor node, in creation order (read-only)."""
        if fnode < 0:
            return _NONE
        # the rows under a node change only when it gains a child or a row turns inactive (a merge;
        # rows never turn active again), so this key names one answer and the cache outlives a snapshot
        key = (fnode, self.nodes["last_child"].item(fnode), self._n_inactive)
        d = self._dirs.get(key)
        if d is None:
            eids = self.nodes["eid"][self.children(fnode)]
            eids = eids[eids >= 0]
            d = eids[self.active[eids]] if eids.size else _NONE
            d.flags.writeable = False
            self._dirs[key] = d
        return d


@dataclass(eq=False)
class _Item:
    """One (news, industry) pair of a day's tree work: its factor, then what retrieval and the reranker gave."""

    news: int
    industry: int
    factor: str
    factor_node: int  # the factor's node in the snapshot's store; -1: a factor new today
    factor_key: int
    candidates: list[int] = field(default_factory=list)  # retrieved experience rows, creation order
    listed: list[tuple[int, str]] = field(default_factory=list)  # (row, direction text) shown to the reranker
    selected: list[int] = field(default_factory=list)  # the reranker's choice, or [the proposal]
    by_proposer: bool = False  # the selection is the proposer's (else the reranker's, from retrieval)
    proposal: int | None = None  # the proposed direction's reference


class _Overlay:
    """One episode's view: the snapshot plus what the episode itself changed (deltas, new rows, merges).

    References to experiences are ints: ``>= 0`` a store row, ``< 0`` the episode's own new
    direction number ``-1 - m`` (its row is given at the barrier).
    """

    def __init__(self, view, horizons, q0: float, q_min: float, q_max: float):
        self.view = view
        self.H = len(horizons)
        self.q0, self.q_min, self.q_max = q0, q_min, q_max
        self.q: dict[int, np.ndarray] = {}
        self.hit: dict[int, float] = {}
        self.into: dict[int, int] = {}
        self.new: list[tuple[str, str]] = []  # (factor text, direction text)
        self.new_by_key: dict[tuple[int, int], int] = {}
        self.new_under: dict[int, list[int]] = defaultdict(list)  # factor key -> refs, creation order
        self.factor_text: dict[int, str] = {}  # factor key -> first spelling (new factor nodes)
        self.fnode_of: dict[int, tuple[int, int]] = {}  # new direction ref -> (factor node or -1, factor key)
        self.merged_into = view.merged_into
        self.reliability, self.hits_of = view.reliability, view.hit

    def qrow(self, ref: int) -> np.ndarray:
        if ref in self.q:
            return self.q[ref]
        if ref < 0:
            return np.full(self.H, self.q0)
        return self.reliability[ref]  # a read-only float64 view of the snapshot (callers copy to change it)

    def hits(self, ref: int) -> float:
        if ref in self.hit:
            return self.hit[ref]
        return 0.0 if ref < 0 else float(self.hits_of[ref])

    def resolve(self, ref: int) -> int:
        while True:
            if ref in self.into:
                ref = self.into[ref]
            elif ref >= 0 and self.merged_into[ref] >= 0:
                ref = int(self.merged_into[ref])
            else:
                return ref

    def combined(self, a: int, b: int) -> np.ndarray:
        """Reliability of ``a`` and ``b`` merged: the hit-weighted mean, the plain mean when neither was hit."""
        ha, hb = self.hits(a), self.hits(b)
        wa, wb = (ha, hb) if ha + hb > 0 else (1.0, 1.0)
        return (wa * self.qrow(a) + wb * self.qrow(b)) / (wa + wb)

    def merge(self, keep: int, drop: int) -> None:
        """ExperienceStore.merge on the overlay (hit-weighted reliability)."""
        hk, hd = self.hits(keep), self.hits(drop)
        wk, wd = (hk, hd) if hk + hd > 0 else (1.0, 1.0)
        self.q[keep] = (wk * self.qrow(keep) + wd * self.qrow(drop)) / (wk + wd)
        self.hit[keep] = hk + hd
        self.hit[drop] = 0.0
        self.into[drop] = keep


class PipeToE(FinanceMethod):
    name = "Pipe+ToE"

    def __init__(self, ctx: StreamContext, days: Sequence[int], cfg: ToEConfig, update: str = "formula",
                 n_channels: int = 0, n_pretest: int = 0, retrieval: bool = True):
        super().__init__(ctx, days)
        if update not in ("formula", "llm"):
            raise ValueError(f"update must be 'formula' or 'llm', got {update!r}")
        self.cfg = cfg
        self.update = update
        self.retrieval = bool(retrieval)  # False: the ablation without retrieval (the proposer alone reuses)
        if update == "llm":
            self.name = "Pipe+ToE (LLM update)"
        elif not self.retrieval:
            self.name = "Pipe+ToE (no retrieval)"
        self.store = ExperienceStore(horizons=ctx.horizons, depth=3, q0=cfg.q0, eta=cfg.eta, q_min=cfg.q_min,
                                     q_max=cfg.q_max, capacity=256)
        n = ctx.market.n_industries
        self.industry_node = self.store.add_nodes([[name] for name in ctx.market.industries],
                                                  keys=[[normalized_key(name)] for name in ctx.market.industries])
        self.route = np.full((len(ctx.market.news.title), n), -1, dtype=np.int64)  # factor node per (news, industry)
        # ground-truth attribution (synthetic data): hits per (experience row, news channel)
        self.n_channels = int(n_channels)
        self.channel_hits = np.zeros((256, max(1, self.n_channels)), dtype=np.int64)
        # (industry, factor spelling) -> its factor node in the store: a lookup the barrier repeats
        # for every routed news item (derived from the store; emptied on load_state; a change to the
        # factor level other than adding nodes must empty it too)
        self._factor_nodes: dict[tuple[int, str], int] = {}
        self._text_cache: dict[tuple[int, int], str] = {}  # node texts decoded by the episodes (_FastView)
        self._dir_cache: dict[tuple[int, int, int], np.ndarray] = {}  # directions per factor node (_FastView)
        self.factor_into: dict[int, int] = {}  # merged factor node -> the factor node it went into
        self.node_index = prefix_index(cfg)  # directions of large prefixes on hnswlib (toe.index_min)
        self.node_index_dropped: list[str] = []  # why a saved index was not loaded (load_state; rebuilt on use)
        self.n_pretest = int(n_pretest)
        self.init_report: dict = {"init": "empty", "pretest_days": self.n_pretest}
        if cfg.init_tree:
            self._load_tree(cfg.init_tree)
            self._grow_channel_hits()
            self.init_report = {"init": "init_tree", "path_csv": cfg.init_tree, "experiences": int(self.store.n_experiences),
                                "pretest_days": self.n_pretest}

    def _load_tree(self, path: str) -> None:
        """Start from a path CSV (Table A1 layout: industry, factor, analysis_direction, q_h<h>..., recall,
        hit, eid); its eids are kept as external ids; node keys are normalised text as in the run."""
        from engine.errors import ConfigError
        from engine.store.pathcsv import read_path_csv
        from engine.store.reader import horizon_names

        src, _ = read_path_csv(path)
        want = horizon_names(self.ctx.horizons)
        if src.depth != 3 or tuple(src.horizons) != tuple(want):
            raise ConfigError(f"toe.init_tree {path}: needs levels industry, factor, analysis_direction and columns "
                              f"{', '.join('q_' + h for h in want)}; got depth {src.depth} and horizons "
                              f"{', '.join(src.horizons)}")
        keep = np.ones(src.n_experiences, bool)
        import pyarrow.csv as pcsv

        table = pcsv.read_csv(path)
        if "active" in table.column_names:  # an export of a tree with merges: merged-away rows are left out
            active = dict(zip(table.column("eid").to_pylist(), table.column("active").to_pylist()))
            keep = np.array([bool(active[int(e)]) for e in src.external_ids.tolist()], bool)
        paths = [src.path_texts(e) for e in np.flatnonzero(keep).tolist()]
        known = set(self.ctx.market.industries)
        for p in paths:
            if len(p) != 3:
                raise ConfigError(f"toe.init_tree {path}: {' > '.join(p)!r} is not an industry > factor > "
                                  f"direction path")
            if p[0] not in known:
                raise ConfigError(f"toe.init_tree {path}: path {' > '.join(p)!r} names industry {p[0]!r}, "
                                  f"not one of the market's ({', '.join(sorted(known))})")
        paths = [[_collapse(t) for t in p] for p in paths]
        rows = self.store.add_paths(paths, keys=[[normalized_key(t) for t in p] for p in paths],
                                    created=np.full(len(paths), -1.0))
        if np.unique(rows).size != rows.size:
            dup = int(np.flatnonzero(np.bincount(rows) > 1)[0])
            raise ConfigError(f"toe.init_tree {path}: two rows give the same path after whitespace/case "
                              f"normalisation: {paths[int(np.flatnonzero(rows == dup)[0])]}")
        self.store.set_reliability(rows, np.clip(src.reliability[keep], self.cfg.q_min, self.cfg.q_max))
        self.store.set_counts(rows, src.recall[keep], src.hit[keep])
        order = np.argsort(rows)
        ext = np.zeros(self.store.n_experiences, np.int64)
        ext[rows[order]] = src.external_ids[keep][order]
        if np.all(np.diff(ext) > 0):
            self.store.set_external_ids(ext)


    # ------------------------------------------------------------------ the round contract
    def snapshot(self):
        snap = {f"store_{k}": v for k, v in self.store.snapshot().items()}
        snap["route"] = self.route
        snap["factor_from"] = np.fromiter(self.factor_into.keys(), np.int64, len(self.factor_into))
        snap["factor_to"] = np.fromiter(self.factor_into.values(), np.int64, len(self.factor_into))
        if self.update == "llm":
            snap.update({f"ledger_{k}": v for k, v in self.store.ledger.columns().items()})
        return snap

    def _day(self, snapshot, j, episodes, llm):
        store = {k[6:]: v for k, v in snapshot.items() if k.startswith("store_")}
        view = _FastView(ExperienceStore.from_snapshot(store), self._text_cache, self._dir_cache,
                         dict(zip(snapshot["factor_from"].tolist(), snapshot["factor_to"].tolist())))
        stats = stats_for(episodes)
        overlays = {e.payload[2]: _Overlay(view, self.ctx.horizons, self.cfg.q0, self.cfg.q_min, self.cfg.q_max)
              for e in episodes}
        updates = {e.payload[2]: {} for e in episodes}
        if self.update == "llm":
            self._llm_feedback(snapshot, view, j, episodes, llm, stats, overlays, updates)
        day = int(self.days[j])
        industries = [e.payload[2] for e in episodes if self.ctx.retained(e.payload[2], day)]
        lines, used = self._structure(snapshot, view, day, industries, llm, stats, overlays, updates)
        preds = self._predict(day, llm, industries, lambda i: (tuple(lines[i]), ()), stats)
        out = []
        for e in episodes:
            i = e.payload[2]
            u = {**_EMPTY_UPDATES, **updates[i]}  # every key present, empty where the episode changed nothing
            if used.get(i):
                u["used"] = np.array(used[i], dtype=np.int64)
            s = preds[i] if i in preds else self._nan()
            out.append(EpisodeResult(e.episode_id, self._record(e, s, stats[i], llm), u))
        return out

    # ------------------------------------------------------------------ stages
    def _llm_feedback(self, snapshot, view, j, episodes, llm, stats, overlays, updates) -> None:
        """LLM-based updater (eq. (10)): one UPDATE prompt per (prediction, horizon) due today."""
        ctx = self.ctx
        day = int(self.days[j])
        n = ctx.market.n_industries
        alpha = ctx.market.alpha
        ep, hz = snapshot["ledger_episode"], snapshot["ledger_horizon"]
        rows_all = np.flatnonzero((snapshot["ledger_status"] == 0) & (snapshot["ledger_due"] <= day))
        reqs, shown, owners = [], [], []
        for e in episodes:
            i = e.payload[2]
            rows = rows_all[ep[rows_all] % n == i]
            groups: dict[tuple[int, int], list[int]] = {}
            for r in rows.tolist():
                groups.setdefault((int(ep[r]), int(hz[r])), []).append(r)
            for (epi, hc), rs in groups.items():
                j0 = epi // n
                d0 = int(self.days[j0])
                a = float(snapshot["ledger_action"][rs[0]])
                o = float(alpha[i, d0, hc])
                refs = [overlays[i].resolve(int(snapshot["ledger_eid"][r])) for r in rs]
                exps = [(eid, tuple(view.path_texts(eid)), float(view.reliability[eid, hc]))
                        for eid in dict.fromkeys(refs)]
                prompt = P.update_prompt(ctx.market.industries[i], ctx.date(d0), ctx.horizons[hc], a, o, a * o, exps)
                reqs.append(ctx.request(prompt, f"{self.name}:update:{epi}:{hc}",
                                        S.finance_update([x[0] for x in exps], self.cfg.q_min, self.cfg.q_max)))
                shown.append((i, hc, rs, refs, exps))
                owners.append(stats[i])
        deltas: dict[int, list] = defaultdict(list)
        entries: dict[int, list] = defaultdict(list)
        for (i, hc, rs, refs, exps), texts in zip(shown, self._generate(llm, reqs, "update", owners)):
            new = P.parse_update(texts[0] if texts else "", [x[0] for x in exps], self.cfg.q_min, self.cfg.q_max)
            if new is None:
                stats[i]["parse_failures"] += 1
                new = {}
            d_of = {eid: (new[eid] - q if eid in new else 0.0) for eid, _, q in exps}  # eq. (10): delta on the shown Q
            seen = set()
            for r, ref in zip(rs, refs):
                entries[i].append(r)
                deltas[i].append(d_of[ref])
                if ref in seen:  # the store applies one update per (entry, experience): see ExperienceStore.resolve
                    continue
                seen.add(ref)
                q = overlays[i].qrow(ref).copy()
                q[hc] = min(max(q[hc] + d_of[ref], self.cfg.q_min), self.cfg.q_max)
                overlays[i].q[ref] = q
        for e in episodes:
            i = e.payload[2]
            updates[i]["fb_entries"] = np.asarray(entries[i], dtype=np.int64)
            updates[i]["fb_deltas"] = np.asarray(deltas[i], dtype=np.float64)

    def _candidates(self, view, fnode: int, news_vec: np.ndarray) -> np.ndarray:
        """Retrieval under the (industry, factor) prefix (ToE appendix, "Hyperparameters"): the first level
        keeps the ``k1`` directions most similar to the news (ties: older first); the leaf level keeps
        those whose cosine with the news is at least ``lam``. Returned in creation order (= row order).

        A prefix with at least ``toe.index_min`` directions is searched through the node index
        (engine/finance/toe_index.py: hnswlib, re-ranked exactly; approximate, recall@8 measured in
        benchmarks/results/finance_retrieval.md); below that crossover, the exact product over all."""
        eids = view.directions(fnode)
        if not eids.size or (eids.size <= self.cfg.k1 and self.cfg.lam <= -1.0):
            return eids  # nothing to rank or cut
        if self.node_index.use(eids.size):
            rows, sims = prefix_top(self.node_index, view, self.ctx.embedder, fnode, news_vec, self.cfg.k1)
            return np.sort(rows[sims >= self.cfg.lam])
        vecs = self.ctx.embedder.embed(view.leaf_texts(eids))  # cached by text
        sims = vecs @ news_vec
        order = np.lexsort((np.arange(eids.size), -sims))[: self.cfg.k1]
        order = np.sort(order[sims[order] >= self.cfg.lam])
        return eids[order]

    def _structure(self, snapshot, view, day, industries, llm, stats, overlays, updates):
        """The day's tree work (ToE's "Retrieval, Rerank, Propose, Merge"): route the new (news, industry) pairs
        to factors, retrieve and rerank (or propose) directions per pair, merge what was created, then count
        the hits; returns each industry's experience lines for its prompt and the experiences it used."""
        pairs = [(k, i) for i in industries for k in self.ctx.retained(i, day)]
        routed = self._route(snapshot, view, pairs, llm, stats, updates)
        items = self._locate(snapshot, view, pairs, routed, overlays)
        self._retrieve(view, items, stats)
        created = self._rerank(view, day, items, llm, stats, overlays)
        if self.cfg.merge:
            self._merge_new(view, industries, llm, stats, overlays, updates, created)
        return self._use(view, day, items, industries, stats, overlays, updates)

    def _route(self, snapshot, view, pairs, llm, stats, updates) -> dict[tuple[int, int], str]:
        """One ROUTE prompt per pair not routed before (a pair keeps its factor for good); the factor each names."""
        ctx, news = self.ctx, self.ctx.market.news
        todo = [(k, i) for k, i in pairs if snapshot["route"][k, i] < 0]
        reqs = []
        for k, i in todo:
            known = [view.node_text(c) for c in view.children(int(self.industry_node[i]))]
            factors = list(dict.fromkeys(list(self.cfg.factors) + known))
            reqs.append(ctx.request(P.route_prompt(ctx.market.industries[i], factors, news.title[k], news.content[k]),
                                    f"{self.name}:route:{k}", S.FINANCE_ROUTE))
        routed: dict[tuple[int, int], str] = {}
        for (k, i), texts in zip(todo, self._generate(llm, reqs, "route", [stats[i] for _, i in todo])):
            factor = P.parse_route(texts[0] if texts else "")
            if factor is None:
                stats[i]["parse_failures"] += 1
                factor = self.cfg.factors[0]
            routed[(k, i)] = factor
        if self.cfg.merge and self.cfg.merge_factors:
            self._merge_factors(view, llm, stats, routed)
        for i in dict.fromkeys(i for _, i in pairs):
            mine = [(k, f) for (k, ii), f in routed.items() if ii == i]
            if mine:  # else the shared empty arrays (_EMPTY_UPDATES)
                updates[i]["route_news"] = np.array([k for k, _ in mine], dtype=np.int64)
                updates[i]["route_factor"] = np.array([f for _, f in mine], dtype=str)
        return routed

    def _locate(self, snapshot, view, pairs, routed, overlays) -> list[_Item]:
        """Each pair's factor: its node in the store (-1: a factor new today) and key."""
        items = []
        for k, i in pairs:
            if (k, i) in routed:
                factor = routed[(k, i)]
                factor_key = normalized_key(_collapse(factor))
                factor_node = view.find(int(self.industry_node[i]), factor_key)
                if factor_node < 0:
                    overlays[i].factor_text.setdefault(factor_key, _collapse(factor))
            else:
                factor_node = int(snapshot["route"][k, i])
                factor = view.node_text(factor_node)
                factor_key = int(view.nodes["key"][factor_node])
            items.append(_Item(k, i, factor, factor_node, factor_key))
        return items

    def _retrieve(self, view, items: list[_Item], stats) -> None:
        """Each item's candidates under its (industry, factor) prefix (:meth:`_candidates`), counted."""
        news_vecs = self.ctx.embedder.embed([self.ctx.news_text(it.news) for it in items]) if items else None
        for j, it in enumerate(items):
            found = (self._candidates(view, it.factor_node, news_vecs[j]) if it.factor_node >= 0 and self.retrieval
                     else np.zeros(0, np.int64))
            it.candidates = found.tolist()
            it.listed = list(zip(it.candidates, view.leaf_texts(found)))
            st = stats[it.industry]
            st["items"] += 1
            st["retrieved_items"] += bool(it.candidates)
            st["candidates"] += len(it.candidates)

    def _rerank(self, view, day, items: list[_Item], llm, stats, overlays) -> dict[int, list[int]]:
        """One RERANK prompt per item: the candidates it selects, else at most one proposed direction (ToE's
        proposer, only when none fits); returns the directions created per industry."""
        ctx, news = self.ctx, self.ctx.market.news
        reqs = [ctx.request(P.rerank_prompt(ctx.market.industries[it.industry], it.factor, news.title[it.news],
                                            news.content[it.news], it.listed),
                            f"{self.name}:rerank:{day}:{it.news}", S.finance_rerank(it.candidates)) for it in items]
        created: dict[int, list[int]] = defaultdict(list)
        for it, texts in zip(items, self._generate(llm, reqs, "rerank", [stats[it.industry] for it in items])):
            answer = P.parse_rerank(texts[0] if texts else "", it.candidates)
            if answer is None:
                stats[it.industry]["parse_failures"] += 1
                continue
            chosen, proposal = answer
            it.by_proposer = not chosen and bool(proposal)
            if it.by_proposer:
                ref, is_new = self._propose(view, overlays[it.industry], it.factor_node, it.factor_key, proposal)
                stats[it.industry]["proposals"] += 1
                if is_new:
                    created[it.industry].append(ref)
                it.proposal = ref  # a proposed path is a candidate too: hit never exceeds recall
                chosen = [ref]
            it.selected = chosen
        return created

    def _use(self, view, day, items: list[_Item], industries, stats, overlays, updates):
        """Hits (once per news item that selects the experience), the prediction's experience lines, and the
        episode's recall / hit / new-node updates; returns (lines, used experiences) per industry."""
        ctx, news = self.ctx, self.ctx.market.news
        lines: dict[int, list[P.ExperienceLine]] = defaultdict(list)
        used: dict[int, list[int]] = defaultdict(list)
        hit: dict[int, list[int]] = defaultdict(list)
        hit_channel: dict[int, list[int]] = defaultdict(list)
        retrieved_refs: dict[int, set[int]] = defaultdict(set)  # used experiences a reranker selected
        for it in items:
            o = overlays[it.industry]
            chosen = list(dict.fromkeys(o.resolve(e) for e in it.selected))
            if not chosen:
                continue
            pos = ctx.retained(it.industry, day).index(it.news) + 1
            for e in chosen:
                o.hit[e] = o.hits(e) + 1
                hit[it.industry].append(e)
                hit_channel[it.industry].append(int(news.channel[it.news]) if self.n_channels else -1)
                lines[it.industry].append(P.ExperienceLine(pos, self._path(view, o, it.industry, e),
                                                           tuple(o.qrow(e).tolist())))
                used[it.industry].append(e)
                if not it.by_proposer:
                    retrieved_refs[it.industry].add(e)
        recall: dict[int, list[int]] = defaultdict(list)
        proposal_recall: dict[int, list[int]] = defaultdict(list)
        for it in items:
            recall[it.industry].extend(it.candidates)
            if it.proposal is not None:
                proposal_recall[it.industry].append(it.proposal)
        for i in industries:
            u = updates[i]  # only what the episode filled; the rest are the shared empty arrays (_EMPTY_UPDATES)
            if recall[i]:
                u["recall"] = np.array(recall[i], dtype=np.int64)
            if proposal_recall[i]:
                u["proposal_recall"] = np.array(proposal_recall[i], dtype=np.int64)
            if overlays[i].new:
                u["new_factor"] = np.array([f for f, _ in overlays[i].new], dtype=str)
                u["new_direction"] = np.array([d for _, d in overlays[i].new], dtype=str)
            if hit[i]:
                u["hit"] = np.array(hit[i], dtype=np.int64)
                u["hit_channel"] = np.array(hit_channel[i], dtype=np.int64)
        used = {i: list(dict.fromkeys(v)) for i, v in used.items()}
        for i, refs in used.items():  # each used experience gets one delayed update per horizon (eq. (7))
            n = sum(e in retrieved_refs[i] for e in refs)
            stats[i]["updates_retrieved"] += n
            stats[i]["updates_proposed"] += len(refs) - n
        return lines, used

    def _path(self, view, o: _Overlay, i: int, ref: int) -> tuple[str, str, str]:
        if ref >= 0:
            return tuple(view.path_texts(ref))
        factor, direction = o.new[-1 - ref]
        return self.ctx.market.industries[i], factor, direction

    def _propose(self, view, o: _Overlay, fnode: int, fkey: int, text: str) -> tuple[int, bool]:
        """The reference of direction ``text`` under the factor: existing (its active row), this
        episode's own earlier proposal, or a new one. Returns ``(ref, created)``."""
        text = _collapse(text)
        dkey = normalized_key(text)
        if fnode >= 0:
            leaf = view.find(fnode, dkey)
            if leaf >= 0 and view.nodes["eid"][leaf] >= 0:
                return o.resolve(int(view.nodes["eid"][leaf])), False
        if (fkey, dkey) in o.new_by_key:
            return o.resolve(o.new_by_key[(fkey, dkey)]), False
        ref = -1 - len(o.new)
        factor = view.node_text(fnode) if fnode >= 0 else o.factor_text[fkey]
        o.new.append((factor, text))
        o.new_by_key[(fkey, dkey)] = ref
        o.new_under[fkey].append(ref)
        o.fnode_of[ref] = (fnode, fkey)
        return ref, True

    def _merge_factors(self, view, llm, stats, routed: dict) -> None:
        """A newly routed factor whose cosine with a known factor of the industry is at least
        ``merge_threshold`` goes to the factor merger with that factor (one batch); on a merge the news
        is routed to the known factor node, so the new node is never created."""
        ctx = self.ctx
        todo: dict[tuple[int, int], str] = {}
        for (k, i), f in routed.items():
            f = _collapse(f)
            fkey = normalized_key(f)
            if view.find(int(self.industry_node[i]), fkey) < 0:
                todo.setdefault((i, fkey), f)
        reqs, pairs = [], []
        for (i, fkey), f in todo.items():
            known = view.children(int(self.industry_node[i]))
            if not known:
                continue
            texts = [view.node_text(int(c)) for c in known]
            vecs = ctx.embedder.embed(texts + [f])
            sims = vecs[:-1] @ vecs[-1]
            best = int(np.argmax(sims))
            if sims[best] < self.cfg.merge_threshold:
                continue
            reqs.append(ctx.request(P.merge_factor_prompt(ctx.market.industries[i], texts[best], f),
                                    f"{self.name}:merge_factor:{i}:{fkey}", S.FINANCE_MERGE))
            pairs.append((i, fkey, texts[best]))
        into: dict[tuple[int, int], str] = {}
        for (i, fkey, known), texts in zip(pairs, self._generate(llm, reqs, "merge", [stats[p[0]] for p in pairs])):
            ans = P.parse_merge(texts[0] if texts else "")
            if ans is None:
                stats[i]["parse_failures"] += 1
            elif ans[0]:
                into[(i, fkey)] = known
                stats[i]["merges"] += 1
        if into:
            for (k, i), f in list(routed.items()):
                routed[(k, i)] = into.get((i, normalized_key(_collapse(f))), f)

    def _merge_new(self, view, industries, llm, stats, overlays, updates, created) -> None:
        """Near-duplicate older siblings of new directions (cosine >= lam) go to the LLM merger; one batch.
        A prefix of at least ``toe.index_min`` directions offers its closest one through the node index."""
        reqs, pairs = [], []
        for i in industries:
            o = overlays[i]
            for ref in created[i]:
                fnode, fkey = o.fnode_of[ref]
                mine = o.new[-1 - ref][1]
                old = view.directions(fnode) if fnode >= 0 else _NONE
                if self.node_index.use(old.size):
                    old, _ = prefix_top(self.node_index, view, self.ctx.embedder, fnode,
                                        self.ctx.embedder.embed([mine])[0], 1)
                sibs = old.tolist() + [r for r in o.new_under[fkey] if r > ref]  # older: own earlier proposals
                if not sibs:
                    continue
                texts = [self._path(view, o, i, s)[2] for s in sibs]
                vecs = self.ctx.embedder.embed(texts + [mine])
                sims = vecs[:-1] @ vecs[-1]
                best = int(np.argmax(sims))
                if sims[best] < self.cfg.merge_threshold:
                    continue
                ind, fac, _ = self._path(view, o, i, ref)
                reqs.append(self.ctx.request(P.merge_prompt(ind, fac, texts[best], mine),
                                             f"{self.name}:merge:{ref}", S.FINANCE_MERGE))
                pairs.append((i, sibs[best], ref))
        keep_of: dict[int, list] = defaultdict(list)
        drop_of: dict[int, list] = defaultdict(list)
        into_of: dict[int, list] = defaultdict(list)
        for (i, keep, drop), texts in zip(pairs, self._generate(llm, reqs, "merge", [stats[p[0]] for p in pairs])):
            ans = P.parse_merge(texts[0] if texts else "")
            if ans is None:
                stats[i]["parse_failures"] += 1
                continue
            o = overlays[i]
            k, d = o.resolve(keep), o.resolve(drop)
            if not ans[0] or k == d:
                continue
            # the merged text the model writes: an existing direction of that text, or a new one (ToE
            # "Maintenance"); both experiences fold into it
            t = k
            if ans[1] is not None:
                fnode, fkey = o.fnode_of[drop]
                t, _ = self._propose(view, o, fnode, fkey, ans[1])
                t = o.resolve(t)
            q = o.combined(k, d)
            for x in (k, d):
                if o.resolve(x) != t:
                    o.merge(t, o.resolve(x))
            o.q[t] = q
            keep_of[i].append(k)
            drop_of[i].append(d)
            into_of[i].append(t)
            stats[i]["merges"] += 1
        for i in keep_of:  # industries without a merge keep the shared empty arrays (_EMPTY_UPDATES)
            updates[i]["merge_keep"] = np.array(keep_of[i], dtype=np.int64)
            updates[i]["merge_drop"] = np.array(drop_of[i], dtype=np.int64)
            updates[i]["merge_into"] = np.array(into_of[i], dtype=np.int64)

    # ------------------------------------------------------------------ the barrier
    def apply(self, results) -> None:
        """The day's updates in episode order, one store call per kind (industries' rows are disjoint,
        so phase by phase equals episode by episode): LLM deltas, factor nodes, new directions,
        recalls, merges, hits, ledger entries; then the formula rule's due feedback."""
        st = self.store
        if not results:
            return
        updates = [r.updates for r in results]
        fb = [u for u in updates if u["fb_entries"].size]
        if fb:  # LLM-based updater, eq. (10), entry order
            entries = np.concatenate([np.asarray(u["fb_entries"], np.int64) for u in fb])
            if (st.ledger.column("status")[entries] != PENDING).any():  # checked before anything changes
                raise StoreError(
                    f"{self.name}: this round's episodes resolved feedback entries that an earlier round had "
                    f"resolved: they read a snapshot older than the previous barrier (cluster.pipeline_rounds > 0). "
                    f"The LLM update rule resolves feedback inside its episodes, so it needs "
                    f"cluster.pipeline_rounds = 0 (use a larger round size instead)")
            st.resolve(entries, rewards=np.concatenate([np.asarray(u["fb_deltas"], np.float64) for u in fb]),
                       rule="delta")
        industry = [int(r.record["industry"]) for r in results]
        self._add_routes(updates, industry)
        paths, created, n_new = [], [], np.zeros(len(results), np.int64)
        for n, (r, u, i) in enumerate(zip(results, updates, industry)):
            ind = self.ctx.market.industries[i]
            n_new[n] = len(u["new_direction"])
            day = float(r.record["day"])
            for f, d in zip(u["new_factor"].tolist(), u["new_direction"].tolist()):
                paths.append([ind, f, d])
                created.append(day)
        rows = np.zeros(0, np.int64)
        if paths:
            rows = st.add_paths(paths, keys=[[normalized_key(t) for t in p] for p in paths],
                                created=np.asarray(created))
            self._grow_channel_hits()
        first_new = np.cumsum(n_new) - n_new  # each episode's first new direction in ``rows``

        # every episode's references as store rows (``-1 - m``: its m-th new direction), in one pass
        names = ("recall", "proposal_recall", "merge_keep", "merge_drop", "merge_into", "hit", "used")
        parts = [u[k] for u in updates for k in names]  # int64 arrays, as _day builds them
        sizes = np.array([p.size for p in parts], np.int64)
        refs = np.concatenate(parts).astype(np.int64, copy=False)
        owner = np.repeat(np.repeat(np.arange(len(updates)), len(names)), sizes)
        name = np.repeat(np.tile(np.arange(len(names)), len(updates)), sizes)
        new = refs < 0
        if new.any():
            refs[new] = rows[first_new[owner[new]] - 1 - refs[new]]

        def rows_of(*which) -> np.ndarray:
            mask = name == names.index(which[0])
            for w in which[1:]:
                mask |= name == names.index(w)
            return refs[mask]

        rec = rows_of("recall", "proposal_recall")
        if rec.size:  # canonical: a pipelined round (older snapshot) may recall a row merged since
            st.record_recall(st.canonical(rec))
        for k, d, t in zip(rows_of("merge_keep").tolist(), rows_of("merge_drop").tolist(),
                           rows_of("merge_into").tolist()):
            self._merge_rows(k, d, t)
        hits = rows_of("hit")
        if hits.size:
            hits = st.canonical(hits)
            st.record_hit(hits)
            if self.n_channels:
                ch = np.concatenate([np.asarray(u["hit_channel"], np.int64) for u in updates])
                ok = ch >= 0
                np.add.at(self.channel_hits, (hits[ok], ch[ok]), 1)
        at = name == names.index("used")
        self._defer(results, refs[at], owner[at])
        j = int(results[-1].record["day"])
        if j == self.n_pretest - 1 and self.cfg.init == "cluster" and not self.cfg.init_tree:
            self._induce_hierarchy()
        self._after_round(j)

    def _add_routes(self, updates, industry) -> None:
        """The factor node of every newly routed (news, industry) pair: one ``add_nodes`` call over the
        distinct (industry, factor) prefixes, in first-seen order (the ids an episode-by-episode
        loop would give)."""
        prefix: dict[tuple[int, str], int] = {}
        news, which = [], []
        for u, i in zip(updates, industry):
            for k, f in zip(u["route_news"].tolist(), u["route_factor"].tolist()):
                news.append((k, i))
                which.append(prefix.setdefault((i, _collapse(f)), len(prefix)))
        if not prefix:
            return
        names = self.ctx.market.industries
        cache = self._factor_nodes
        todo = [p for p in prefix if p not in cache]
        if todo:
            made = self.store.add_nodes([[names[i], f] for i, f in todo],
                                        keys=[[normalized_key(names[i]), normalized_key(f)] for i, f in todo])
            cache.update(zip(todo, made.tolist()))
        nodes = np.fromiter((self._factor_node(cache[p]) for p in prefix), np.int64, len(prefix))
        k, i = np.asarray(news, np.int64).T
        self.route[k, i] = nodes[np.asarray(which, np.int64)]

    def _defer(self, results, used, owner) -> None:
        """ToE eq. (7): one ledger entry per (episode, used experience, horizon), ``r = a_t * o_{t+h}``
        due on day ``t + h``; horizon-major within an episode. An experience merged at this barrier
        stands for the one it went into, once."""
        st = self.store
        if not used.size:
            return
        R = len(results)
        s = np.stack([np.asarray(r.record["s"], np.float64) for r in results])
        live = np.isfinite(s[:, 0])
        keep = live[owner]
        used, owner = used[keep], owner[keep]
        if (st.merged_into[used] >= 0).any():
            canon = st.canonical(used)
            first = np.ones(used.size, bool)
            for n in np.unique(owner).tolist():  # rare: a merge on this barrier touched a used row
                at = np.flatnonzero(owner == n)
                _, idx = np.unique(canon[at], return_index=True)
                first[at] = False
                first[at[idx]] = True
            used, owner = canon[first], owner[first]
        if not used.size:
            return
        H = len(self.ctx.horizons)
        horizons = np.asarray(self.ctx.horizons, np.int64)
        lens = np.bincount(owner, minlength=R)
        ustart = np.cumsum(lens) - lens
        size = H * lens
        who = np.repeat(np.arange(R), size)
        within = np.arange(who.size) - np.repeat(np.cumsum(size) - size, size)
        h, m = np.divmod(within, lens[who])
        day = np.asarray([int(self.days[r.record["day"]]) for r in results], np.int64)
        eps = np.asarray([r.episode_id for r in results], np.int64)
        st.defer(eps[who], used[ustart[who] + m], h, day[who] + horizons[h], s[who, h])

    def _factor_node(self, node: int) -> int:
        while node in self.factor_into:
            node = self.factor_into[node]
        return node

    def _children(self, node: int) -> list[int]:
        first, nxt = self.store.node_column("first_child"), self.store.node_column("next_sibling")
        out, c = [], int(first[node])
        while c >= 0:
            if c not in self.factor_into:
                out.append(c)
            c = int(nxt[c])
        return out

    def _induce_hierarchy(self) -> None:
        """The initial hierarchy from the reasoning paths collected over the pre-test span (ToE "Experience
        Tree": "induced by progressively clustering and abstracting collected reasoning paths").

        Level by level: the factors of each industry, then the directions of each factor, are grouped by
        leader clustering on embeddings (:func:`leader_clusters`, cosine >= ``toe.merge_threshold``; the
        most-hit member leads and names the cluster), and every member is merged into its leader
        (directions: ``store.merge``; factors: :meth:`_merge_factor_nodes`)."""
        st = self.store
        emb, thr = self.ctx.embedder, self.cfg.merge_threshold
        eid_of = st.node_column("eid")
        before = int(st.active.sum())
        n_factor, n_dir = 0, 0
        for i, inode in enumerate(self.industry_node.tolist()):
            fnodes = self._children(inode)
            if len(fnodes) > 1:
                hits = np.array([self._hits_under(f) for f in fnodes], np.float64)
                for lead, members in leader_clusters(emb.embed(st.node_texts(fnodes)), hits, thr):
                    for m in members:
                        if m != lead:
                            self._merge_factor_nodes(i, fnodes[lead], fnodes[m])
                            n_factor += 1
            eid_of = st.node_column("eid")  # again: a factor merge above adds nodes (a longer column)
            for f in self._children(inode):
                eids = np.array([int(eid_of[c]) for c in self._children(f)], np.int64)
                eids = eids[eids >= 0]
                eids = eids[st.active[eids]] if eids.size else eids
                if eids.size < 2:
                    continue
                texts = [st.path_texts(int(e))[-1] for e in eids]
                for lead, members in leader_clusters(emb.embed(texts), st.hit[eids].astype(np.float64), thr):
                    for m in members:
                        if m != lead:
                            self._merge_rows(int(eids[lead]), int(eids[m]), int(eids[lead]))
                            n_dir += 1
        self.init_report = {"init": "cluster", "pretest_days": self.n_pretest, "paths_collected": before,
                            "factor_merges": n_factor, "direction_merges": n_dir,
                            "experiences": int(st.active.sum())}

    def _hits_under(self, fnode: int) -> float:
        eid_of = self.store.node_column("eid")
        eids = np.array([int(eid_of[c]) for c in self._children(fnode)], np.int64)
        eids = eids[eids >= 0]
        return float(self.store.hit[eids].sum()) if eids.size else 0.0

    def _merge_factor_nodes(self, i: int, keep: int, drop: int) -> None:
        """Fold factor node ``drop`` into its sibling ``keep``: each active direction under ``drop`` moves
        under ``keep`` (merged into the direction of the same text there, or into a new row that takes
        its reliability and counts); routing to ``drop`` goes to ``keep`` from now on."""
        st = self.store
        ind, ktext = self.ctx.market.industries[i], st.node_text(keep)
        eid_of = st.node_column("eid")
        moved = [int(eid_of[c]) for c in self._children(drop)]
        moved = [e for e in moved if e >= 0 and st.active[e]]
        for d in moved:
            dtext = st.path_texts(d)[-1]
            n_before = st.n_experiences
            r = int(st.add_paths([[ind, ktext, dtext]], keys=[[normalized_key(ind), normalized_key(ktext),
                                                               normalized_key(dtext)]],
                                 created=np.asarray([float(st.created[d])]))[0])
            self._grow_channel_hits()
            r = int(st.canonical([r])[0])
            q = st.reliability[d].copy()
            self._merge_rows(r, d, r, siblings_only=False)
            if r >= n_before:  # a fresh row takes over the moved direction as it was
                st.set_reliability([r], q[None, :])
        self.factor_into[int(drop)] = int(keep)
        self.route[self.route == drop] = keep

    def _merge_rows(self, keep: int, drop: int, into: int, siblings_only: bool = True) -> None:
        """Fold experiences ``keep`` and ``drop`` into ``into`` (one of them, or the row of the merged
        text): ``store.merge`` adds hit and recall; the reliability is the hit-weighted mean of the two
        (plain mean when neither was hit), as :meth:`ExperienceStore.merge` computes it for a pair."""
        st = self.store
        k, d, t = (int(x) for x in st.canonical([keep, drop, into]))
        if k == d:
            return
        q = None
        if t not in (k, d):
            qk, qd = st.reliability[k].copy(), st.reliability[d].copy()
            hk, hd = float(st.hit[k]), float(st.hit[d])
            wk, wd = (hk, hd) if hk + hd > 0 else (1.0, 1.0)
            q = (wk * qk + wd * qd) / (wk + wd)
        for x in (k, d):
            if x != t:
                st.merge(t, x, siblings_only=siblings_only)
                self.channel_hits[t] += self.channel_hits[x]
                self.channel_hits[x] = 0
        if q is not None:
            st.set_reliability([t], q[None, :])

    def _after_round(self, j: int) -> None:
        """Formula rule (eq. (A6)): every entry due by the next day's predictions, entry order, once."""
        if self.update != "formula":
            return
        nxt = self.next_day(j)
        if nxt is None:
            return
        st = self.store
        entries = st.ledger.due(nxt)
        if not entries.size:
            return
        n = self.ctx.market.n_industries
        ep = st.ledger.column("episode")[entries]
        hc = st.ledger.column("horizon")[entries]
        ind, j0 = ep % n, ep // n
        outcomes = self.ctx.market.alpha[ind, self.days[j0], hc]
        st.resolve(entries, outcomes=outcomes, rule="formula")

    def _grow_channel_hits(self) -> None:
        n = self.store.n_experiences
        cap = self.channel_hits.shape[0]
        if n > cap:  # amortized: double
            grown = np.zeros((max(n, 2 * cap), self.channel_hits.shape[1]), dtype=np.int64)
            grown[:cap] = self.channel_hits
            self.channel_hits = grown

    # ------------------------------------------------------------------ checkpoints
    def save_state(self, directory: Path) -> None:
        directory = Path(directory)
        self.store.save(directory / "store", extras=prefix_index_writers(self.node_index, self.ctx.embedder))
        np.save(directory / "route.npy", self.route)
        np.save(directory / "channel_hits.npy", self.channel_hits[: self.store.n_experiences])
        np.save(directory / "factor_into.npy", np.asarray(sorted(self.factor_into.items()), np.int64).reshape(-1, 2))
        (directory / "toe_init.json").write_text(json.dumps(self.init_report))

    def load_state(self, directory: Path) -> None:
        directory = Path(directory)
        self.store = ExperienceStore.load(directory / "store")
        # a node index that is missing or does not match the store is rebuilt when its prefix is next searched
        self.node_index_dropped = restore_prefix_index(self.node_index, self.store, self.ctx.embedder)
        self._factor_nodes, self._text_cache, self._dir_cache = {}, {}, {}
        self.route = np.load(directory / "route.npy")
        ch = np.load(directory / "channel_hits.npy")
        self.channel_hits = np.zeros((max(256, ch.shape[0]), ch.shape[1]), dtype=np.int64)
        self.channel_hits[: ch.shape[0]] = ch
        fi = directory / "factor_into.npy"
        self.factor_into = {int(a): int(b) for a, b in np.load(fi).tolist()} if fi.exists() else {}
        ini = directory / "toe_init.json"
        if ini.exists():
            self.init_report = json.loads(ini.read_text())
