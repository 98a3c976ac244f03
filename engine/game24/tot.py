"""Tree-of-Thoughts BFS on Game of 24 (Yao et al. 2023), batched across episodes.

The search is ToT's ``solve`` with ``method_generate="propose"``,
``method_evaluate="value"``, ``method_select="greedy"``, 4 steps (three
arithmetic steps, then the answer), ``n_evaluate_sample=3`` and
``n_select_sample=b=5``:

1. **propose**: every frontier branch (at most b) gets one request (n=1): the
   propose prompt on its remaining numbers, or at the last step, when it stands
   at 24, the chain-of-thought answer prompt with its three steps. The
   completion is split into lines; each line extends the branch. Unlike the
   reference code, a step line the exact verifier rejects is dropped.
2. **value**: every new candidate gets one request with ``n=3``: the value
   prompt on its remaining numbers (``sure/likely/impossible``), or for an
   answer line the last-step value prompt; its value is
   ``sum(VALUE_MAP[label])`` = 20 / 1 / 0.001 per sample. As in the reference,
   a candidate identical to an earlier one of the same step gets value 0, an
   answer-step candidate without an answer line gets 0 without a call, and
   value prompts are cached (here: per episode, so no episode reads another's).
3. **select**: the b candidates with the highest value (stable sort, ties in
   proposal order) form the next frontier.

After the last step the frontier holds the final outputs, best first; the
exact verifier (ToE eq. (A2)) marks each. Accuracy "any of b" and "first
output" are computed from those verdicts.

Batching: at each step, ALL propose prompts of ALL episodes in flight go to
``llm.generate`` as one list, then all value prompts as one list. Every request
carries ``episode=str(episode_id)`` (per-episode accounting) and a seed derived
only from the episode seed, the step, the role and the prompt text, so an
episode's result never depends on which other episodes share the batch.

Experience enters only through :mod:`engine.game24.hooks`: the retrieved text
fills the prompt's experience slot, and with ``supply_continuations`` a
retrieved continuation that the verifier accepts completes the branch without
the LLM (the episode then ends with that verified output).
"""

from __future__ import annotations

from pathlib import Path

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from engine.config import check
from engine.errors import InputError
from engine.game24 import prompts as P
from engine.game24.checks import answer_ok, state_key, step_ok
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
    request_seed,
)
from engine.game24.trajectory import Branch
from engine.llm.base import LLMBackend, MeteredBackend, Request, Usage, answered_by
from engine.rounds import Episode, EpisodeResult, Snapshot

N_ARITH_STEPS = 3


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
    supply_continuations: bool = False  # a verified continuation from experience completes the branch

    def __post_init__(self):
        check(self.breadth >= 1, f"tot.breadth must be >= 1, got {self.breadth}")
        check(self.n_evaluate >= 1, f"tot.n_evaluate must be >= 1, got {self.n_evaluate}")
        for name in ("propose_temperature", "value_temperature"):
            v = getattr(self, name)
            check(0.0 <= v <= 2.0, f"tot.{name} must be in [0, 2], got {v}")
        for name in ("propose_max_tokens", "value_max_tokens", "answer_max_tokens"):
            v = getattr(self, name)
            check(v >= 1, f"tot.{name} must be >= 1, got {v}")


@dataclass(frozen=True)
class PuzzleTask:
    """Episode payload: a puzzle's four numbers and its rank in the ToT puzzle file (0 if none)."""

    numbers: tuple[int, ...]
    rank: int = 0

    def __post_init__(self):
        if len(self.numbers) != 4 or not all(isinstance(x, int) for x in self.numbers):
            raise InputError(f"PuzzleTask.numbers must be four integers, got {self.numbers!r}")


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


@dataclass
class _Node:
    branch: Branch
    answer: str | None = None  # the answer line, at the last step
    value: float = 0.0
    done: bool = False  # completed by a verified continuation from experience
    used_id: int | None = None

    @property
    def text(self) -> str:
        """ToT's ``y``: the step lines (and the answer line) so far, newline-terminated."""
        lines = list(self.branch.lines) + ([self.answer] if self.answer is not None else [])
        return "".join(line + "\n" for line in lines)


@dataclass
class _Run:
    episode: Episode
    task: PuzzleTask
    frontier: list[_Node]
    value_cache: dict[str, float] = field(default_factory=dict)
    retrieved: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    steps_run: int = 0
    finished: bool = False
    by_experience: bool = False

    @property
    def key(self) -> str:
        return str(self.episode.episode_id)


def _query(run: _Run, node: _Node, step: int, phase: str) -> StepQuery:
    b = node.branch
    return StepQuery(
        episode_id=run.episode.episode_id, episode_key=run.key, seed=run.episode.seed,
        puzzle=run.task.numbers, step=step, phase=phase, numbers=b.numbers, state=b.state,
        key=state_key(b.numbers), history=b.lines, stream_phase=run.episode.phase,
    )


def _try_continuations(run: _Run, node: _Node, ret: Retrieval) -> _Node | None:
    """The first retrieved continuation the verifier accepts from this node, as a finished node."""
    for cont, cid in zip(ret.continuations, ret.continuation_ids):
        end = _verified_end(node.branch, cont)
        if end is None:
            run.rejected.append(int(cid))
            continue
        run.used.append(int(cid))
        return _Node(end, answer=end.answer_line(), value=float("inf"), done=True, used_id=int(cid))
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

    def __init__(self, config: ToTConfig, reader: ExperienceReader):
        self.cfg = config
        self.reader = reader

    # -- one BFS step --------------------------------------------------------------
    def _retrieve(self, pairs: list[tuple[_Run, _Node]], step: int, phase: str, llm) -> list[Retrieval]:
        if not pairs:
            return []
        queries = [_query(run, node, step, phase) for run, node in pairs]
        rets = list(self.reader.retrieve(queries, llm))
        if len(rets) != len(queries):
            raise AssertionError(f"hooks returned {len(rets)} retrievals for {len(queries)} queries")
        for (run, _), ret in zip(pairs, rets):
            run.retrieved.extend(int(i) for i in ret.experience_ids)
        return rets

    def _propose(self, runs: list[_Run], step: int, llm) -> list[list[_Node]]:
        cfg = self.cfg
        pairs = [(run, node) for run in runs for node in run.frontier]
        rets = self._retrieve(pairs, step, PHASE_PROPOSE, llm)
        if cfg.supply_continuations and step < N_ARITH_STEPS:
            for (run, node), ret in zip(pairs, rets):
                if not run.finished and ret.continuations:
                    done = _try_continuations(run, node, ret)
                    if done is not None:
                        _finish(run, done)
        requests: list[Request] = []
        owners: list[tuple[_Run, _Node, bool]] = []
        for (run, node), ret in zip(pairs, rets):
            if run.finished:
                continue
            experience = ret.experience or None
            b = node.branch
            if step == N_ARITH_STEPS and b.reached_24:
                prompt = P.answer_prompt(run.task.numbers, b.lines, experience=experience)
                bare = P.answer_prompt(run.task.numbers, b.lines)
                max_tokens, is_answer = cfg.answer_max_tokens, True
            else:
                prompt = P.propose_prompt(b.state, experience=experience)
                bare = P.propose_prompt(b.state)
                max_tokens, is_answer = cfg.propose_max_tokens, False
            # The seed ignores the experience text: every method draws the same random numbers for
            # the same search state (common random numbers), so methods differ only by what their
            # experience changes, not by a re-draw of the sampler.
            requests.append(Request(
                prompt=prompt, n=1, temperature=cfg.propose_temperature, max_tokens=max_tokens,
                seed=request_seed(run.episode.seed, "propose", step, node.text, bare),
                episode=run.key,
            ))
            owners.append((run, node, is_answer))
        responses = llm.generate(requests) if requests else []
        candidates: dict[int, list[_Node]] = {id(run): [] for run in runs}
        for (run, node, is_answer), resp in zip(owners, responses):
            text = resp.completions[0].text if resp.completions else ""
            for line in (ln.strip() for ln in text.split("\n")):
                if not line:
                    continue
                if is_answer:
                    candidates[id(run)].append(_Node(node.branch, answer=line))
                else:
                    nxt = step_ok(node.branch, line)
                    if nxt is not None:  # invalid proposals are dropped
                        candidates[id(run)].append(_Node(nxt))
        return [candidates[id(run)] for run in runs]

    def _value(self, runs: list[_Run], cands: list[list[_Node]], step: int, llm) -> None:
        cfg = self.cfg
        pairs: list[tuple[_Run, _Node]] = []
        for run, cs in zip(runs, cands):
            if run.finished:
                continue
            seen: set[str] = set()
            for node in cs:
                if node.text in seen:  # ToT: a duplicate candidate gets value 0
                    node.value = 0.0
                    continue
                seen.add(node.text)
                if node.answer is None and step == N_ARITH_STEPS:
                    node.value = 0.0
                elif node.answer is not None and "answer" not in node.answer.lower():
                    node.value = 0.0  # ToT value_outputs_unwrap: 4 lines without an answer
                else:
                    pairs.append((run, node))
        arith = [(run, node) for run, node in pairs if node.answer is None]
        rets = dict(zip(map(id, (n for _, n in arith)), self._retrieve(arith, step + 1, PHASE_VALUE, llm)))
        if cfg.supply_continuations:
            for run, node in arith:
                ret = rets.get(id(node), EMPTY)
                if not run.finished and ret.continuations:
                    done = _try_continuations(run, node, ret)
                    if done is not None:
                        _finish(run, done)
        requests: list[Request] = []
        waiting: dict[tuple[str, str], list[_Node]] = {}
        for run, node in pairs:
            if run.finished:
                continue
            ret = rets.get(id(node), EMPTY)
            if node.answer is None:
                if ret.value is not None:
                    node.value = float(ret.value)
                    continue
                prompt = P.value_prompt(node.branch.state)
            else:
                prompt = P.value_last_step_prompt(run.task.numbers, node.answer)
            if prompt in run.value_cache:
                node.value = run.value_cache[prompt]
                continue
            slot = (run.key, prompt)
            if slot not in waiting:
                waiting[slot] = []
                requests.append(Request(
                    prompt=prompt, n=cfg.n_evaluate, temperature=cfg.value_temperature,
                    max_tokens=cfg.value_max_tokens,
                    seed=request_seed(run.episode.seed, "value", prompt), episode=run.key,
                ))
            waiting[slot].append(node)
        responses = llm.generate(requests) if requests else []
        by_key = {r.key: r for r in runs}
        for (slot, nodes), resp in zip(waiting.items(), responses):
            value = P.value_of_outputs(c.text for c in resp.completions)
            by_key[slot[0]].value_cache[slot[1]] = value
            for node in nodes:
                node.value = value

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
            run.frontier = [cs[i] for i in order[: self.cfg.breadth]]
            if not run.frontier:
                run.finished = True

    def run(self, episodes: Sequence[Episode], llm: LLMBackend) -> list[_Run]:
        runs = [
            _Run(ep, task, [_Node(Branch.start(task.numbers))])
            for ep, task in ((ep, as_task(ep.payload)) for ep in episodes)
        ]
        for step in range(N_ARITH_STEPS + 1):
            if all(run.finished for run in runs):
                break
            self.step(runs, step, llm)
        return runs


def _outputs(run: _Run) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    outputs, verdicts = [], []
    for node in run.frontier:
        if node.answer is None and not node.done:
            continue  # a branch that never reached the answer step
        text = node.text
        outputs.append(text)
        verdicts.append(answer_ok(run.task.numbers, text))
    return tuple(outputs), tuple(verdicts)


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

    def snapshot(self):
        return self.hooks.snapshot()

    def run_episodes(self, snapshot: Snapshot, episodes: Sequence[Episode], llm: LLMBackend) -> list[EpisodeResult]:
        if not episodes:
            return []
        t0 = time.perf_counter()
        metered = MeteredBackend(llm)
        reader = self.hooks.reader(snapshot)
        runs = ToTSearch(self.config, reader).run(episodes, metered)
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
        wall = (time.perf_counter() - t0) / len(runs)
        results = []
        for run, (outputs, verdicts), trace, upd in zip(runs, finals, traces, updates):
            usage = metered.meter.per_episode.get(run.key, Usage())
            rec = _record(self, run, trace, usage, wall)
            rec["backend"], rec["model"] = answered_by(llm)  # a replay: the backend that recorded it
            results.append(EpisodeResult(run.episode.episode_id, rec, upd))
        return results

    def apply(self, results: Sequence[EpisodeResult]) -> None:
        self.hooks.apply([(r.episode_id, r.updates) for r in results])

    def save_state(self, directory) -> None:
        """Checkpoint hook (engine.rounds): the hooks' own atomic save, else a pickle of them."""
        from engine.checkpoint import save_method_state

        save_method_state(self.hooks, Path(directory))

    def load_state(self, directory) -> None:
        from engine.checkpoint import load_method_state

        load_method_state(self.hooks, Path(directory))


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
    }
