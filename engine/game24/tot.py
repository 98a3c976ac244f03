"""Tree-of-Thoughts BFS on Game of 24 (Yao et al. 2023), batched across episodes.

The search is the reference code's ``solve`` (``tree-of-thought-llm``,
``src/tot/methods/bfs.py`` with ``src/tot/tasks/game24.py``) for
``method_generate="propose"``, ``method_evaluate="value"``,
``method_select="greedy"``, ``task.steps = 4``, ``n_evaluate_sample=3`` and
``n_select_sample=b=5``. A thought ``y`` is the text of the lines taken so far,
each followed by ``"\\n"``; ``x`` is the puzzle as written.

1. **propose** (``get_proposals``): every frontier thought gets one request
   (n=1). Its numbers are :func:`current_numbers` of ``y`` (of ``x`` when ``y``
   is empty): the model's own ``left:`` text of the last line, as written. When
   those numbers are exactly ``"24"`` the request is the chain-of-thought
   answer prompt with the steps so far (``propose_prompt_wrap``), else the
   propose prompt on those numbers. The completion is split at ``"\\n"``; EVERY
   piece, as written, makes one new thought ``y + piece + "\\n"``.
2. **value** (``get_values``/``get_value``): a thought equal to an earlier one
   of the same step gets 0; otherwise its value prompt is the last-step prompt
   when its last line has no ``"left: "`` (the answer, lower-cased, ``answer: ``
   removed), else the value prompt on its current numbers; a prompt already in
   the value cache takes the cached value without a call; else one request with
   n=3 whose value is :func:`value_outputs_unwrap` (sure 20, likely 1,
   impossible 0.001 per sample whose last line is exactly that word; 0 for a
   thought of four lines without ``answer``), then cached under the prompt.
3. **select** (greedy): the b thoughts with the highest value, stable order
   among ties, form the next frontier. After the 4th step the frontier holds
   the outputs, best first; the exact verifier (ToE eq. (A2)) marks each.

Engine options (``[tot]``), each named in the run's ``summary.json``:

* ``value_cache = "episode"`` (default): one cache per episode, so an episode's
  calls never depend on the stream before it; ``"run"``: the reference's one
  cache for the whole run (``task.value_cache``), kept between rounds in the
  method's snapshot (with ``round_size = 1`` exactly the reference's sequential
  cache; with larger rounds an episode sees the entries of earlier rounds). Only
  test-split episodes add to it, so it starts empty at the test split whatever a
  method's warm-up did (the reference ToT ran the test split alone); warm-up
  episodes cache within themselves only.
  Under ``"run"`` a value prompt's samples are drawn from (run seed, prompt)
  only, so which episode asked it first never changes a value, only who paid.
* ``drop_invalid_steps = true``: a proposal line the exact verifier rejects
  (and, from the answer prompt, a blank line) makes no thought. Off by default;
  the report labels rows made with it.

The one departure from the reference: the engine's prompts refuse an empty
number list, so a thought whose numbers text is blank (the model wrote
``(left: )``, or an empty first line) is valued 0 and proposes nothing without
a call, where the reference would send a prompt with an empty input.

Batching: at each step, ALL propose prompts of ALL episodes in flight go to
``llm.generate`` as one list, then all value prompts as one list. Every request
carries ``episode=str(episode_id)`` (per-episode accounting) and a seed derived
only from the episode seed (or, for ``value_cache="run"``, the run seed), the
step, the role and the prompt text, so an episode's result never depends on
which other episodes share the batch.

Experience enters only through :mod:`engine.game24.hooks`, at the states the
model's ``left:`` text names: the retrieved text fills the prompt's experience
slot, a retrieved value replaces the value call, and with
``supply_continuations`` a retrieved continuation that the verifier accepts
completes a branch whose every step so far is verified (the episode then ends
with that verified output).
"""

from __future__ import annotations

from pathlib import Path

import re
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping, Sequence

import numpy as np

from engine.config import check
from engine.errors import InputError
from engine.game24 import prompts as P
from engine.game24.checks import answer_ok, normalise_step, state_key, step_ok
from engine.game24.hooks import (
    EMPTY,
    PHASE_PROPOSE,
    PHASE_VALUE,
    EpisodeTrace,
    ExperienceHooks,
    ExperienceReader,
    NoExperience,
    Retrieval,
    StepQuery,
)
from engine.game24.trajectory import Branch, canonical_numbers
from engine.llm.base import LLMBackend, MeteredBackend, Request, Usage, answered_by, usage_fields
from engine.llm.structured import GAME24_ANSWER, GAME24_STEP, GAME24_STEP_LINE, GAME24_VALUE
from engine.rounds import Episode, EpisodeResult, Snapshot, request_seed

_STEP_LINE = re.compile(GAME24_STEP_LINE)

N_ARITH_STEPS = 3
N_STEPS = 4  # the reference's task.steps: three arithmetic steps, then the answer
VALUE_CACHE_SCOPES = ("episode", "run")
# Snapshot / update keys of the run-wide value cache (sorted prompt keys i8[n], values f8[n]).
VC_KEYS = "tot/value_cache_key"
VC_VALUES = "tot/value_cache_value"
_VC_FILE = "tot_value_cache.npz"


MAX_BREADTH = 100  # states kept per step (the paper: 5)
MAX_SAMPLES = 100  # value samples per state (the paper: 3)


@dataclass(frozen=True)
class ToTConfig:
    """ToT search parameters ([tot] in configs/game24.toml). Defaults are ToT's Game-of-24 settings."""

    breadth: int = 5  # n_select_sample, b
    n_evaluate: int = 3  # n_evaluate_sample
    propose_temperature: float = 0.7
    value_temperature: float = 0.7
    propose_max_tokens: int = 256
    value_max_tokens: int = 128
    answer_max_tokens: int = 96
    value_cache: str = "episode"  # "episode" | "run" (the reference's task.value_cache)
    drop_invalid_steps: bool = False  # engine option: verifier-rejected proposal lines make no thought
    supply_continuations: bool = False  # a verified continuation from experience completes the branch

    def __post_init__(self):
        # work multipliers bounded: each step asks breadth x n_evaluate value samples per state
        check(1 <= self.breadth <= MAX_BREADTH, f"tot.breadth must be in [1, {MAX_BREADTH}], got {self.breadth}")
        check(1 <= self.n_evaluate <= MAX_SAMPLES,
              f"tot.n_evaluate must be in [1, {MAX_SAMPLES}], got {self.n_evaluate}")
        for name in ("propose_temperature", "value_temperature"):
            v = getattr(self, name)
            check(0.0 <= v <= 2.0, f"tot.{name} must be in [0, 2], got {v}")
        for name in ("propose_max_tokens", "value_max_tokens", "answer_max_tokens"):
            v = getattr(self, name)
            check(v >= 1, f"tot.{name} must be >= 1, got {v}")
        check(self.value_cache in VALUE_CACHE_SCOPES,
              f"tot.value_cache must be one of {', '.join(VALUE_CACHE_SCOPES)}, got {self.value_cache!r}")


@dataclass(frozen=True)
class PuzzleTask:
    """Episode payload: a puzzle's four numbers, its rank in the ToT puzzle file (0 if none), the run seed."""

    numbers: tuple[int, ...]
    rank: int = 0
    run_seed: int = 0  # seeds the run-wide value cache's draws (value_cache = "run")

    def __post_init__(self):
        if len(self.numbers) != 4 or not all(isinstance(x, int) for x in self.numbers):
            raise InputError(f"PuzzleTask.numbers must be four integers, got {self.numbers!r}")

    @property
    def text(self) -> str:
        """ToT's ``x``: the numbers as given, space-separated."""
        return " ".join(map(str, self.numbers))


def as_task(payload: Any) -> PuzzleTask:
    """Accept a PuzzleTask, four ints, or an object with ``numbers`` (and optionally ``rank``)."""
    if isinstance(payload, PuzzleTask):
        return payload
    if isinstance(payload, (tuple, list)):
        return PuzzleTask(tuple(int(x) for x in payload))
    nums = getattr(payload, "numbers", None)
    if nums is not None:
        return PuzzleTask(tuple(int(x) for x in nums), int(getattr(payload, "rank", 0) or 0))
    raise InputError(f"episode payload must be a PuzzleTask or four numbers, got {type(payload).__name__}")


# -- the reference's text rules (src/tot/tasks/game24.py) ----------------------------------------


def current_numbers(y: str) -> str:
    """``get_current_numbers``: the text after ``left: `` of the last line, up to ``)``, as written."""
    last_line = y.strip().split("\n")[-1]
    return last_line.split("left: ")[-1].split(")")[0]


def value_outputs_unwrap(y: str, outputs: Sequence[str]) -> float:
    """``value_outputs_unwrap``: 0 for four lines without an answer, else the value map summed over samples.

    A sample counts only when its last line (after the last ``"\\n"``, not
    stripped) is exactly ``sure``, ``likely`` or ``impossible``; summed in the
    reference's order (impossible, likely, sure) so floats agree bit for bit.
    """
    if len(y.strip().split("\n")) == N_STEPS and "answer" not in y.lower():
        return 0.0
    names = [o.split("\n")[-1] for o in outputs]
    return sum(P.VALUE_MAP[name] * names.count(name) for name in ("impossible", "likely", "sure"))


def thought_lines(y: str) -> tuple[str, ...]:
    """The lines of thought ``y`` (each piece a proposal added), as written."""
    return tuple(y[:-1].split("\n")) if y else ()


def value_prompt_for(x: str, y: str) -> tuple[str | None, bool]:
    """``value_prompt_wrap``: (value prompt, is the thought an arithmetic state?) for thought ``y``.

    The prompt is None when the numbers text is blank (see the module docstring).
    """
    last_line = y.strip().split("\n")[-1]
    if "left: " not in last_line:  # last step
        return P.value_last_step_prompt(x, last_line.lower().replace("answer: ", "")), False
    numbers = current_numbers(y)
    return (P.value_prompt(numbers) if numbers.strip() else None), True


def _parsed_numbers(text: str) -> tuple[Fraction, ...] | None:
    """The state a model's ``left:`` text names, for experience lookups; None unless it is a Game-of-24
    state (1 to 4 numbers): a model may write five numbers, which the search keeps as text."""
    try:
        nums = tuple(P.parse_number(t) for t in text.split())
    except (ValueError, ZeroDivisionError):
        return None
    return canonical_numbers(nums) if 1 <= len(nums) <= 4 else None


@dataclass
class _Node:
    text: str  # ToT's y: every line as written, each followed by "\n"
    branch: Branch | None  # exact bookkeeping while every line so far is a verified step, else None
    value: float = 0.0
    done: bool = False  # completed by a verified continuation from experience
    used_id: int | None = None

    @property
    def lines(self) -> tuple[str, ...]:
        return thought_lines(self.text)


@dataclass
class _Run:
    episode: Episode
    task: PuzzleTask
    frontier: list[_Node]
    value_cache: dict[str, float] = field(default_factory=dict)  # this episode's own entries
    new_cache: list[tuple[int, float]] = field(default_factory=list)  # (prompt key, value), for value_cache="run"
    retrieved: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)  # the reference's infos: ys, new_ys, values, select_new_ys
    steps_run: int = 0
    finished: bool = False
    by_experience: bool = False
    # format failures (engine.llm.structured): proposal lines not of the form "a op b = c (left: ...)",
    # and value samples whose last line is no label; counted, never raised
    unusable_lines: int = 0
    unusable_values: int = 0
    # experience in the propose / answer prompts (engine.memory_budget): tokens summed over the
    # prompts, prompts sent, and blocks cut (or dropped) to fit the backend's context window
    experience_tokens: int = 0
    experience_prompts: int = 0
    experience_fitted: int = 0

    @property
    def key(self) -> str:
        return str(self.episode.episode_id)


def _fit_experience(run: "_Run", ret: Retrieval, experience: str | None, bare: str, max_tokens: int,
                    llm) -> str | None:
    """The experience block fitted to the backend's context window (engine.memory_budget), counted in ``run``.

    The prompt without experience (``bare``) is never cut; an over-long block is re-rendered
    without its least relevant items (``ret.refit``) or, for a block without items, left out.
    """
    from engine.memory_budget import context_window, count_tokens_for, room

    run.experience_prompts += 1
    if not experience:
        return None
    used = count_tokens_for(llm, experience)
    limit = room(llm, count_tokens_for(llm, bare), max_tokens) if context_window(llm) is not None else None
    if limit is not None and used > limit:
        experience = (ret.refit(limit) if ret.refit is not None and limit > 0 else "") or None
        used = count_tokens_for(llm, experience) if experience else 0
        run.experience_fitted += 1
    run.experience_tokens += used
    return experience


def prompt_key(prompt: str) -> int:
    """64-bit key of a value prompt in the run-wide cache."""
    return request_seed("value-prompt", prompt)


class RunValueCache:
    """The run-wide value cache as two aligned arrays: sorted prompt keys i8[n] and values f8[n]."""

    def __init__(self, keys: np.ndarray | None = None, values: np.ndarray | None = None):
        self.keys = np.zeros(0, np.int64) if keys is None else np.asarray(keys, np.int64)
        self.values = np.zeros(0, np.float64) if values is None else np.asarray(values, np.float64)
        if self.keys.shape != self.values.shape or self.keys.ndim != 1:
            raise InputError(f"value cache keys {self.keys.shape} and values {self.values.shape} must be aligned 1-d")

    def __len__(self) -> int:
        return int(self.keys.size)

    def get(self, key: int) -> float | None:
        i = int(np.searchsorted(self.keys, key))
        return float(self.values[i]) if i < self.keys.size and self.keys[i] == key else None

    def merged(self, keys: np.ndarray, values: np.ndarray) -> "RunValueCache":
        """A cache with the new entries added; the first entry of a key wins (older ones first)."""
        all_k = np.concatenate([self.keys, np.asarray(keys, np.int64)])
        all_v = np.concatenate([self.values, np.asarray(values, np.float64)])
        uniq, first = np.unique(all_k, return_index=True)  # first occurrence of each key
        return RunValueCache(uniq, all_v[first])


def _query(run: _Run, node: _Node, numbers: tuple[Fraction, ...], step: int, phase: str) -> StepQuery:
    return StepQuery(
        episode_id=run.episode.episode_id, episode_key=run.key, seed=run.episode.seed,
        puzzle=run.task.numbers, step=step, phase=phase, numbers=numbers, state=P.format_numbers(numbers),
        key=state_key(numbers), history=node.lines, stream_phase=run.episode.phase,
    )


def _try_continuations(run: _Run, node: _Node, ret: Retrieval) -> _Node | None:
    """The first retrieved continuation the verifier accepts from this node, as a finished node."""
    if node.branch is None:
        return None  # only a branch whose every step is verified can be completed
    for cont, cid in zip(ret.continuations, ret.continuation_ids):
        end = _verified_end(node.branch, cont)
        if end is None:
            run.rejected.append(int(cid))
            continue
        run.used.append(int(cid))
        text = "".join(line + "\n" for line in end.lines + (end.answer_line(),))
        return _Node(text, end, value=float("inf"), done=True, used_id=int(cid))
    return None


def _verified_end(branch: Branch, cont: Sequence[str]) -> Branch | None:
    end = branch
    for line in cont:
        end = step_ok(end, line)
        if end is None:
            return None
    return end if end.reached_24 and len(end.lines) == N_ARITH_STEPS else None


def _finish(run: _Run, node: _Node) -> None:
    run.frontier = [node]
    run.finished = True
    run.by_experience = True


class ToTSearch:
    """Runs the batched BFS for a list of episodes against one experience reader."""

    def __init__(self, config: ToTConfig, reader: ExperienceReader, run_cache: RunValueCache | None = None):
        self.cfg = config
        self.reader = reader
        self.run_cache = run_cache if config.value_cache == "run" else None
        if self.run_cache is None and config.value_cache == "run":
            self.run_cache = RunValueCache()

    # -- one BFS step --------------------------------------------------------------
    def _retrieve(self, asks: list[tuple[_Run, _Node, tuple]], step: int, phase: str, llm) -> list[Retrieval]:
        if not asks:
            return []
        queries = [_query(run, node, nums, step, phase) for run, node, nums in asks]
        rets = list(self.reader.retrieve(queries, llm))
        if len(rets) != len(queries):
            raise AssertionError(f"hooks returned {len(rets)} retrievals for {len(queries)} queries")
        for (run, _, _), ret in zip(asks, rets):
            run.retrieved.extend(int(i) for i in ret.experience_ids)
        return rets

    def _propose(self, runs: list[_Run], step: int, llm) -> list[list[_Node]]:
        cfg = self.cfg
        pairs = []  # (run, node, numbers text)
        for run in runs:
            x = run.task.text
            for node in run.frontier:
                pairs.append((run, node, current_numbers(node.text if node.text else x)))
        asks = [(run, node, nums) for run, node, text in pairs
                if (nums := _parsed_numbers(text)) is not None]
        got = dict(zip((id(n) for _, n, _ in asks), self._retrieve(asks, step, PHASE_PROPOSE, llm)))
        if cfg.supply_continuations and step < N_ARITH_STEPS:
            for run, node, _ in asks:
                ret = got[id(node)]
                if not run.finished and ret.continuations:
                    done = _try_continuations(run, node, ret)
                    if done is not None:
                        _finish(run, done)
        requests: list[Request] = []
        owners: list[tuple[_Run, _Node, bool]] = []
        for run, node, numbers in pairs:
            if run.finished or not numbers.strip():
                continue  # a blank numbers text proposes nothing (module docstring)
            ret = got.get(id(node), EMPTY)
            experience = ret.experience or None
            x = run.task.text
            if numbers == "24":  # propose_prompt_wrap: at 24, the chain-of-thought answer prompt
                bare = P.answer_prompt(x, node.text)
                max_tokens, is_answer = cfg.answer_max_tokens, True
            else:
                bare = P.propose_prompt(numbers)
                max_tokens, is_answer = cfg.propose_max_tokens, False
            experience = _fit_experience(run, ret, experience, bare, max_tokens, llm)
            if is_answer:
                prompt = P.answer_prompt(x, node.text, experience=experience)
            else:
                prompt = P.propose_prompt(numbers, experience=experience)
            # The seed ignores the experience text: every method draws the same random numbers for
            # the same search state (common random numbers), so methods differ only by what their
            # experience changes, not by a re-draw of the sampler.
            requests.append(Request(
                prompt=prompt, n=1, temperature=cfg.propose_temperature, max_tokens=max_tokens,
                seed=request_seed(run.episode.seed, "propose", step, node.text, bare),
                episode=run.key, constraint=GAME24_ANSWER if is_answer else GAME24_STEP,
            ))
            owners.append((run, node, is_answer))
        responses = llm.generate(requests) if requests else []
        candidates: dict[int, list[_Node]] = {id(run): [] for run in runs}
        for (run, node, is_answer), resp in zip(owners, responses):
            text = resp.completions[0].text if resp.completions else ""
            out = candidates[id(run)]
            for line in text.split("\n"):  # get_proposals: one thought per piece, as written
                nxt = None if (is_answer or node.branch is None) else step_ok(node.branch, line)
                if not is_answer and line.strip() and not _STEP_LINE.fullmatch(normalise_step(line).strip()):
                    run.unusable_lines += 1
                if cfg.drop_invalid_steps and (not line.strip() if is_answer else nxt is None):
                    continue
                out.append(_Node(node.text + line + "\n", nxt))
        return [candidates[id(run)] for run in runs]

    def _value(self, runs: list[_Run], cands: list[list[_Node]], step: int, llm) -> None:
        cfg = self.cfg
        pairs: list[tuple[_Run, _Node, str, bool]] = []  # (run, node, value prompt, arithmetic state?)
        for run, cs in zip(runs, cands):
            if run.finished:
                continue
            seen: set[str] = set()
            for node in cs:
                if node.text in seen:  # get_values: a duplicate candidate gets value 0
                    node.value = 0.0
                    continue
                seen.add(node.text)
                prompt, arith = value_prompt_for(run.task.text, node.text)
                if prompt is None:
                    node.value = 0.0  # blank numbers text (module docstring)
                    continue
                pairs.append((run, node, prompt, arith))
        # experience sees the arithmetic states the value step will judge (not those the 4-line rule zeroes)
        asks = []
        for run, node, _, arith in pairs:
            if arith and len(node.lines) < N_STEPS:
                nums = _parsed_numbers(current_numbers(node.text))
                if nums is not None:
                    asks.append((run, node, nums))
        rets = dict(zip((id(n) for _, n, _ in asks), self._retrieve(asks, step + 1, PHASE_VALUE, llm)))
        if cfg.supply_continuations:
            for run, node, _ in asks:
                ret = rets[id(node)]
                if not run.finished and ret.continuations:
                    done = _try_continuations(run, node, ret)
                    if done is not None:
                        _finish(run, done)
        requests: list[Request] = []
        waiting: dict[tuple[str, str], list[_Node]] = {}
        first_y: dict[tuple[str, str], str] = {}
        for run, node, prompt, _ in pairs:
            if run.finished:
                continue
            ret = rets.get(id(node), EMPTY)
            if ret.value is not None:
                node.value = float(ret.value)
                continue
            cached = self._cached(run, prompt)
            if cached is not None:  # get_value: a cached prompt is not asked again
                node.value = cached
                continue
            slot = (run.key, prompt)
            if slot not in waiting:  # the first thought with this prompt asks; later ones read the cache
                waiting[slot] = []
                first_y[slot] = node.text
                seed = (request_seed("run", run.task.run_seed, "value", prompt) if cfg.value_cache == "run"
                        else request_seed(run.episode.seed, "value", prompt))
                requests.append(Request(
                    prompt=prompt, n=cfg.n_evaluate, temperature=cfg.value_temperature,
                    max_tokens=cfg.value_max_tokens, seed=seed, episode=run.key, constraint=GAME24_VALUE,
                ))
            waiting[slot].append(node)
        responses = llm.generate(requests) if requests else []
        by_key = {r.key: r for r in runs}
        for (slot, nodes), resp in zip(waiting.items(), responses):
            value = value_outputs_unwrap(first_y[slot], [c.text for c in resp.completions])
            run = by_key[slot[0]]
            run.unusable_values += sum(c.text.split("\n")[-1] not in P.VALUE_MAP for c in resp.completions)
            run.value_cache[slot[1]] = value
            if self.run_cache is not None:
                run.new_cache.append((prompt_key(slot[1]), value))
            for node in nodes:
                node.value = value

    def _cached(self, run: _Run, prompt: str) -> float | None:
        if prompt in run.value_cache:
            return run.value_cache[prompt]
        if self.run_cache is not None and len(self.run_cache):
            return self.run_cache.get(prompt_key(prompt))
        return None

    def step(self, runs: list[_Run], step: int, llm: LLMBackend) -> None:
        """One BFS step (propose, value, select) for every unfinished run, two batched LLM calls."""
        active = [run for run in runs if not run.finished]
        cands = self._propose(active, step, llm)
        self._value(active, cands, step, llm)
        for run, cs in zip(active, cands):
            if run.finished:
                continue
            run.steps_run = step + 1
            order = sorted(range(len(cs)), key=lambda i: cs[i].value, reverse=True)  # stable: ToT greedy
            chosen = [cs[i] for i in order[: self.cfg.breadth]]
            run.steps.append({"step": step, "ys": [n.text for n in run.frontier],
                              "new_ys": [n.text for n in cs], "values": [n.value for n in cs],
                              "select_new_ys": [n.text for n in chosen]})
            run.frontier = chosen  # an empty frontier stays empty to the last step, as in the reference

    def run(self, episodes: Sequence[Episode], llm: LLMBackend) -> list[_Run]:
        runs = []
        for ep in episodes:
            task = as_task(ep.payload)
            runs.append(_Run(ep, task, [_Node("", Branch.start(task.numbers))]))
        for step in range(N_STEPS):
            if all(run.finished for run in runs):
                break
            self.step(runs, step, llm)
        return runs


def _outputs(run: _Run) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    """The final frontier's thoughts (the reference's ``ys``), best first, and the verifier's verdicts."""
    outputs = tuple(node.text for node in run.frontier)
    return outputs, tuple(answer_ok(run.task.numbers, text) for text in outputs)


def _split_cache(snapshot: Mapping[str, np.ndarray]) -> tuple[dict, RunValueCache | None]:
    hooks_part = {k: v for k, v in snapshot.items() if k not in (VC_KEYS, VC_VALUES)}
    if VC_KEYS in snapshot:
        return hooks_part, RunValueCache(snapshot[VC_KEYS], snapshot[VC_VALUES])
    return hooks_part, None


class ToTMethod:
    """A :class:`engine.rounds.Method`: ToT with the given experience hooks (plain ToT by default)."""

    def __init__(
        self,
        name: str = "tot",
        hooks: ExperienceHooks | None = None,
        config: ToTConfig | None = None,
        learn_phases: Sequence[str] = ("warmup", "test"),
    ):
        self.name = name
        self.hooks = hooks if hooks is not None else NoExperience()
        self.config = config or ToTConfig()
        self.learn_phases = tuple(learn_phases)
        self.value_cache = RunValueCache()  # the run-wide cache (value_cache = "run"), grown in apply()

    def snapshot(self):
        return self._snapshot(self.hooks.snapshot)

    def snapshot_views(self):
        """:meth:`snapshot` without copying the experience (:class:`engine.rounds.ViewSnapshots`)."""
        return self._snapshot(getattr(self.hooks, "snapshot_views", self.hooks.snapshot))

    def _snapshot(self, experience):
        snap = dict(experience())
        if self.config.value_cache == "run":
            snap[VC_KEYS], snap[VC_VALUES] = self.value_cache.keys, self.value_cache.values
        return snap

    def run_episodes(self, snapshot: Snapshot, episodes: Sequence[Episode], llm: LLMBackend) -> list[EpisodeResult]:
        if not episodes:
            return []
        t0 = time.perf_counter()
        metered = MeteredBackend(llm)
        hooks_snap, run_cache = _split_cache(snapshot)
        reader = self.hooks.reader(hooks_snap)
        runs = ToTSearch(self.config, reader, run_cache).run(episodes, metered)
        traces, finals = [], []
        for run in runs:
            outputs, verdicts = _outputs(run)
            finals.append((outputs, verdicts))
            sol = next((o for o, v in zip(outputs, verdicts) if v), "")
            traces.append(EpisodeTrace(
                episode_id=run.episode.episode_id, episode_key=run.key, seed=run.episode.seed,
                puzzle=run.task.numbers, stream_phase=run.episode.phase, outputs=outputs,
                verdicts=verdicts, success=any(verdicts), solution=tuple(sol.splitlines()),
                retrieved=tuple(run.retrieved), used=tuple(run.used), rejected=tuple(run.rejected),
            ))
        learn = [i for i, t in enumerate(traces) if t.stream_phase in self.learn_phases]
        updates: list[dict] = [{} for _ in traces]
        if learn:
            got = reader.observe([traces[i] for i in learn], metered)
            if len(got) != len(learn):
                raise AssertionError(f"hooks returned {len(got)} updates for {len(learn)} traces")
            for i, upd in zip(learn, got):
                updates[i] = dict(upd)
        if self.config.value_cache == "run":  # filled by the test split only: it starts empty there
            for run, upd in zip(runs, updates):
                if run.new_cache and run.episode.phase == "test":
                    upd[VC_KEYS] = np.array([k for k, _ in run.new_cache], np.int64)
                    upd[VC_VALUES] = np.array([v for _, v in run.new_cache], np.float64)
        wall = (time.perf_counter() - t0) / len(runs)
        results = []
        for run, (outputs, verdicts), trace, upd in zip(runs, finals, traces, updates):
            usage = metered.meter.per_episode.get(run.key, Usage())
            rec = _record(self, run, trace, usage, wall)
            rec.update(usage_fields(usage))  # failed requests (llm.openai.on_error = "record"), prefix-cache hits
            rec["backend"], rec["model"] = answered_by(llm)  # a replay: the backend that recorded it
            results.append(EpisodeResult(run.episode.episode_id, rec, upd))
        return results

    def apply(self, results: Sequence[EpisodeResult]) -> None:
        keys, values, hook_updates = [], [], []
        for r in results:
            upd = r.updates
            if VC_KEYS in upd:
                keys.append(np.asarray(upd[VC_KEYS], np.int64))
                values.append(np.asarray(upd[VC_VALUES], np.float64))
                upd = {k: v for k, v in upd.items() if k not in (VC_KEYS, VC_VALUES)}
            hook_updates.append((r.episode_id, upd))
        if keys:  # results arrive in episode-id order: the earliest episode's entry of a prompt wins
            self.value_cache = self.value_cache.merged(np.concatenate(keys), np.concatenate(values))
        self.hooks.apply(hook_updates)

    def save_state(self, directory) -> None:
        """Checkpoint hook (engine.rounds): the hooks' own atomic save (else a pickle), plus the value cache."""
        from engine.atomic_io import write_bytes as atomic_write_bytes
        from engine.checkpoint import save_method_state

        directory = Path(directory)
        save_method_state(self.hooks, directory)
        if self.config.value_cache == "run":
            import io

            buf = io.BytesIO()
            np.savez(buf, keys=self.value_cache.keys, values=self.value_cache.values)
            atomic_write_bytes(directory / _VC_FILE, buf.getvalue())

    def load_state(self, directory) -> None:
        from engine.checkpoint import load_method_state

        directory = Path(directory)
        load_method_state(self.hooks, directory)
        if self.config.value_cache == "run" and (directory / _VC_FILE).is_file():
            with np.load(directory / _VC_FILE) as z:
                self.value_cache = RunValueCache(z["keys"], z["values"])


def _record(method: ToTMethod, run: _Run, trace: EpisodeTrace, usage: Usage, wall: float) -> dict:
    first = trace.outputs[0] if trace.outputs else ""
    return {
        "method": method.name,
        "episode_id": run.episode.episode_id,
        "seed": run.episode.seed,
        "phase": run.episode.phase,
        "rank": run.task.rank,
        "puzzle": " ".join(map(str, run.task.numbers)),
        "success_any": bool(trace.success),
        "success_first": bool(trace.verdicts[0]) if trace.verdicts else False,
        "n_outputs": len(trace.outputs),
        "steps_run": run.steps_run,
        "by_experience": run.by_experience,
        "calls": usage.calls,
        "samples": usage.samples,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "tokens": usage.prompt_tokens + usage.completion_tokens,
        "llm_latency_s": usage.latency_s,
        "wall_s": wall,
        "n_retrieved": len(trace.retrieved),
        "n_used": len(trace.used),
        "n_rejected": len(trace.rejected),
        "retrieved_ids": sorted({int(i) for i in trace.retrieved}),  # experiences recalled (unique)
        "used_ids": [int(i) for i in trace.used],  # experiences whose continuation was used
        "first_output": first.strip().splitlines()[-1] if first.strip() else "",
        "unusable_lines": run.unusable_lines,
        "unusable_values": run.unusable_values,
        # mean experience tokens per propose / answer prompt (0 without experience), and the blocks
        # fitted to the context window (engine.memory_budget)
        "experience_tokens": run.experience_tokens / run.experience_prompts if run.experience_prompts else 0.0,
        "experience_fitted": run.experience_fitted,
    }
