"""What the five document memories of the ForeDreamer paper share (HippoRAG 2, MemoryOS, A-MEM, LightMem, LangMem).

ForeDreamer (seed 001, section 4, Table 1, Appendix C.2) applies these memory
systems "to process the evidence retrieved by the search module before
producing the final forecast". Each is re-implemented in its own module
(:mod:`engine.baselines.hipporag`, ``memoryos``, ``amem``, ``lightmem``,
``langmem``; sources and differences in docs/forecast_baselines.md) with one
task-agnostic interface, text in and text out:

* ``memory.add(texts, mode=..., key=..., seed=..., when=...)`` returns a **job**:
  a generator that yields lists of :class:`~engine.llm.base.Request` and is
  sent back the completion texts, in order; its return value is a summary dict.
  ``mode = "rule"`` never yields (the memory answers its own prompts with the
  deterministic rules below). :func:`drive` runs the jobs of many memories in
  lockstep, so each step of every memory goes out as ONE batched LLM call.
* ``memory.retrieve(query) -> list[Hit]`` (best first; ``top_k`` of the
  memory's config is its one budget key) and ``memory.format(hits)``.
* ``memory.texts()``: everything the memory holds now (tests, audits).

Rules (``mode = "rule"``, the simulated backend) are functions of the prompt's
payload only; :func:`engine.baselines.paper_simulated.simulated_reply` gives the
same answers to the rendered prompts, so a simulated policy answers them too (``extraction = "llm"`` under
the simulated backend then stores what ``"rule"`` stores).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Generator, Iterable

from engine.baselines.common import first_text
from engine.llm.base import Request

Job = Generator[list[Request], list[str], dict]

# A small English stop list for the rule keyword extractor (the rules only; no original uses it).
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here hers
    him his how i if in into is it its itself just me more most my no nor not now of off on once only or other our out
    over own same she should so some such than that the their them then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your said says per
    via new one two""".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'\-]+|\d[\d.,%]*")
_SENT = re.compile(r"(?<=[.!?])\s+")
_CAP = re.compile(r"\b(?:[A-Z][A-Za-z0-9&'\-]*|\d[\d.,%]*)(?:\s+(?:[A-Z][A-Za-z0-9&'\-]*|\d[\d.,%]*))*")


def drive(jobs: Iterable[Job], llm) -> list[dict]:
    """Run jobs in lockstep: every step's requests of all jobs go to ``llm`` as ONE batched call.

    Returns each job's return value (its summary dict), in job order.
    """
    jobs = list(jobs)
    results: list[dict] = [{} for _ in jobs]
    active: list[tuple[int, list[Request]]] = []
    for i, job in enumerate(jobs):
        try:
            active.append((i, list(next(job))))
        except StopIteration as stop:
            results[i] = stop.value or {}
    while active:
        flat = [r for _, rs in active for r in rs]
        responses = llm.generate(flat) if flat else []
        nxt, at = [], 0
        for i, rs in active:
            texts = [first_text(responses[at + j].texts) for j in range(len(rs))]
            at += len(rs)
            try:
                nxt.append((i, list(jobs[i].send(texts))))
            except StopIteration as stop:
                results[i] = stop.value or {}
        active = nxt
    return results


def run_rule(job: Job) -> dict:
    """Run a rule-mode job (it must not ask for completions)."""
    try:
        next(job)
    except StopIteration as stop:
        return stop.value or {}
    raise AssertionError("a rule-mode job asked the LLM")


# --- deterministic rules shared by the five (simulated backend) -------------------------------


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def keywords(text: str, n: int = 3) -> list[str]:
    """The ``n`` most frequent non-stop words (lower case, length >= 3), ties by first occurrence."""
    toks = [w.lower().strip("'-") for w in words(text)]
    toks = [w for w in toks if len(w) >= 3 and w not in STOPWORDS and not w[0].isdigit()]
    counts = Counter(toks)
    first = {w: i for i, w in reversed(list(enumerate(toks)))}
    return sorted(counts, key=lambda w: (-counts[w], first[w]))[:n]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(" ".join(str(text).split())) if s.strip()]


def first_sentence(text: str, limit: int = 200) -> str:
    sents = sentences(text)
    s = sents[0] if sents else ""
    return s if len(s) <= limit else s[: limit - 3] + "..."


def capitalised_phrases(text: str) -> list[str]:
    """Runs of capitalised words or numbers, in order, de-duplicated (a rule NER for the simulated backend)."""
    out: list[str] = []
    for sent in sentences(text):
        for m in _CAP.finditer(sent):
            phrase = m.group(0).strip(" .,%")
            toks = phrase.split()
            while toks and toks[0].lower() in STOPWORDS:  # "The Fed" -> "Fed"
                toks = toks[1:]
            phrase = " ".join(toks)
            if len(phrase) >= 2 and phrase not in out:
                out.append(phrase)
    return out


def normalise(text: str) -> str:
    return " ".join(str(text).lower().split())
