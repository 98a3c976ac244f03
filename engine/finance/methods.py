"""The compared methods on one news stream as round-loop methods: Baseline, Pipe, Pipe+Mem0, Pipe+MemRL, Pipe+FLEX.

(Pipe+ToE is in :mod:`engine.finance.toe`.) A round is one trading day; its
episodes are the day's predictions, one per industry (``episode_id = j * N +
i`` for evaluated day ``j`` and industry ``i``; an industry without retained
news predicts NaN and sends no prompt). Every episode of a round reads one
frozen snapshot (:mod:`engine.rounds`); at the barrier :meth:`apply` applies
the updates in episode order, exactly once.

All methods share :class:`StreamContext`: the news window (T-4..T), the
importance threshold (>= 8), the prediction prompt, the horizons and the
evaluation order (the paper's fairness controls). An episode sends its prompts
of one stage as one ``llm.generate`` call (with the other episodes of the same
call: a worker's share of the day). A completion that cannot be parsed counts
in the record's ``parse_failures`` and predicts 0 (neutral).

Delayed feedback goes through :class:`engine.store.FeedbackLedger` (ToE eq.
(7)): every memory method defers each prediction per horizon to the day that
horizon's return is known and learns from ``r = a_t * o_{t+h}`` (:func:`feedback`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np

from engine import codec
from engine.finance import prompts as P
from engine.finance.config import MemoryConfig, ProtocolConfig, SamplingConfig
from engine.finance.data import Market
from engine.llm import structured as S
from engine.llm.base import LLMBackend, Request, Usage, usage_fields
from engine.llm.structured import Constraint
from engine.rounds import Episode, EpisodeResult
from engine.store import FeedbackLedger

# per-episode counters every finance record carries (summed into summary.json's usage)
STAT_KEYS = ("prompts_sentiment", "prompts_route", "prompts_rerank", "prompts_merge", "prompts_update",
             "prompts_predict", "parse_failures", "proposals", "merges", "memories_shown", "outcomes",
             "experience_tokens", "experience_fitted",  # experience block tokens over the predict prompts; blocks cut
             # Pipe+ToE's retrieval (engine.finance.retrieval): (news, industry) items, those with >= 1 leaf
             # candidate, candidates; used experiences (one delayed update per horizon each) by where they came from
             "items", "retrieved_items", "candidates", "updates_retrieved", "updates_proposed")


class StreamContext:
    """What every method shares: the market, the retained news per (industry, day), prompt settings."""

    def __init__(self, market: Market, protocol: ProtocolConfig, sampling: SamplingConfig, seed: int, embedder):
        self.market = market
        self.protocol = protocol
        self.sampling = sampling
        self.seed = int(seed)
        self.embedder = embedder
        self.horizons = tuple(market.horizons)
        self._retained, self.dropped = retained_news(market, protocol)
        self._dates = [str(d) for d in market.dates]  # every prompt and record names a day: formatted once

    def retained(self, industry: int, day: int) -> list[int]:
        """News indices for ``industry`` on ``day``: published in [day - window, day], importance >= threshold."""
        return self._retained.get((industry, day), [])

    def industries_with_news(self, day: int) -> list[int]:
        return [i for i in range(self.market.n_industries) if (i, day) in self._retained]

    def request(self, prompt: str, episode: str, constraint: Constraint | None = None) -> Request:
        """One prompt; ``constraint`` is its answer shape (engine.llm.structured), enforced by backends that can."""
        return Request(prompt=prompt, temperature=self.sampling.temperature, max_tokens=self.sampling.max_tokens,
                       seed=self.seed, episode=episode, constraint=constraint)

    def date(self, day: int) -> str:
        return self._dates[day]

    def news_lines(self, ks: Sequence[int]) -> list[P.NewsLine]:
        nw = self.market.news
        return [P.NewsLine(self.date(int(nw.day[k])), float(nw.importance[k]), nw.title[k], nw.content[k]) for k in ks]

    def news_text(self, k: int) -> str:
        nw = self.market.news
        return f"{nw.title[k]}. {nw.content[k]}"


def retained_news(market: Market, protocol: ProtocolConfig) -> tuple[dict, dict]:
    """``(retained, dropped)``: news indices per (industry, day) published in [day - window, day] with
    importance >= the threshold, in publication order; with ``protocol.max_news`` > 0 only the most
    important ``max_news`` are kept and ``dropped[(industry, day)]`` counts the pairs left out."""
    nw = market.news
    found: dict[tuple[int, int], list[int]] = defaultdict(list)
    keep = np.flatnonzero(nw.importance >= protocol.min_importance)
    for k in keep.tolist():
        d0 = int(nw.day[k])
        for i in nw.industries[k]:
            for d in range(d0, min(market.n_days, d0 + protocol.window + 1)):
                found[(i, d)].append(k)
    retained, dropped = {}, {}
    for key, ks in found.items():
        if protocol.max_news and len(ks) > protocol.max_news:
            dropped[key] = len(ks) - protocol.max_news
            ks = sorted(ks, key=lambda k: (-nw.importance[k], -nw.day[k], k))[: protocol.max_news]
        retained[key] = sorted(ks, key=lambda k: (nw.day[k], k))
    return retained, dropped


def feedback(actions, outcomes) -> np.ndarray:
    """The feedback every memory method learns from: ``r = a_t * o_{t+h}`` per horizon (ToE eq. (7)).

    ``actions``: predicted sentiment per horizon; ``outcomes``: the realised excess return at that
    horizon. The store's ledger applies the same product (``FeedbackLedger.prepare``)."""
    return np.asarray(actions, dtype=np.float64) * np.asarray(outcomes, dtype=np.float64)


def stream_episodes(days: Sequence[int], n_industries: int, seed: int) -> list[Episode]:
    """The run's episodes: one per (evaluated day, industry); payload ``(j, day, industry)``."""
    return [Episode(j * n_industries + i, (j, int(d), i), int(seed)) for j, d in enumerate(days)
            for i in range(n_industries)]


class FinanceMethod:
    """Base of the finance methods (:class:`engine.rounds.Method`).

    Subclasses implement :meth:`_day` (one day's episodes against the snapshot)
    and :meth:`_apply_one` (one episode's updates at the barrier); the state a
    checkpoint keeps is :meth:`_state` (a dict of picklable values).
    """

    name = "method"

    def __init__(self, ctx: StreamContext, days: Sequence[int]):
        self.ctx = ctx
        self.days = np.asarray(days, dtype=np.int64)

    # --- the round contract -------------------------------------------------------------------
    def snapshot(self) -> dict[str, np.ndarray]:
        return {}

    def run_episodes(self, snapshot, episodes: Sequence[Episode], llm: LLMBackend) -> list[EpisodeResult]:
        by_day: dict[int, list[Episode]] = defaultdict(list)
        for e in episodes:
            by_day[e.payload[0]].append(e)
        out = []
        for j in sorted(by_day):
            out.extend(self._day(snapshot, j, by_day[j], llm))
        return out

    def apply(self, results: Sequence[EpisodeResult]) -> None:
        self._defer: list[tuple] = []  # ledger entries of the round, added in one batch (episode order)
        for r in results:
            self._apply_one(r)
        if self._defer:
            cols = [np.concatenate([np.atleast_1d(np.asarray(d[c])) for d in self._defer]) for c in range(5)]
            self._add_entries(*cols)
        if results:
            self._after_round(int(results[-1].record["day"]))

    def _add_entries(self, episodes, eids, horizons, due, actions) -> None:
        pass

    def _day(self, snapshot, j: int, episodes: list[Episode], llm: LLMBackend) -> list[EpisodeResult]:
        raise NotImplementedError  # pragma: no cover

    def _apply_one(self, result: EpisodeResult) -> None:
        pass

    def _after_round(self, j: int) -> None:
        pass

    def next_day(self, j: int) -> int | None:
        """The market day of the evaluated day after ``j`` (None after the last)."""
        return int(self.days[j + 1]) if j + 1 < self.days.size else None

    # --- checkpoints (engine.rounds.Checkpointable) -------------------------------------------
    def _state(self) -> dict:
        return {}

    def save_state(self, directory: Path) -> None:
        codec.write(Path(directory) / "finance_state.data", self._state())

    def load_state(self, directory: Path) -> None:
        for k, v in codec.read(Path(directory) / "finance_state.data", live=self._state()).items():
            setattr(self, k, v)

    # --- shared stages ------------------------------------------------------------------------
    def _record(self, episode: Episode, s: np.ndarray, stats: dict, llm) -> dict:
        j, day, i = episode.payload
        backend, model = getattr(llm, "answered_by", ("", ""))
        rec = {"day": int(j), "date": self.ctx.date(day), "industry": int(i),
               "s": np.asarray(s, np.float64).tolist(), "backend": backend, "model": model}
        for k in STAT_KEYS:
            rec[k] = int(stats[k]) if k in stats else 0
        if "usage" in stats:  # failed requests (llm.openai.on_error = "record"), prefix-cache hits
            rec.update(usage_fields(stats["usage"]))
        return rec

    @staticmethod
    def _generate(llm: LLMBackend, requests: list[Request], stage: str, owners: Sequence[dict]) -> list[list[str]]:
        """One batched call; ``owners[k]`` is the stats dict of the episode request ``k`` belongs to."""
        if not requests:
            return []
        key = f"prompts_{stage}"
        for st in owners:
            st[key] += 1
        responses = llm.generate(requests)
        for st, r in zip(owners, responses):
            if r.error or r.cached_tokens is not None:  # a failed request, prefix-cache hits: the episode's Usage
                st.setdefault("usage", Usage())._note(r)
        return [r.texts for r in responses]

    def _predict(self, day: int, llm: LLMBackend, industries: list[int], extra, stats: dict) -> dict[int, np.ndarray]:
        """Shared prediction stage: one PREDICT prompt per industry, one batch. ``extra(i)`` -> (experiences, memories)."""
        from engine.memory_budget import context_window, fit_items, room, token_counter

        ctx = self.ctx
        reqs = []
        fits = context_window(llm) is not None
        count = token_counter(llm)
        for i in industries:
            exps, mems = extra(i)
            args = (ctx.market.industries[i], ctx.date(day), ctx.horizons, ctx.news_lines(ctx.retained(i, day)))
            if not (exps or mems):  # no experience block: nothing to fit or count
                reqs.append(ctx.request(P.predict_prompt(*args), f"{self.name}:{day}:{i}", S.finance_predict(ctx.horizons)))
                continue
            prompt, bare = P.predict_prompts(*args, exps, mems)
            if fits:  # fit the context window: the memories go first, then the experiences
                limit = room(llm, count(bare), ctx.sampling.max_tokens)
                if count(prompt) - count(bare) > limit:
                    items = [("e", x) for x in exps] + [("m", m) for m in mems]
                    render = lambda its: P.predict_prompt(*args, [x for k, x in its if k == "e"],  # noqa: E731
                                                          [x for k, x in its if k == "m"])
                    prompt, _ = fit_items(items, render, limit + count(bare), count)
                    prompt = prompt or bare
                    stats[i]["experience_fitted"] += 1
            stats[i]["experience_tokens"] += count(prompt) - count(bare)
            reqs.append(ctx.request(prompt, f"{self.name}:{day}:{i}", S.finance_predict(ctx.horizons)))
        out = {}
        for i, texts in zip(industries, self._generate(llm, reqs, "predict", [stats[i] for i in industries])):
            pred = P.parse_prediction(texts[0] if texts else "", ctx.horizons)
            if pred is None:
                stats[i]["parse_failures"] += 1
                out[i] = np.zeros(len(ctx.horizons))
            else:
                out[i] = np.full(len(ctx.horizons), pred.sentiment, dtype=np.float64)  # a scalar or one per horizon
        return out

    def _nan(self) -> np.ndarray:
        return np.full(len(self.ctx.horizons), np.nan)


def stats_for(episodes) -> dict[int, dict]:
    """Per-industry prompt counters of a round's episodes (each method adds to them; they go into the records)."""
    return {e.payload[2]: defaultdict(int) for e in episodes}


class Baseline(FinanceMethod):
    """Per-news sentiment in {-1, 0, 1}, importance-weighted mean over the window (no experience).

    A news item's sentiment for an industry is asked once, the first day the
    item is in the industry's window, and kept (``sentiment[k, i]``, -2 = not asked).
    """

    name = "Baseline"
    UNKNOWN = -2

    def __init__(self, ctx: StreamContext, days: Sequence[int]):
        super().__init__(ctx, days)
        self.sentiment = np.full((len(ctx.market.news.title), ctx.market.n_industries), self.UNKNOWN, dtype=np.int64)

    def snapshot(self):
        return {"sentiment": self.sentiment}

    def _day(self, snapshot, j, episodes, llm):
        ctx = self.ctx
        nw = ctx.market.news
        day = int(self.days[j])
        cache = snapshot["sentiment"]
        stats = stats_for(episodes)
        todo = [(k, e.payload[2]) for e in episodes for k in ctx.retained(e.payload[2], day)
                if cache[k, e.payload[2]] == self.UNKNOWN]
        reqs = [ctx.request(P.sentiment_prompt(ctx.market.industries[i], nw.title[k], nw.content[k]),
                            f"{self.name}:{day}:{i}", S.FINANCE_SENTIMENT) for k, i in todo]
        new: dict[tuple[int, int], int] = {}
        for (k, i), texts in zip(todo, self._generate(llm, reqs, "sentiment", [stats[i] for _, i in todo])):
            s = P.parse_sentiment(texts[0] if texts else "")
            if s is None:
                stats[i]["parse_failures"] += 1
                s = 0
            new[(k, i)] = s
        out = []
        for e in episodes:
            i = e.payload[2]
            ks = ctx.retained(i, day)
            s = self._nan()
            if ks:
                w = nw.importance[ks]
                vals = [new[(k, i)] if (k, i) in new else int(cache[k, i]) for k in ks]
                s[:] = float(np.dot(w, vals) / w.sum())
            mine = [(k, v) for (k, ii), v in new.items() if ii == i]
            out.append(EpisodeResult(e.episode_id, self._record(e, s, stats[i], llm), {
                "news": np.array([k for k, _ in mine], dtype=np.int64),
                "sentiment": np.array([v for _, v in mine], dtype=np.int64)}))
        return out

    def _apply_one(self, r):
        self.sentiment[r.updates["news"], r.record["industry"]] = r.updates["sentiment"]

    def _state(self):
        return {"sentiment": self.sentiment}


class Pipe(FinanceMethod):
    """Experience-free LLM prediction over the aggregated news."""

    name = "Pipe"

    def _day(self, snapshot, j, episodes, llm):
        day = int(self.days[j])
        stats = stats_for(episodes)
        with_news = [e.payload[2] for e in episodes if self.ctx.retained(e.payload[2], day)]
        preds = self._predict(day, llm, with_news, lambda i: ((), ()), stats)
        return [EpisodeResult(e.episode_id, self._record(e, preds.get(e.payload[2], self._nan()),
                                                          stats[e.payload[2]], llm)) for e in episodes]


class PipeMemory(FinanceMethod):
    """Pipe with a task-agnostic memory from :mod:`engine.baselines` (Mem0 or MemRL).

    Retrieval runs per retained news item (query = its text); the union of hits
    (at most ``memory.max_memories``) goes into the shared prediction prompt.
    Each prediction (industry, day) is deferred in a
    :class:`~engine.store.FeedbackLedger` per horizon (one entry per memory
    shown, or one with memory id -1 when none was), due when that horizon's
    return is known, as Pipe+ToE's entries are. Each (prediction, horizon) then
    becomes an :class:`~engine.baselines.common.Outcome` (task = industry, date,
    horizon and news titles; attempt = predicted sentiment and realised excess
    return) with the shared feedback ``r = a_t * o_{t+h}`` (:func:`feedback`,
    ToE eq. (7)) as its reward and ``r > 0`` as its success, which the memory
    observes (the extraction prompt) and applies (one new memory; MemRL's Q
    update of the memories it used: by MemRL's design with r = +1 / -1 from
    the success, or the graded r with ``memory.memrl_graded_reward``).

    Round semantics: the outcomes due on day ``t+1`` are observed by the
    episodes of day ``t`` (each industry's own; the observation only reads the
    memory snapshot and the realised returns) and applied at day ``t``'s
    barrier, so day ``t+1``'s retrieval sees them, as in a day-by-day run.
    """

    def __init__(self, ctx: StreamContext, days: Sequence[int], kind: str, cfg: MemoryConfig):
        super().__init__(ctx, days)
        self.kind = kind
        self.cfg = cfg
        if kind == "mem0":
            from engine.baselines.mem0 import Mem0Config

            from engine.baselines.mem0 import Mem0Memory

            mcfg = Mem0Config(top_k=cfg.top_k)  # [memory] top_k: one budget for every memory method
            self.memory = Mem0Memory(mcfg, embedder=ctx.embedder)  # the real mem0 library
            self.name = "Pipe+Mem0"
        elif kind == "memrl":
            from engine.baselines.memrl import MemRLConfig, MemRLMemory

            self.memory = MemRLMemory(MemRLConfig(select_k=cfg.top_k, recall_k=max(5, cfg.top_k),
                                                  use_outcome_reward=cfg.memrl_graded_reward), embedder=ctx.embedder)
            self.name = "Pipe+MemRL"
        elif kind == "flex":  # seed 002 FLEX (engine/flex): TF-IDF over the news texts, domain "finance"
            from engine.flex.memory import FlexConfig, FlexMemory

            self.memory = FlexMemory(FlexConfig(k=min(5, max(3, cfg.top_k))), embedder=ctx.embedder, domain="finance")
            self.name = "Pipe+FLEX"
        else:
            raise ValueError(f"kind must be 'mem0', 'memrl' or 'flex', got {kind!r}")
        self.ledger = FeedbackLedger()

    def snapshot(self):
        snap = {f"mem_{k}": v for k, v in self.memory.snapshot().items()}
        snap.update({f"ledger_{k}": v for k, v in self.ledger.columns().items()})
        return snap

    def _outcomes(self, snapshot, j: int, industry: int):
        """The industry's ledger entries due by the next evaluated day, as memory outcomes (entry order)."""
        from engine.baselines.common import Attempt, Outcome

        nxt = self.next_day(j)
        if nxt is None:
            return np.zeros(0, np.int64), [], np.zeros(0)
        ctx = self.ctx
        nw = ctx.market.news
        n = ctx.market.n_industries
        ep, eid, due = snapshot["ledger_episode"], snapshot["ledger_eid"], snapshot["ledger_due"]
        rows = np.flatnonzero((snapshot["ledger_status"] == 0) & (due <= nxt) & (ep % n == industry))
        hz = snapshot["ledger_horizon"]
        outcomes, entries, rewards = [], [], []
        for e, hc in dict.fromkeys(zip(ep[rows].tolist(), hz[rows].tolist())):  # one outcome per (prediction, horizon)
            mine = rows[(ep[rows] == e) & (hz[rows] == hc)]
            j0, i = divmod(int(e), n)
            d0 = int(self.days[j0])
            h = ctx.horizons[hc]
            sentiment = float(snapshot["ledger_action"][mine[0]])
            realised = float(ctx.market.alpha[i, d0, hc])
            r = float(feedback(sentiment, realised))
            titles = " | ".join(f'"{nw.title[k]}"' for k in ctx.retained(i, d0))
            task = f"On {ctx.date(d0)}, {ctx.market.industries[i]}, {h}-day horizon, news: {titles}"
            attempt = (f"predicted {h}d sentiment {sentiment:+.2f}; "
                       f"realised {h}d excess return {realised * 100:+.2f}%")
            ok = r > 0
            outcomes.append(Outcome(key=f"{self.name}:{d0}:{i}:{h}", seed=ctx.seed, task=task,
                                    attempts=(Attempt(attempt, ok),), success=ok, reward=r,
                                    retrieved=tuple(int(x) for x in eid[mine] if x >= 0)))
            entries.extend(mine.tolist())
            rewards.extend([r] * mine.size)
        return np.asarray(entries, dtype=np.int64), outcomes, np.asarray(rewards, dtype=np.float64)

    def _day(self, snapshot, j, episodes, llm):
        ctx = self.ctx
        day = int(self.days[j])
        stats = stats_for(episodes)
        reader = self.memory.reader({k[4:]: v for k, v in snapshot.items() if k.startswith("mem_")})
        # observations due tomorrow: one batch for the call's episodes
        due = {e.payload[2]: self._outcomes(snapshot, j, e.payload[2]) for e in episodes}
        flat = [o for e in episodes for o in due[e.payload[2]][1]]
        observed = reader.observe(flat, llm) if flat else []
        # retrieval per retained news item, then the shared prediction
        industries = [e.payload[2] for e in episodes if ctx.retained(e.payload[2], day)]
        queries = [(i, k) for i in industries for k in ctx.retained(i, day)]
        hits = reader.retrieve([ctx.news_text(k) for _, k in queries]) if queries else []
        per_ind: dict[int, dict[int, str]] = defaultdict(dict)
        for (i, _), hs in zip(queries, hits):
            for h in hs:
                if len(per_ind[i]) < self.cfg.max_memories:
                    per_ind[i].setdefault(h.id, h.text)
        from engine.memory_budget import fit_items

        shown: dict[int, tuple[str, ...]] = {}
        for i in industries:  # the [memory] max_experience_tokens cap: the last (least relevant) memories go first
            texts = tuple(per_ind[i].values())
            _, kept = fit_items(texts, lambda ms: "\n".join(f"- {m}" for m in ms), self.cfg.max_experience_tokens)
            shown[i] = tuple(kept)
            per_ind[i] = dict(list(per_ind[i].items())[: len(kept)])
            stats[i]["memories_shown"] += len(per_ind[i])
        preds = self._predict(day, llm, industries, lambda i: ((), shown[i]), stats)
        out, at = [], 0
        for e in episodes:
            i = e.payload[2]
            entries, outs, rewards = due[i]
            stats[i]["outcomes"] += len(outs)
            ups = {"observed": entries, "observed_reward": rewards, "n_observations": np.array([len(outs)], dtype=np.int64)}
            for n_obs, u in enumerate(observed[at: at + len(outs)]):
                for k, v in u.items():
                    ups[f"obs{n_obs}.{k}"] = np.asarray(v)
            at += len(outs)
            s = preds.get(i, self._nan())
            ups["shown"] = np.array(list(per_ind[i].keys()), dtype=np.int64) if i in preds else np.zeros(0, np.int64)
            out.append(EpisodeResult(e.episode_id, self._record(e, s, stats[i], llm), ups))
        return out

    def _apply_one(self, r):
        u = r.updates
        n_obs = int(u["n_observations"][0])
        if n_obs:
            obs = []
            for n in range(n_obs):
                prefix = f"obs{n}."
                obs.append({k[len(prefix):]: v for k, v in u.items() if k.startswith(prefix)})
            entries = np.asarray(u["observed"], dtype=np.int64)
            self.ledger.mark_applied(entries, np.asarray(u["observed_reward"], dtype=np.float64))
            self.memory.apply(obs)
        s = r.record["s"]
        if np.isfinite(s[0]):  # one entry per (memory shown, horizon), due when the horizon's return is known
            shown = np.asarray(u["shown"], dtype=np.int64)
            eids = shown if shown.size else np.array([-1], dtype=np.int64)
            day = int(self.days[r.record["day"]])
            H, n = len(self.ctx.horizons), eids.size
            self._defer.append((np.full(n * H, r.episode_id), np.tile(eids, H), np.repeat(np.arange(H), n),
                                np.repeat(day + np.asarray(self.ctx.horizons, np.int64), n),
                                np.repeat(np.asarray(s, np.float64), n)))

    def _add_entries(self, episodes, eids, horizons, due, actions) -> None:
        self.ledger.add(episodes, eids, horizons, due, actions)

    def _state(self):
        return {"memory": self.memory, "ledger": self.ledger}
