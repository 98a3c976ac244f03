"""The forecasting tasks' simulated policy: a deterministic test harness, never a model.

``backend = "simulated"`` on Prophet Arena and FutureX is
``SimulatedBackend(ForecastPolicy())`` (:mod:`engine.llm.simulated`), which labels
every output *simulated*. Its draws are keyed on the run's seed (``llm.seed``)
and the conversation; a request's own seed (the agent's turn number) is not
used, since the turn is already in the conversation.

It reads the prompts the engine writes and answers in the expected formats:
the main agent searches on its first turn and then returns Prophet Arena JSON
equal to the market's mid price plus seeded noise (smaller noise once it has
processed evidence, and smaller again per Experience Bank entry, so the
evolution tracks have a signal to find); the subagent calls its guide's tools in
order; the evolution roles (editor, critic, reuse selector, generator,
classifier) return well-formed JSON or code blocks. ``malformed_rate`` makes a
share of final answers unusable, to exercise the repair/fallback path.

FutureX prompts (SIMULATED, a keyword reader, not a model): the agent searches
on its first turn when it may, then answers in ``\\boxed{}`` from the evidence
it was shown (tool results, or the prompt's ``Evidence:`` section): single
choice = the option whose text is mentioned most often, multi choice = every
option mentioned, ranking = options in order of first mention, numerical = the
most frequent number (first mentioned on ties; dates, years, URLs and item tags
ignored). Options the evidence never mentions, and questions without evidence,
get a seeded guess. The answer type is read from the answer requirements.

The prompts of the paper's memory baselines (HippoRAG 2 OpenIE, MemoryOS
multi-summary, A-MEM analysis and evolution, LightMem extraction and update,
LangMem's manager) get the baselines' own rule answers
(:func:`engine.baselines.paper_simulated.simulated_reply`), so ``extraction = "llm"``
under this policy stores what ``"rule"`` stores, through the LLM path.
"""

from __future__ import annotations

import hashlib
import json
import random
import re

from engine.llm.base import Request
from engine.llm.simulated import SimulatedBackend, SimulatedPolicy

MODEL_NAME = "simulated-forecaster"

_MARKET = re.compile(r"^- (.+?): yes_bid ([0-9.]+), yes_ask ([0-9.]+) \(cents\)(?:;[^\n]*)?$", re.M)
_NOQUOTE = re.compile(r"^- (.+?): no quote$", re.M)
_FX_OPTION = re.compile(r"^\s*\(?([A-Z])[.):]\s+(.+?)\s*$", re.M)
_FX_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.]*\d)")


def _rng(*parts) -> random.Random:
    return random.Random(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest())


NEW_TOOL_TEMPLATE = '''#!/usr/bin/env python3
import json
from pathlib import Path
from typing import Any, Final

TOOL_NAME: Final[str] = "{name}"
TOOL_SPEC: Final[dict[str, Any]] = {{
    "type": "function",
    "function": {{
        "name": TOOL_NAME,
        "description": "Write the first {n} characters of the item content with its source header to the output file.",
        "parameters": {{"type": "object", "properties": {{}}, "additionalProperties": False}},
    }},
}}


def build_runner_kwargs(arguments, config, runtime_context):
    kw = {{k: str(getattr(runtime_context, k, "") or "") for k in ("item_dir", "input_filename", "output_filename")}}
    for k, v in kw.items():
        if not v:
            raise ValueError(f"{{TOOL_NAME}} requires runtime {{k}}")
    return kw


def run_tool(*, item_dir, input_filename, output_filename):
    data = json.loads((Path(item_dir) / input_filename).read_text(encoding="utf-8"))
    item = data.get("item") or {{}}
    text = "[" + str(item.get("published_date", "")) + "] " + str(item.get("title", "")) + "\\n" + str(item.get("content", ""))[:{n}]
    (Path(item_dir) / output_filename).write_text(text, encoding="utf-8")
    return "wrote " + output_filename


__all__ = ["TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool"]
'''


def _messages(request: Request) -> list[dict]:
    return list(request.messages) if request.messages is not None else [{"role": "user", "content": request.prompt}]


class ForecastPolicy(SimulatedPolicy):
    """Deterministic stand-in for an LLM in ForeDreamer tests and demos (outputs are simulated).

    Stateful in one way: the generator numbers the MemTools it writes (``tool_sim_header_slice_<seed>_<k>``).
    """

    model = MODEL_NAME

    def __init__(self, noise: float = 0.25, evidence_factor: float = 0.6, bank_factor: float = 0.8,
                 malformed_rate: float = 0.0):
        self.noise = noise
        self.evidence_factor = evidence_factor
        self.bank_factor = bank_factor
        self.malformed_rate = malformed_rate
        self.calls = 0
        self._new_tools = 0

    # ------------------------------------------------------------------ SimulatedPolicy
    def respond(self, request: Request, seed: int, index: int) -> str:
        self.calls += 1
        return self._answer(_messages(request), seed, request.seed)

    def seed_of(self, request: Request, default: int) -> int:
        return default  # the run's seed; the request's (the turn number) is in the conversation already

    def limit(self, text: str, request: Request) -> tuple[str, str, int]:
        return text, "stop", max(1, len(text) // 4)  # answers are written whole; ~4 characters a token

    def prompt_tokens(self, request: Request) -> int:
        return sum(len(m["content"]) for m in _messages(request)) // 4

    # ------------------------------------------------------------------ roles
    def _answer(self, msgs: list[dict], seed: int, request_seed: int | None = None) -> str:
        system = msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else ""
        first_user = next((m["content"] for m in msgs if m["role"] == "user"), "")
        from engine.baselines.paper_simulated import simulated_reply  # HippoRAG 2 / MemoryOS / A-MEM / LightMem / LangMem prompts

        memory_answer = simulated_reply(msgs)
        if memory_answer is not None:
            return memory_answer
        if system.startswith("You are a data-processing subagent"):
            return self._subagent(system, msgs)
        if "Experience Bank should change" in first_user:
            return json.dumps({"suggestions": [
                {"priority": 1, "operation": "add", "target_experience_id": "",
                 "new_text": "Anchor on the market's implied probability and move away from it only on direct evidence.",
                 "analysis": "simulated", "generality_assessment": "simulated", "expected_benefit": "simulated"},
                {"priority": 2, "operation": "add", "target_experience_id": "",
                 "new_text": "Check the resolution rule's exact threshold before assigning probabilities.",
                 "analysis": "simulated", "generality_assessment": "simulated", "expected_benefit": "simulated"}]})
        if first_user.startswith("You judge whether a MemGuide"):
            return json.dumps({"should_evolve": True, "analysis": "simulated critic",
                               "design_requirement": "Keep the source header and a longer slice of the content."})
        if "Intermediate step before generation" in first_user:
            names = re.findall(r'"name": "(tool_[A-Za-z0-9_]+)"', first_user)
            uniq = list(dict.fromkeys(names))[:2]
            return json.dumps({"candidate_tool_names": uniq, "analysis": "simulated reuse"})
        if "Final generation step" in first_user or "Exploration generation step" in first_user:
            return self._generator(first_user, seed, request_seed)
        if first_user.startswith("You classify one new MemGuide"):
            files = re.findall(r'"guide_file": "([^"]+)"', first_user)
            return json.dumps({"matched_representative_guide_file": files[0] if files and len(files) > 1 else None,
                               "analysis": "simulated classifier"})
        if "Event to predict:" in first_user:
            return self._futurex(system, msgs, first_user, seed)
        if "Market context" in first_user:
            return self._forecast(system, msgs, first_user, seed)
        return "I cannot help with that."

    def _subagent(self, system: str, msgs: list[dict]) -> str:
        names = list(dict.fromkeys(re.findall(r'"name": "([A-Za-z0-9_]+)"', system)))
        specs_required = set(re.findall(r'"name": "([A-Za-z0-9_]+)"[^\n]*"required": \[', system))
        usable = [n for n in names if n not in specs_required]
        step = sum(1 for m in msgs if m["role"] == "assistant")
        if step >= len(usable):
            return "Done."
        return f'<tool_call>{json.dumps({"name": usable[step], "arguments": {}})}</tool_call>'

    def _forecast(self, system: str, msgs: list[dict], prompt: str, seed: int) -> str:
        final = any(m["role"] == "user" and m["content"].startswith("This is your last allowed turn") for m in msgs)
        searched = any(m["role"] == "user" and m["content"].startswith("Tool result (web_search") for m in msgs)
        can_search = "web_search_and_process tool" in system
        question = prompt.split("Question:\n", 1)[-1].split("\n", 1)[0]
        if can_search and not final and not searched:
            return f'<tool_call>{json.dumps({"name": "web_search_and_process", "arguments": {"query": question}})}</tool_call>'
        rng = _rng(seed, prompt[:2000])
        if rng.random() < self.malformed_rate:
            return "I think the first outcome is likely."  # unusable on purpose
        evidence = searched or "Evidence:\n(use the search tool" not in prompt
        n_bank = prompt.count("\n- [exp_")
        scale = self.noise * (self.evidence_factor if evidence else 1.0) * (self.bank_factor ** n_bank)
        probs = {}
        for name, bid, ask in _MARKET.findall(prompt):
            mid = (float(bid) + float(ask)) / 200.0
            probs[name] = round(min(1.0, max(0.0, mid + rng.gauss(0.0, scale))), 4)
        for name in _NOQUOTE.findall(prompt):
            probs[name] = round(min(1.0, max(0.0, 0.5 + rng.gauss(0.0, scale))), 4)
        return json.dumps({"rationale": "simulated forecast", "probabilities": probs})

    def _futurex(self, system: str, msgs: list[dict], prompt: str, seed: int) -> str:
        """FutureX: search first when allowed, then a SIMULATED keyword reading of the evidence (see module doc)."""
        final = any(m["role"] == "user" and m["content"].startswith("This is your last allowed turn") for m in msgs)
        results = [m["content"] for m in msgs if m["role"] == "user" and m["content"].startswith("Tool result (web_search")]
        can_search = "web_search_and_process tool" in system
        event = prompt.split("Event to predict:\n", 1)[-1].split("\n\nFinal answer requirements:", 1)[0]
        if "\n\nEvidence:\n" in event:
            event, inline = event.split("\n\nEvidence:\n", 1)
        else:
            inline = ""
        if can_search and not final and not results:
            query = event.split("\n", 1)[0]
            return f'<tool_call>{json.dumps({"name": "web_search_and_process", "arguments": {"query": query}})}</tool_call>'
        rng = _rng(seed, prompt[:2000])
        if rng.random() < self.malformed_rate:
            return "Rationale: simulated, no boxed answer on purpose."
        evidence = "\n".join([inline] + [r.split("\n", 1)[-1] for r in results])
        evidence = re.sub(r"https?://\S+|\[[^\]]*\]|\d{4}-\d\d-\d\d\S*|\b(?:19|20)\d\d\b", " ", evidence)
        evidence = evidence.lower()
        reqs = prompt.split("Final answer requirements:\n", 1)[-1].split("\n\n", 1)[0].lower()
        options = [(letter, text.lower()) for letter, text in _FX_OPTION.findall(event)]
        letters = [l for l, _ in options]
        if not options:  # numerical (or open): the most frequent number in the evidence, first on ties
            nums = _FX_NUMBER.findall(evidence)
            if nums:
                counts = {n: nums.count(n) for n in nums}
                ans = max(nums, key=lambda n: (counts[n], -nums.index(n)))
            else:
                ans = str(rng.randint(0, 100))
            return f"Rationale: simulated keyword reading.\n\n\\boxed{{{ans}}}"
        counts = {l: evidence.count(t) for l, t in options}
        first = {l: evidence.find(t) for l, t in options}
        if "rank" in reqs:
            seen = sorted((l for l in letters if first[l] >= 0), key=lambda l: first[l])
            rest = [l for l in letters if first[l] < 0]
            rng.shuffle(rest)
            ans = ", ".join(seen + rest)
        elif "all options that apply" in reqs or "one or more" in reqs or "select all" in reqs:
            picked = [l for l in letters if counts[l] > 0] or [rng.choice(letters)]
            ans = ", ".join(picked)
        else:
            best = max(counts.values())
            tied = [l for l in letters if counts[l] == best]
            ans = tied[0] if len(tied) == 1 else rng.choice(tied)
        return f"Rationale: simulated keyword reading.\n\n\\boxed{{{ans}}}"

    def _generator(self, prompt: str, seed: int, request_seed: int | None = None) -> str:
        # the new tool is numbered by the request's seed, not by a count of earlier calls: the answer
        # depends on the request alone, so a resumed run or another worker writes the same tool
        self._new_tools += 1
        k = self._new_tools if request_seed is None else int(request_seed)
        reuse = list(dict.fromkeys(re.findall(r'"name": "(tool_[A-Za-z0-9_]+)"', prompt.split("Current design requirement", 1)[-1])))
        name = f"tool_sim_header_slice_{seed}_{k}"
        guide = {"guide_name": f"sim_guide_{k}",
                 "prompt": "Work only in the current item_dir with the listed MemTools; never invent content; "
                           f"call {name} to write the output file and stop once it exists.",
                 "tool_names": reuse[:1] + [name]}
        code = NEW_TOOL_TEMPLATE.format(name=name, n=800 + 200 * (1 + k % 8))
        return f"```json\n{json.dumps(guide, indent=1)}\n```\n\n```python\n{code}```\n"


def policy_for(llm_cfg) -> ForecastPolicy:
    """The policy of ``ForecastTask.policy (engine.forecast.task)`` (default noise model)."""
    return ForecastPolicy()


def simulated_backend(seed: int = 0, **params) -> SimulatedBackend:
    """``SimulatedBackend(ForecastPolicy(**params), seed)``: the simulated backend of these tasks, for tests."""
    return SimulatedBackend(ForecastPolicy(**params), seed=seed)
