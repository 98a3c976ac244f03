"""``toe tree show DIR``: print (or draw) a finance experience tree saved by a run.

``DIR`` is a run folder holding ``tree.csv`` (as ``toe run configs/finance-synthetic.toml``
writes it) or a path-table CSV itself (columns ``industry, factor,
analysis_direction, q_h<horizon>..., recall, hit``).
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import InputError


def register(subparsers) -> None:
    """Add this module's subcommands to the `toe` parser."""
    p = subparsers.add_parser("tree", help="inspect a finance experience tree (path CSV)")
    sub = p.add_subparsers(dest="tree_command", metavar="SUBCOMMAND")
    show = sub.add_parser("show", help="print the tree of a run folder (or draw it with --png)")
    show.add_argument("path", type=Path, help="run folder with tree.csv, or a path-table CSV")
    show.add_argument("--png", type=Path, default=None, help="also draw the tree to this PNG file")
    show.add_argument("--horizon", type=int, default=None, help="horizon (days) that colours the drawing")
    show.set_defaults(func=_show)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _tree_file(path: Path) -> Path:
    if path.is_dir():
        f = path / "tree.csv"
        if not f.is_file():
            raise InputError(f"{str(path)!r} has no tree.csv; pass a run folder of a finance run or a path CSV")
        return f
    if not path.is_file():
        raise InputError(f"{str(path)!r} does not exist")
    return path


def render(tree) -> str:
    """Indented text of the active paths: industry, factor, then each direction with Q, recall and hit."""
    import numpy as np

    eids = np.flatnonzero(tree.active)
    paths = sorted(((tree.path(int(e)), int(e)) for e in eids), key=lambda x: x[0])
    hs = "/".join(f"{h}d" for h in tree.horizons)
    lines = [f"experience tree: {len(paths)} paths, {tree.n_nodes - 1} nodes; Q per horizon ({hs})"]
    last_ind = last_fac = None
    for (ind, fac, d), e in paths:
        if ind != last_ind:
            lines.append(ind)
            last_ind, last_fac = ind, None
        if fac != last_fac:
            lines.append(f"  {fac}")
            last_fac = fac
        q = " ".join(f"{x:.2f}" for x in tree.q[e])
        lines.append(f"    [{q}] recall={int(tree.recall[e])} hit={int(tree.hit[e])}  {d}")
    return "\n".join(lines)


def _show(args) -> int:
    from engine.finance.tree import ExperienceTree

    tree = ExperienceTree.load_csv(_tree_file(args.path))
    hc = None
    if args.horizon is not None:
        if args.horizon not in tree.horizons:
            raise InputError(f"--horizon must be one of {list(tree.horizons)}, got {args.horizon}")
        hc = tree.horizons.index(args.horizon)
    print(render(tree))
    if args.png is not None:
        from engine.finance.report import plot_tree

        plot_tree(tree, args.png, title=f"experience tree from {args.path}", horizon_col=hc)
        print(f"drawn to {args.png}")
    return 0
