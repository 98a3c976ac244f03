"""``toe store import|export|apply|show``: the experience store from the command line.

``toe store show DIR`` reads any store checkpoint, among them the tree a finance
run leaves (``RUN/tree_formula_seed0``): ``--tree`` prints its paths with
reliability, recall and hit, ``--png FILE`` draws it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from engine.errors import InputError, PersistenceError


def register(subparsers) -> None:
    """Add ``toe store ...`` to the ``toe`` parser."""
    p = subparsers.add_parser("store", help="import, export, update and inspect an experience store")
    sub = p.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    imp = sub.add_parser("import", help="build a store from a path CSV (industry, factor, ..., q_h10, ..., recall, hit, eid)")
    imp.add_argument("csv", type=Path, metavar="PATHS.csv")
    imp.add_argument("directory", type=Path, metavar="DIR")
    imp.add_argument("--q0", type=float, default=1.0, help="neutral prior (bounds [0, 2*q0]); default 1")
    imp.add_argument("--eta", type=float, default=10.0, help="formula learning rate; default 10")
    imp.set_defaults(func=_import)

    exp = sub.add_parser("export", help="write a store's paths as a path CSV")
    exp.add_argument("directory", type=Path, metavar="DIR")
    exp.add_argument("csv", type=Path, metavar="PATHS.csv")
    exp.set_defaults(func=_export)

    app = sub.add_parser("apply", help="apply a Parquet file of updates (eid, r_<horizon>...) in row order and save; "
                                       "eid is the store's external id (the imported CSV's eid)")
    app.add_argument("--store", type=Path, required=True, metavar="DIR")
    app.add_argument("--updates", type=Path, required=True, metavar="FILE.parquet")
    app.add_argument("--rule", choices=("formula", "asymmetric", "binary"), default="formula")
    app.add_argument("--eta", type=float, default=None, help="formula learning rate (default: the store's)")
    app.add_argument("--q0", type=float, default=None, help="neutral prior (default: the store's)")
    app.add_argument("--eta-task", type=float, default=None, help="asymmetric decay in [0, 1] (default: the store's)")
    app.set_defaults(func=_apply)

    show = sub.add_parser("show", help="print size, depth, counts and per-horizon reliability histograms")
    show.add_argument("directory", type=Path, metavar="DIR")
    show.add_argument("--bins", type=int, default=10)
    show.add_argument("--tree", action="store_true", help="also print every active path with Q, recall and hit")
    show.add_argument("--png", type=Path, default=None, help="also draw the tree to this PNG file")
    show.add_argument("--horizon", default=None, help="horizon that colours the drawing (e.g. h20 or 20)")
    show.add_argument("--json", action="store_true",
                      help="print the summary (and with --tree every active path) as one JSON object")
    show.set_defaults(func=_show)


def _import(args) -> int:
    from engine.store.pathcsv import read_path_csv

    _check_flags(args, ("--eta", 0.0, None, False), ("--q0", 0.0, None, True))
    store, sparse = read_path_csv(args.csv, q0=args.q0, eta=args.eta)
    ck = _save(store, args.directory)
    ext = store.external_ids
    note = (f" (the CSV's eids {int(ext[0])}..{int(ext[-1])} are kept; updates and exports use them)"
            if sparse else "")
    print(f"imported {store.n_experiences} paths, {store.n_nodes - 1} nodes into {ck}{note}")
    return 0


def _save(store, directory: Path) -> Path:
    """``store.save(directory)``, a failed write (a full disk) named as the store's error: the save is atomic,
    so the folder keeps its previous checkpoint."""
    try:
        return store.save(directory)
    except OSError as exc:
        raise PersistenceError(f"{directory}: the store could not be written ({exc.strerror or exc}); "
                               "its previous checkpoint, if any, is kept") from exc


def _export(args) -> int:
    from engine.store import ExperienceStore
    from engine.store.pathcsv import write_path_csv

    n = write_path_csv(ExperienceStore.load(args.directory), args.csv)
    print(f"exported {n} paths to {args.csv}")
    return 0


def read_updates(path: Path, horizons) -> tuple[np.ndarray, np.ndarray]:
    """``(eids i8[b], rewards f8[b, H])`` from a Parquet file with columns eid, r_<horizon>..."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise InputError(f"updates file {path} does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"updates file {path} is not a readable Parquet file: {exc}") from exc
    want = ["eid"] + [f"r_{h}" for h in horizons]
    missing = [c for c in want if c not in table.column_names]
    if missing:
        raise InputError(f"updates file {path} lacks column(s) {', '.join(missing)}; expected {', '.join(want)}")
    extra = [c for c in table.column_names if c not in want]
    if extra:
        raise InputError(f"updates file {path} has unexpected column(s) {', '.join(extra)}; "
                         f"the store's horizons are {list(horizons)} (expected {', '.join(want)})")
    for c in want:
        if table.column(c).null_count:
            raise InputError(f"updates file {path}: column {c} has missing values")
        t = table.column(c).type
        numeric = pa.types.is_integer(t) or (c != "eid" and pa.types.is_floating(t))
        if not numeric:  # bool, timestamps, text: never silently cast into rewards or ids
            want_type = "integer" if c == "eid" else "numeric (integer or float)"
            raise InputError(f"updates file {path}: column {c} must be {want_type}, got Arrow type {t}")
    eids = table.column("eid").to_numpy()
    if eids.dtype.kind not in "iu":
        raise InputError(f"updates file {path}: column eid must be integer, got {eids.dtype}")
    rewards = np.stack([table.column(f"r_{h}").to_numpy() for h in horizons], axis=1) if table.num_rows else np.zeros((0, len(horizons)))
    if rewards.dtype.kind not in "iuf":
        raise InputError(f"updates file {path}: r_ columns must be numeric, got {rewards.dtype}")
    return eids, rewards


def _check_flags(args, *flags: tuple[str, float | None, float | None, bool]) -> None:
    """Range-check numeric flags at the door, naming the flag: ``(name, low, high, low_exclusive)``."""
    for name, low, high, open_low in flags:
        v = getattr(args, name.lstrip("-").replace("-", "_"))
        if v is None:
            continue
        if not np.isfinite(v) or (low is not None and (v <= low if open_low else v < low)) \
                or (high is not None and v > high):
            rng = f"{'>' if open_low else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
            raise InputError(f"{name} must be a finite number {rng}, got {v}")


def _apply(args) -> int:
    from engine.store import ExperienceStore

    _check_flags(args, ("--eta", 0.0, None, False), ("--q0", 0.0, None, True), ("--eta-task", 0.0, 1.0, False))

    store = ExperienceStore.load(args.store)
    eids, rewards = read_updates(args.updates, store.horizons)
    rows = store.rows_of(eids, name=f"updates file {args.updates}")  # external ids -> dense rows, at the boundary
    store.update(rows, rewards, args.rule, eta=args.eta, q0=args.q0, eta_task=args.eta_task)
    ck = _save(store, args.store)
    print(f"applied {len(eids)} {args.rule} updates; saved {ck}")
    return 0


def _histogram(values: np.ndarray, lo: float, hi: float, bins: int, width: int = 40) -> list[str]:
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
    top = max(int(counts.max()) if counts.size else 0, 1)
    return [f"    [{edges[i]:6.3f}, {edges[i + 1]:6.3f}{']' if i == bins - 1 else ')'} {int(c):>10d} "
            f"{'#' * int(round(width * c / top))}" for i, c in enumerate(counts)]


def _show(args) -> int:
    from engine.store import ExperienceStore

    if args.bins < 1:
        raise InputError(f"--bins must be >= 1, got {args.bins}")
    hc = None
    st = ExperienceStore.load(args.directory)
    if args.horizon is not None:
        name = f"h{args.horizon}" if str(args.horizon).isdigit() else str(args.horizon)
        if name not in st.horizons:
            raise InputError(f"--horizon must be one of {list(st.horizons)}, got {args.horizon!r}")
        hc = st.horizons.index(name)
    depth = st.node_column("depth")
    nb = st.nbytes()
    out = [
        f"store {args.directory}",
        f"  experiences {st.n_experiences}, nodes {st.n_nodes - 1} (+ root), horizons {list(st.horizons)}",
        f"  depth: max {int(depth.max()) if depth.size else 0} of L={st.depth}; nodes per level: "
        + ", ".join(f"{name}={int((depth == i + 1).sum())}" for i, name in enumerate(st.levels)),
        f"  recall total {int(st.recall.sum())}, hit total {int(st.hit.sum())}; "
        f"ledger {len(st.ledger)} entries ({st.ledger.n_pending} pending); "
        f"active experiences {int(st.active.sum())} ({int((~st.active).sum())} merged)",
        f"  memory {(nb['experiences'] + nb['nodes'] + nb['tables']) / 2**20:.1f} MiB; q0={st.q0}, "
        f"bounds [{st.q_min}, {st.q_max}], eta={st.eta}",
    ]
    rel = st.reliability
    if args.json:
        print(json.dumps(_summary(st, args.directory, depth, nb, args.bins, args.tree)))
        return _draw(st, args, hc)
    for j, h in enumerate(st.horizons):
        col = rel[:, j]
        stats = f"mean {col.mean():.4f}" if col.size else "empty"
        out.append(f"  reliability q_{h} ({stats}):")
        out.extend(_histogram(col, st.q_min, st.q_max, args.bins))
    if args.tree:
        out.append(render_tree(st))
    print("\n".join(out), file=sys.stdout)
    return _draw(st, args, hc)


def _draw(st, args, hc) -> int:
    if args.png is not None:
        from engine.store.plot import plot_tree

        plot_tree(st, args.png, title=f"experience tree from {args.directory}", horizon_col=hc)
        print(f"drawn to {args.png}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _summary(st, directory, depth, nb, bins: int, tree: bool) -> dict:
    """``store show --json``: the text summary's figures (histograms as counts per bin), and every active path."""
    rel = st.reliability
    edges = np.linspace(st.q_min, st.q_max, bins + 1)
    out = {
        "store": str(directory), "experiences": int(st.n_experiences), "nodes": int(st.n_nodes - 1),
        "horizons": list(st.horizons), "depth": int(st.depth), "levels": list(st.levels),
        "nodes_per_level": {name: int((depth == i + 1).sum()) for i, name in enumerate(st.levels)},
        "recall_total": int(st.recall.sum()), "hit_total": int(st.hit.sum()),
        "ledger_entries": len(st.ledger), "ledger_pending": int(st.ledger.n_pending),
        "active": int(st.active.sum()), "merged": int((~st.active).sum()),
        "memory_mib": (nb["experiences"] + nb["nodes"] + nb["tables"]) / 2**20,
        "q0": float(st.q0), "q_min": float(st.q_min), "q_max": float(st.q_max), "eta": float(st.eta),
        "reliability": {h: {"mean": float(rel[:, j].mean()) if rel.shape[0] else None, "bin_edges": edges.tolist(),
                            "counts": np.histogram(rel[:, j], bins=edges)[0].tolist()}
                        for j, h in enumerate(st.horizons)},
    }
    if tree:
        out["paths"] = [{"eid": int(e), "path": list(st.path_texts(int(e))), "q": st.reliability[e].tolist(),
                         "recall": int(st.recall[e]), "hit": int(st.hit[e])} for e in np.flatnonzero(st.active)]
    return out


def render_tree(st) -> str:
    """Indented text of the active paths: each level once, then each leaf with Q, recall and hit."""
    active = np.flatnonzero(st.active)
    paths = sorted(((tuple(st.path_texts(int(e))), int(e)) for e in active), key=lambda x: x[0])
    q, recall, hit = st.reliability, st.recall, st.hit
    lines = [f"tree: {len(paths)} active paths; Q per horizon ({'/'.join(st.horizons)})"]
    last: tuple = ()
    for p, e in paths:
        common = 0
        while common < min(len(last), len(p) - 1) and last[common] == p[common]:
            common += 1
        for lev in range(common, len(p) - 1):
            lines.append("  " * (lev + 1) + p[lev])
        last = p[:-1]
        qs = " ".join(f"{x:.2f}" for x in q[e])
        lines.append("  " * len(p) + f"[{qs}] recall={int(recall[e])} hit={int(hit[e])}  {p[-1]}")
    return "\n".join(lines)
