"""Pipe+ToE on the news stream: routing, retrieval, rerank/propose, merge, prediction, delayed updates.

One ``step(day, llm)`` (ToE eqs. (2)-(10) on one trading day), every stage one
batched ``llm.generate`` call across industries and news items:

1. **updates**: ledger entries whose horizon has elapsed (``t + h <= day``)
   give ``r = a_t * o_{t+h}`` (eq. (7)) to every experience they used; the
   formula update (eq. (A6)) runs in entry order, or the LLM-based updater
   (eq. (10), the Table 3 ablation) sends one UPDATE prompt per entry;
2. **routing** (decoupled execution): each new (news, industry) pair is routed
   to a factor once; the (industry, factor) prefix is cached and reused;
3. **retrieval**: the directions under the prefix; when there are more than
   ``k1``, the ``k1`` most similar to the news by embedding; each counts a recall;
4. **rerank / propose**: the LLM selects the applicable directions or, when
   none fits, proposes at most one new direction (eqs. (3)-(5));
5. **merge**: a new direction whose cosine with a sibling is at least
   ``lam`` goes to the LLM merger with its most similar sibling; a merge folds
   the new experience into the older one (counts kept, see ExperienceTree.merge);
6. **hits**: each news item counts one hit on every experience it selected;
7. **prediction** (eq. (6)): the shared prompt plus the selected paths with
   their per-horizon reliabilities; one ledger entry per (industry, horizon).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from engine.finance import prompts as P
from engine.finance.config import ToEConfig
from engine.finance.ledger import PendingFeedback, feedback
from engine.finance.methods import FinanceMethod, StreamContext
from engine.finance.tree import ExperienceTree


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
