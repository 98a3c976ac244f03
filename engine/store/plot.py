"""Drawing of a store's tree (three levels, e.g. finance's industry > factor > analysis direction)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_tree(store, path: Path, title: str = "experience tree", horizon_col: int | None = None) -> None:
    """Industry > factor > direction of an :class:`engine.store.ExperienceStore` as a left-to-right
    dendrogram; leaves (active experiences) coloured by reliability."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import cm, colors

    H = store.n_horizons
    hc = H // 2 if horizon_col is None else horizon_col
    q_all, hits = store.reliability, store.hit
    active = np.flatnonzero(store.active)
    paths = sorted(((tuple(store.path_texts(int(e))), int(e)) for e in active), key=lambda x: x[0])
    n_leaves = max(1, len(paths))
    fig, ax = plt.subplots(figsize=(13, max(3.0, 0.22 * n_leaves + 1)))
    norm = colors.Normalize(vmin=store.q_min, vmax=store.q_max)
    cmap = matplotlib.colormaps["RdYlGn"]
    ys: dict[tuple, list[float]] = {}
    for y, (p, e) in enumerate(paths):
        ind, fac, d = (tuple(p) + ("", "", ""))[:3]
        yy = n_leaves - y
        q = float(q_all[e, hc])
        ax.scatter([2], [yy], color=cmap(norm(q)), s=40, zorder=3, edgecolor="black", linewidth=0.3)
        short = d if len(d) <= 70 else d[:67] + "..."
        ax.text(2.05, yy, f"{short}  (Q={q:.2f}, hit={int(hits[e])})", va="center", fontsize=6)
        ys.setdefault((ind,), []).append(yy)
        ys.setdefault((ind, fac), []).append(yy)
    for key, vals in ys.items():
        if len(key) == 2:
            yf = float(np.mean(vals))
            for v in vals:
                ax.plot([1, 2], [yf, v], color="grey", lw=0.5, zorder=1)
            ax.scatter([1], [yf], color="steelblue", s=25, zorder=3)
            ax.text(1.02, yf + 0.25, key[1], fontsize=6, color="steelblue")
            yi = float(np.mean(ys[(key[0],)]))
            ax.plot([0, 1], [yi, yf], color="grey", lw=0.5, zorder=1)
    for key, vals in ys.items():
        if len(key) == 1:
            yi = float(np.mean(vals))
            ax.scatter([0], [yi], color="black", s=30, zorder=3)
            ax.text(-0.02, yi, key[0], fontsize=7, ha="right", va="center")
    ax.set_xlim(-0.6, 3.6)
    ax.axis("off")
    sm = cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, fraction=0.02, pad=0.01, label=f"reliability Q ({store.horizons[hc]})")
    ax.set_title(f"{title}\nevery active path drawn; leaf labels cut at 70 characters (the full texts: "
                 f"toe store show DIR --tree); merged experiences not drawn", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
