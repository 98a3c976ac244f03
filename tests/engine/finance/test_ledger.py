import numpy as np
import pytest

from engine.errors import InputError
from engine.finance.config import ToEConfig
from engine.finance.ledger import PendingFeedback, feedback
from engine.finance.methods import StreamContext
from engine.finance.config import ProtocolConfig, SamplingConfig
from engine.finance.simulated import simulated_backend
from engine.finance.synthetic import eval_days
from engine.finance.toe import PipeToE


def test_entries_resolve_only_when_due_and_once():
    led = PendingFeedback()
    e1 = led.add(0, 5, 0, 10, 0.5, (1, 2))
    e2 = led.add(1, 5, 1, 20, -0.5, (3,))
    assert led.due(14) == []
    assert led.due(15) == [e1]
    assert led.due(15) == [] and led.due(30) == [e2]
    assert led.due(100) == [] and led.resolved == 2 and len(led) == 0


def test_feedback_needs_a_known_return():
    alpha = np.full((1, 10, 1), np.nan)
    alpha[0, 2, 0] = 0.04
    led = PendingFeedback()
    assert feedback(led.add(0, 2, 0, 3, 0.5, ()), alpha) == pytest.approx(0.02)  # r = a_t * o_{t+h}
    with pytest.raises(InputError, match="not known yet"):
        feedback(led.add(0, 3, 0, 3, 0.5, ()), alpha)
    with pytest.raises(InputError, match="horizon"):
        led.add(0, 3, 0, 0, 0.5, ())
    with pytest.raises(InputError, match="sentiment"):
        led.add(0, 3, 0, 3, np.nan, ())


def test_toe_applies_each_update_after_its_horizon_exactly_once(small_market, embedder, monkeypatch):
    m = small_market
    ctx = StreamContext(m, ProtocolConfig(horizons=m.horizons), SamplingConfig(), 0, embedder)
    method = PipeToE(ctx, ToEConfig())
    applied = []  # (day applied, entry)
    orig = method.ledger.due

    def spy(today):
        out = orig(today)
        applied.extend((today, e) for e in out)
        return out

    monkeypatch.setattr(method.ledger, "due", spy)
    q_seen = []
    llm = simulated_backend(0)
    days = eval_days(m)
    for d in days.tolist():
        q_before = method.tree.q[method.tree.active].copy()
        method.step(d, llm)
        q_seen.append((d, q_before))
    ids = [e.entry_id for _, e in applied]
    assert len(ids) == len(set(ids))  # exactly once
    assert applied and all(day >= e.day + e.horizon for day, e in applied)  # never before the return exists
    assert all(np.isfinite(m.alpha[e.industry, e.day, e.hcol]) for _, e in applied)
    # every entry whose due day passed within the stream was applied
    last = int(days[-1])
    pending = [e for e in method.ledger._entries]
    assert all(e.due > last for e in pending)
    # no reliability moves before the first due day
    first_due = min(e.day + e.horizon for _, e in applied)
    for d, q in q_seen:
        if d <= first_due and q.size:
            assert np.all(q == 1.0)
    assert method.applied_updates > 0


def test_failed_update_batch_changes_nothing(small_market, embedder):
    m = small_market
    ctx = StreamContext(m, ProtocolConfig(horizons=m.horizons), SamplingConfig(), 0, embedder)
    method = PipeToE(ctx, ToEConfig())
    llm = simulated_backend(0)
    days = eval_days(m).tolist()
    for d in days[:15]:
        method.step(d, llm)
    due_day = min(e.due for e in method.ledger._entries if e.eids)
    pending, q = len(method.ledger), method.tree.q.copy()

    class Broken:
        name, model = "broken", "broken"

        def generate(self, requests):
            raise RuntimeError("backend down")

    method.update = "llm"
    with pytest.raises(RuntimeError, match="backend down"):
        method._apply_feedback(due_day, Broken())
    assert len(method.ledger) == pending  # nothing popped: the entries will be applied later, once
    np.testing.assert_array_equal(method.tree.q, q)
