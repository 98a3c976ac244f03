"""The finance task's simulated policy: a seeded, text-in text-out stand-in for an LLM on the finance prompts.

It is a **test harness, not a model**; ``backend = "simulated"`` on this task is
``SimulatedBackend(FinancePolicy(params))`` (:mod:`engine.llm.simulated`), which
labels every output *simulated*. It reads the prompts of :mod:`engine.finance.prompts` and the
synthetic news text of :mod:`engine.finance.synthetic` (through the channel
phrases of :mod:`engine.finance.channels`) and answers in the prompts' JSON
formats. Its behaviour is an explicit model:

* **reading**: a news item's channel and polarity come from the phrase in its
  text (misread, i.e. ignored, with ``p_misread``); its *reading* is
  ``PRIOR[channel] * polarity``. ``PRIOR`` is the policy's intuitive prior: it
  is RIGHT on the predictive channels (subsidy, earnings, trade, costs), WRONG
  on the misleading ones (pricing, capacity, probe: the intuitive reading has
  the opposite sign of the true effect) and IRRELEVANT on the noise channels
  (buzz, rating: no true effect). Experience therefore has something to correct.
* **PREDICT**: ``s_h = clip(tanh(gain * sum_j imp_j * reading_j * w_jh / sum_j imp_j) + N(0, noise), -1, 1)``
  where ``w_jh`` is what the context says about news ``j``'s reading at horizon
  ``h``: the mean reliability of the selected experience paths whose direction
  restates the news's channel (ToE: reliability is the activation strength,
  1 = neutral), or, from retrieved memories of past predictions that mention
  the same channel (at any horizon), ``2 (agree + 1) / (n + 2)`` where ``agree``
  counts memories whose reading matched the realised return; ``1`` without context.
* **SENTIMENT** (Baseline): ``sign(reading)``.
* **ROUTE**: the channel's factor (``p_misroute``: a random known factor).
* **RERANK**: selects the candidates whose direction restates the news's
  channel (``p_miss``: none; ``p_spurious``: one unrelated extra); when none is
  selected it proposes the channel's direction as the industry's analyst writes it
  (``"<industry>: <direction>"``), with one of a few qualifiers (near-duplicates for the merger).
* **MERGE**: merge when both directions restate the same channel (``p_merge_error``: the other answer);
  the merged text is that channel's direction (industry label, no qualifier).
* **MERGE FACTOR**: merge when one factor name is a prefix of the other (``p_merge_error``: the other answer).
* **UPDATE** (LLM-based updater, eq. (10)): ``q + step * sign(r_env) + bias + N(0, update_noise)``,
  i.e. it sees the sign of the feedback but not its size, with an optimistic bias.

Every completion is a deterministic function of (prompt, seed, sample index);
at temperature 0 the seed and sample index are ignored. A chat request is read
whole (every message's content, joined by newlines).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass

from engine.config import check
from engine.finance.channels import CHANNELS, DIRECTION_VARIANTS, direction_text, match_direction, match_phrase
from engine.llm.base import Request
from engine.llm.simulated import SimulatedBackend, SimulatedPolicy
from engine.llm.tokens import count_prompt_tokens

MODEL_NAME = "simulated-finance-v1"
PRIOR: dict[str, int] = {c.name: c.intuitive_sign for c in CHANNELS}

_CAND = re.compile(r"^\[(\d+)\]\s+(.*)$")
_NEWS = re.compile(r"^\[(\d+)\]\s+\(([^,]*),\s*importance\s+([0-9.]+)\)\s+(.*)$")
_EXP = re.compile(r"^\[news (\d+)\]\s+(.*?)\s+\|\s+reliability\s+(.*)$")
_REL = re.compile(r"(\d+)d=([0-9.]+)")
_MEM_H = re.compile(r"realised (\d+)d excess return ([+-]?[0-9.]+)%")
_QUOTED = re.compile(r'"([^"]+)"')
_UPD = re.compile(r"^\[(\d+)\]\s+.*\|\s+([0-9.]+)$")


@dataclass(frozen=True)
class SimulatedFinanceParams:
    p_misread: float = 0.05
    p_misroute: float = 0.05
    p_miss: float = 0.05
    p_spurious: float = 0.05
    p_merge_error: float = 0.02
    gain: float = 1.0
    noise: float = 0.15
    update_step: float = 0.15
    update_bias: float = 0.03
    update_noise: float = 0.1

    def __post_init__(self):
        for name in ("p_misread", "p_misroute", "p_miss", "p_spurious", "p_merge_error"):
            v = getattr(self, name)
            check(0.0 <= v <= 1.0, f"simulated.{name} must be in [0, 1], got {v}")
        for name in ("gain", "noise", "update_step", "update_noise"):
            v = getattr(self, name)
            check(v >= 0.0, f"simulated.{name} must be >= 0, got {v}")


def _read_whole(request: Request) -> str:
    if request.prompt is not None:
        return request.prompt
    return "\n".join(str(m.get("content", "")) for m in request.messages)


class FinancePolicy(SimulatedPolicy):
    """The finance prompts' simulated policy (see the module docstring for its model)."""

    model = MODEL_NAME

    def __init__(self, params: SimulatedFinanceParams | None = None):
        self.params = params or SimulatedFinanceParams()

    # ------------------------------------------------------------------ SimulatedPolicy
    def respond(self, request: Request, seed: int, index: int) -> str:
        prompt = _read_whole(request)
        return self.answer(prompt, _rng(prompt, seed, index, request.temperature))

    def prompt_tokens(self, request: Request) -> int:
        return count_prompt_tokens(_read_whole(request))  # the policy reads a chat whole

    def answer(self, prompt: str, rng: random.Random) -> str:
        first = prompt.lstrip().split("\n", 1)[0].strip()
        kind = first.split(":", 1)[1].strip() if first.startswith("### TASK:") else ""
        handler = {
            "ROUTE": self._route, "RERANK": self._rerank, "MERGE": self._merge, "MERGE FACTOR": self._merge_factor,
            "PREDICT": self._predict, "SENTIMENT": self._sentiment, "UPDATE": self._update,
        }.get(kind)
        return "" if handler is None else handler(prompt.split("\n"), rng)

    # ------------------------------------------------------------------ readings
    def _read(self, text: str, rng: random.Random) -> tuple[int, int] | None:
        m = match_phrase(text)
        if m is None or rng.random() < self.params.p_misread:
            return None
        return m

    @staticmethod
    def _field(lines: list[str], prefix: str) -> str:
        for line in lines:
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        return ""

    def _route(self, lines, rng):
        industry = self._field(lines, "Industry:")
        known = [f.strip() for f in self._field(lines, "Known factors:").split(";") if f.strip()]
        m = self._read(self._field(lines, "News title:") + " " + self._field(lines, "News content:"), rng)
        if m is None or rng.random() < self.params.p_misroute:
            pool = known or sorted({c.factor for c in CHANNELS})
            factor = pool[rng.randrange(len(pool))]
        else:
            factor = CHANNELS[m[0]].factor
        return json.dumps({"industry": industry, "factor": factor})

    def _rerank(self, lines, rng):
        m = self._read(self._field(lines, "News title:") + " " + self._field(lines, "News content:"), rng)
        cands = []
        on = False
        for line in lines:
            if line.startswith("Candidate analysis directions"):
                on = True
                continue
            if on:
                mm = _CAND.match(line)
                if not mm:
                    break
                cands.append((int(mm.group(1)), mm.group(2)))
        if m is None:
            return json.dumps({"selected": [], "new_direction": None})
        ch = m[0]
        sel = [e for e, t in cands if match_direction(t) == ch]
        if sel and rng.random() < self.params.p_miss:
            sel = []
        others = [e for e, t in cands if e not in sel]
        if sel and others and rng.random() < self.params.p_spurious:
            sel.append(others[rng.randrange(len(others))])
        new = None
        if not sel:
            industry = self._field(lines, "Reasoning path so far:").split(" > ")[0].strip()
            new = direction_text(CHANNELS[ch], industry) + DIRECTION_VARIANTS[rng.randrange(len(DIRECTION_VARIANTS))]
        return json.dumps({"selected": sel, "new_direction": new})

    def _merge(self, lines, rng):
        a = self._field(lines, "Existing direction:")
        b = self._field(lines, "New direction:")
        ca, cb = match_direction(a), match_direction(b)
        same = ca is not None and ca == cb
        if rng.random() < self.params.p_merge_error:
            same = not same
        # the merged text: the shared channel's direction without a qualifier, else the existing text
        industry = self._field(lines, "Path:").split(" > ")[0].strip()
        text = direction_text(CHANNELS[ca], industry) if same and ca is not None and ca == cb else a
        return json.dumps({"merge": same, "text": text})

    def _merge_factor(self, lines, rng):
        a = self._field(lines, "Known factor:").lower()
        b = self._field(lines, "New factor:").lower()
        same = bool(a) and (a.startswith(b) or b.startswith(a))
        if rng.random() < self.params.p_merge_error:
            same = not same
        return json.dumps({"merge": same})

    def _sentiment(self, lines, rng):
        m = self._read(self._field(lines, "News title:") + " " + self._field(lines, "News content:"), rng)
        s = 0 if m is None else PRIOR[CHANNELS[m[0]].name] * m[1]
        return json.dumps({"sentiment": int(s)})

    def _predict(self, lines, rng):
        horizons = [int(x) for x in re.findall(r"\d+", self._field(lines, "Horizons (trading days):"))]
        news = {}
        for line in lines:
            mm = _NEWS.match(line)
            if mm:
                news[int(mm.group(1))] = (float(mm.group(3)), self._read(mm.group(4), rng))
        # experience: per news, reliabilities of the directions that restate its channel
        exp: dict[int, list[dict[int, float]]] = {}
        for line in lines:
            mm = _EXP.match(line)
            if not mm:
                continue
            k = int(mm.group(1))
            direction = mm.group(2).split(" > ")[-1]
            rd = news.get(k, (0, None))[1]
            if rd is None or match_direction(direction) != rd[0]:
                continue
            exp.setdefault(k, []).append({int(h): float(q) for h, q in _REL.findall(mm.group(3))})
        # memories: per channel (any horizon), how often the intuitive reading matched the realised return
        mem: dict[int, list[int]] = {}
        for line in lines:
            if not line.startswith("- "):
                continue
            mh = _MEM_H.search(line)
            if not mh:
                continue
            realised = float(mh.group(2))
            for title in _QUOTED.findall(line):
                m2 = match_phrase(title)
                if m2 is None or realised == 0:
                    continue
                reading = PRIOR[CHANNELS[m2[0]].name] * m2[1]
                stat = mem.setdefault(m2[0], [0, 0])
                stat[0] += int(reading * realised > 0)
                stat[1] += 1
        sent = {}
        total = sum(imp for imp, _ in news.values()) or 1.0
        raw_abs = 0.0
        for h in horizons:
            acc = 0.0
            for k, (imp, rd) in news.items():
                if rd is None:
                    continue
                reading = PRIOR[CHANNELS[rd[0]].name] * rd[1]
                w = 1.0
                if exp.get(k):
                    qs = [e[h] for e in exp[k] if h in e]
                    if qs:
                        w = sum(qs) / len(qs)
                elif rd[0] in mem:
                    agree, n = mem[rd[0]]
                    w = 2.0 * (agree + 1) / (n + 2)
                acc += imp * reading * w
            raw = acc / total
            raw_abs = max(raw_abs, abs(raw))
            s = math.tanh(self.params.gain * raw) + rng.gauss(0.0, self.params.noise)
            sent[str(h)] = round(max(-1.0, min(1.0, s)), 4)
        key = next((CHANNELS[rd[0]].factor for _, rd in news.values() if rd is not None), "none")
        return json.dumps({
            "reasoning": f"simulated policy: {sum(rd is not None for _, rd in news.values())} readable news items",
            "key_factor": key,
            "sentiment": sent,
            "confidence": round(min(1.0, 0.3 + 0.5 * raw_abs), 3),
        })

    def _update(self, lines, rng):
        mr = re.search(r"r_env = prediction x return = ([+-]?[0-9.eE+-]+)", "\n".join(lines))
        r = float(mr.group(1)) if mr else 0.0
        sign = (r > 0) - (r < 0)
        ups = []
        for line in lines:
            mm = _UPD.match(line)
            if mm:
                q = float(mm.group(2))
                p = self.params
                new = q + p.update_step * sign + p.update_bias + rng.gauss(0.0, p.update_noise)
                ups.append({"eid": int(mm.group(1)), "reliability": round(min(2.0, max(0.0, new)), 4)})
        return json.dumps({"updates": ups})


def _rng(prompt: str, seed: int, sample: int, temperature: float) -> random.Random:
    if temperature == 0:
        seed, sample = 0, 0
    h = hashlib.blake2b(f"{seed}\x00{sample}\x00{prompt}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(h, "little"))


def policy_for(llm_cfg) -> FinancePolicy:
    """The policy of ``engine.finance.task.TASK.policy``: default parameters (the runner passes
    ``FinancePolicy(cfg.simulated_finance)``, the config's ``[simulated_finance]`` table)."""
    return FinancePolicy()


def simulated_backend(seed: int = 0, params: SimulatedFinanceParams | None = None) -> SimulatedBackend:
    """``SimulatedBackend(FinancePolicy(params), seed)``: the simulated backend of this task, for tests and benchmarks."""
    return SimulatedBackend(FinancePolicy(params), seed=seed)
