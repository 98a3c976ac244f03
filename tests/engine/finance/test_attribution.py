"""On the synthetic market with the simulated policy, final reliabilities follow the ground truth."""

import numpy as np
import pytest

from engine.finance.config import ProtocolConfig, SamplingConfig, ToEConfig
from engine.finance.experiment import reliability_truth
from engine.finance.methods import StreamContext
from engine.finance.simulated import simulated_backend
from engine.finance.synthetic import SyntheticConfig, eval_days, generate_market
from engine.finance.toe import PipeToE


@pytest.mark.slow
def test_reliability_ranks_predictive_above_misleading(embedder):
    rhos, gaps = [], []
    for seed in (0, 1, 2):
        m = generate_market(SyntheticConfig(n_industries=5, n_days=200, events_per_day=2.5, seed=seed))
        ctx = StreamContext(m, ProtocolConfig(horizons=m.horizons), SamplingConfig(), seed, embedder)
        method = PipeToE(ctx, ToEConfig(), n_channels=len(m.truth["channels"]))
        llm = simulated_backend(seed)
        for d in eval_days(m).tolist():
            method.step(d, llm)
        rt = reliability_truth(method, m.truth)
        rhos.append([rt["spearman"][h] for h in ("10", "20", "40")])
        roles = rt["mean_q_by_role"]["10"]
        gaps.append(roles["predictive"] - roles["misleading"])
    rhos = np.asarray(rhos)
    per_seed = rhos.mean(axis=1)
    assert np.all(per_seed > 0), rhos
    assert per_seed.mean() > 2 * per_seed.std(ddof=1) / np.sqrt(len(per_seed)), rhos  # beyond seed noise
    assert np.mean(gaps) > 0
