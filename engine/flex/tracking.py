"""FLEX performance tracking: success rate over a window, and plateau detection (seed 002 step 5).

The seed's ``monitor_agent_learning`` reports the success rate of the last
``window_size`` experiences and notes that a plateau "could trigger additional
strategies", without saying how one is found. The rule here (the engine's, stated
so it can be checked): compare the success rate of consecutive non-overlapping
windows; a **plateau** is ``patience`` consecutive windows whose rate rose by
less than ``min_gain`` over the window before. :func:`detect_plateau` returns the
stream position where the plateau is declared (the end of the last of those
windows), or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.config import check


@dataclass(frozen=True)
class PlateauRule:
    """``window`` episodes per window; ``patience`` windows gaining less than ``min_gain`` make a plateau."""

    window: int = 50
    min_gain: float = 0.02
    patience: int = 2

    def __post_init__(self):
        check(self.window >= 1, f"flex.window must be >= 1, got {self.window}")
        check(0.0 <= self.min_gain <= 1.0, f"flex.plateau_min_gain must be in [0, 1], got {self.min_gain}")
        check(self.patience >= 1, f"flex.plateau_patience must be >= 1, got {self.patience}")


def window_rates(successes: Sequence[float], window: int) -> np.ndarray:
    """``f8[w]`` success rate of each full window of ``window`` consecutive outcomes (a partial last one dropped)."""
    x = np.asarray(successes, dtype=np.float64)
    w = x.size // window
    return x[: w * window].reshape(w, window).mean(axis=1) if w else np.zeros(0)


def detect_plateau(successes: Sequence[float], rule: PlateauRule = PlateauRule()) -> int | None:
    """Stream position (1-based, a window's end) where a plateau is declared, or None (see module doc)."""
    rates = window_rates(successes, rule.window)
    flat = 0
    for k in range(1, rates.size):
        flat = flat + 1 if rates[k] - rates[k - 1] < rule.min_gain else 0
        if flat >= rule.patience:
            return (k + 1) * rule.window
    return None


def tracking_report(successes: Sequence[float], rule: PlateauRule) -> dict:
    """What a run reports per method: the window rates, the latest rate and the plateau position (None if none)."""
    rates = window_rates(successes, rule.window)
    return {"window": rule.window, "window_rates": [float(r) for r in rates],
            "success_rate_last_window": float(rates[-1]) if rates.size else None,
            "plateau_at": detect_plateau(successes, rule)}


def plot_learning(curves: dict[str, Sequence[float]], rule: PlateauRule, path, title: str) -> None:
    """Success rate per window for each method, a marker where its plateau was declared (PNG at ``path``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, succ in curves.items():
        rates = window_rates(succ, rule.window)
        if not rates.size:
            continue
        x = (np.arange(rates.size) + 1) * rule.window
        line, = ax.plot(x, rates, marker="o", label=name)
        at = detect_plateau(succ, rule)
        if at is not None:
            ax.axvline(at, color=line.get_color(), linestyle="--", alpha=0.6)
            ax.annotate("plateau", (at, rates[at // rule.window - 1]), color=line.get_color(), fontsize=8)
    ax.set_xlabel(f"episode (windows of {rule.window})")
    ax.set_ylabel("success rate in window")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
