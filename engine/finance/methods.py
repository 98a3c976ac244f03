"""The compared methods on one news stream: Baseline, Pipe, Pipe+Mem0, Pipe+MemRL (Pipe+ToE in toe.py).

All share :class:`StreamContext`: the news window (T-4..T), the importance
threshold (>= 8), the prediction prompt, the horizons and the evaluation order
(the paper's fairness controls). A method's ``step(day, llm)`` sends all prompts
of that day, across industries and news items, as one ``llm.generate`` call
per stage, and returns the day's predictions ``f8[N, H]`` (NaN for industries
without retained news). A completion that cannot be parsed counts in
``stats["parse_failures"]`` and predicts 0 (neutral).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from engine.finance import prompts as P
from engine.finance.config import MemoryConfig, ProtocolConfig, SamplingConfig
from engine.finance.data import Market
from engine.finance.ledger import PendingFeedback, feedback
from engine.llm.base import LLMBackend, Request


class StreamContext:
    """What every method shares: the market, the retained news per (industry, day), prompt settings."""

    def __init__(self, market: Market, protocol: ProtocolConfig, sampling: SamplingConfig, seed: int, embedder):
        self.market = market
        self.protocol = protocol
        self.sampling = sampling
        self.seed = int(seed)
        self.embedder = embedder
        self.horizons = tuple(market.horizons)
        nw = market.news
        retained: dict[tuple[int, int], list[int]] = defaultdict(list)
        keep = np.flatnonzero(nw.importance >= protocol.min_importance)
        for k in keep.tolist():
            d0 = int(nw.day[k])
            for i in nw.industries[k]:
                for d in range(d0, min(market.n_days, d0 + protocol.window + 1)):
                    retained[(i, d)].append(k)
        self._retained = {}
        for key, ks in retained.items():
            ks = sorted(ks, key=lambda k: (-nw.importance[k], -nw.day[k], k))[: protocol.max_news]
            self._retained[key] = sorted(ks, key=lambda k: (nw.day[k], k))

    def retained(self, industry: int, day: int) -> list[int]:
        """News indices for ``industry`` on ``day``: published in [day - window, day], importance >= threshold."""
        return self._retained.get((industry, day), [])

    def industries_with_news(self, day: int) -> list[int]:
        return [i for i in range(self.market.n_industries) if (i, day) in self._retained]

    def request(self, prompt: str, episode: str) -> Request:
        return Request(prompt=prompt, temperature=self.sampling.temperature, max_tokens=self.sampling.max_tokens,
                       seed=self.seed, episode=episode)

    def date(self, day: int) -> str:
        return str(self.market.dates[day])

    def news_lines(self, ks: Sequence[int]) -> list[P.NewsLine]:
        nw = self.market.news
        return [P.NewsLine(self.date(int(nw.day[k])), float(nw.importance[k]), nw.title[k], nw.content[k]) for k in ks]

    def news_text(self, k: int) -> str:
        nw = self.market.news
        return f"{nw.title[k]}. {nw.content[k]}"


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


class Baseline(FinanceMethod):
    """Per-news sentiment in {-1, 0, 1}, importance-weighted mean over the window (no experience)."""

    name = "Baseline"

    def __init__(self, ctx: StreamContext):
        super().__init__(ctx)
        self.cache: dict[tuple[int, int], int] = {}

    def step(self, day, llm):
        ctx = self.ctx
        nw = ctx.market.news
        industries = ctx.industries_with_news(day)
        todo = [(k, i) for i in industries for k in ctx.retained(i, day) if (k, i) not in self.cache]
        reqs = [ctx.request(P.sentiment_prompt(ctx.market.industries[i], nw.title[k], nw.content[k]),
                            f"{self.name}:{day}:{i}") for k, i in todo]
        for key, texts in zip(todo, self._generate(llm, reqs, "sentiment")):
            s = P.parse_sentiment(texts[0] if texts else "")
            if s is None:
                self.stats["parse_failures"] += 1
                s = 0
            self.cache[key] = s
        out = np.full((ctx.market.n_industries, len(ctx.horizons)), np.nan)
        for i in industries:
            ks = ctx.retained(i, day)
            w = nw.importance[ks]
            out[i] = float(np.dot(w, [self.cache[(k, i)] for k in ks]) / w.sum())
        return out


class Pipe(FinanceMethod):
    """Experience-free LLM prediction over the aggregated news."""

    name = "Pipe"

    def step(self, day, llm):
        out, _ = self._predict(day, llm, self.ctx.industries_with_news(day), lambda i: ((), ()))
        return out


class PipeMemory(FinanceMethod):
    """Pipe with a task-agnostic memory from :mod:`engine.baselines` (Mem0 or MemRL).

    Retrieval runs per retained news item (query = its text); the union of hits
    (at most ``memory.max_memories``) goes into the shared prediction prompt.
    Each prediction (industry, day) is one trajectory: when its shortest
    horizon's return becomes known it becomes an
    :class:`~engine.baselines.common.Outcome` (task = industry, date, horizon
    and news titles; attempt = predicted sentiment and realised excess return;
    success = same sign; reward +1/-1) that the memory observes and applies
    (one new memory; MemRL's Q update of the memories it used).
    """

    def __init__(self, ctx: StreamContext, kind: str, cfg: MemoryConfig):
        super().__init__(ctx)
        self.kind = kind
        self.cfg = cfg
        if kind == "mem0":
            from engine.baselines.mem0 import Mem0Config

            mcfg = Mem0Config(top_k=cfg.mem0_top_k)
            if cfg.mem0_store == "library":
                from engine.baselines.mem0 import Mem0Memory

                self.memory = Mem0Memory(mcfg, embedder=ctx.embedder)
            else:
                from engine.finance.memories import ArrayMem0Memory

                self.memory = ArrayMem0Memory(mcfg, embedder=ctx.embedder)
            self.name = "Pipe+Mem0"
        elif kind == "memrl":
            from engine.baselines.memrl import MemRLConfig, MemRLMemory

            self.memory = MemRLMemory(MemRLConfig(select_k=cfg.memrl_select_k,
                                                  recall_k=max(5, cfg.memrl_select_k)), embedder=ctx.embedder)
            self.name = "Pipe+MemRL"
        else:
            raise ValueError(f"kind must be 'mem0' or 'memrl', got {kind!r}")
        self.ledger = PendingFeedback()

    def _observe(self, day: int, llm: LLMBackend) -> None:
        from engine.baselines.common import Attempt, Outcome

        ctx = self.ctx
        nw = ctx.market.news
        outcomes = []
        for e in self.ledger.due(day):
            realised = float(ctx.market.alpha[e.industry, e.day, e.hcol])
            r = feedback(e, ctx.market.alpha)
            titles = " | ".join(f'"{nw.title[k]}"' for k in ctx.retained(e.industry, e.day))
            task = f"On {ctx.date(e.day)}, {ctx.market.industries[e.industry]}, {e.horizon}-day horizon, news: {titles}"
            attempt = (f"predicted {e.horizon}d sentiment {e.sentiment:+.2f}; "
                       f"realised {e.horizon}d excess return {realised * 100:+.2f}%")
            ok = r > 0
            outcomes.append(Outcome(key=f"{self.name}:{e.day}:{e.industry}:{e.horizon}", seed=ctx.seed, task=task,
                                    attempts=(Attempt(attempt, ok),), success=ok, reward=1.0 if ok else -1.0,
                                    retrieved=e.eids))
        if outcomes:
            reader = self.memory.reader(self.memory.snapshot())
            self.stats["outcomes"] += len(outcomes)
            self.memory.apply(reader.observe(outcomes, llm))

    def step(self, day, llm):
        ctx = self.ctx
        self._observe(day, llm)
        industries = ctx.industries_with_news(day)
        reader = self.memory.reader(self.memory.snapshot())
        queries = [(i, k) for i in industries for k in ctx.retained(i, day)]
        hits = reader.retrieve([ctx.news_text(k) for _, k in queries]) if queries else []
        per_ind: dict[int, dict[int, str]] = defaultdict(dict)
        for (i, _), hs in zip(queries, hits):
            for h in hs:
                if len(per_ind[i]) < self.cfg.max_memories:
                    per_ind[i].setdefault(h.id, h.text)
        self.stats["memories_shown"] += sum(len(v) for v in per_ind.values())
        out, _ = self._predict(day, llm, industries, lambda i: ((), tuple(per_ind[i].values())))
        # one trajectory, one memory: written (and MemRL's Q updated) when the shortest horizon's return is known
        hc = int(np.argmin(ctx.horizons))
        for i in industries:
            self.ledger.add(i, day, hc, ctx.horizons[hc], float(out[i, hc]), tuple(per_ind[i].keys()))
        return out
