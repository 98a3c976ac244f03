"""``toe flex show|stats|prune LIBRARY``: inspect and maintain a FLEX experience library (engine.flex.library)."""

from __future__ import annotations

import json
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("flex", help="FLEX experience library: show, stats, prune")
    sub = p.add_subparsers(dest="flex_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    show = sub.add_parser("show", help="print the library's records (newest last)")
    show.add_argument("library", type=Path)
    show.add_argument("--last", type=int, default=0, metavar="N", help="only the last N records")
    show.add_argument("--domain", default="", help="only this domain's records")
    show.add_argument("--json", action="store_true", help="one JSON record per line, as stored")
    show.set_defaults(func=_show)

    st = sub.add_parser("stats", help="records, successes, per-domain counts, success rate per window, plateau")
    st.add_argument("library", type=Path)
    st.add_argument("--window", type=int, default=50, help="performance tracking window (default 50)")
    st.set_defaults(func=_stats)

    pr = sub.add_parser("prune", help="archive near-duplicates / the oldest records; --repair cuts a torn last line")
    pr.add_argument("library", type=Path)
    pr.add_argument("--max-records", type=int, default=0, metavar="N", help="keep the newest N records (0 = all)")
    pr.add_argument("--dedup", action="store_true",
                    help="archive exact duplicates (same domain, problem and outcome), keeping the newest")
    pr.add_argument("--repair", action="store_true", help="cut a torn last line (a crash mid-append)")
    pr.set_defaults(func=_prune)


def _open(path: Path, repair: bool = False):
    from engine.errors import InputError
    from engine.flex.library import ExperienceLibrary

    if not path.is_file():
        raise InputError(f"FLEX library {str(path)!r} does not exist")
    return ExperienceLibrary(path, repair=repair)


def _show(args) -> int:
    lib = _open(args.library)
    recs = [e for e in lib.experiences if not args.domain or e.domain == args.domain]
    if args.last:
        recs = recs[-args.last:]
    for e in recs:
        if args.json:
            print(json.dumps(e.to_dict(), ensure_ascii=False, sort_keys=True))
            continue
        mark = "success" if e.is_correct else f"failure ({e.failure_reason or '-'})"
        print(f"#{e.step} [{e.domain}, {e.difficulty}] {mark}  key={e.key}  {e.timestamp}")
        print(f"  problem:    {e.problem}")
        print(f"  solution:   {e.solution_attempt}")
        print(f"  reflection: {e.reflection}")
    print(f"{len(recs)} of {len(lib.experiences)} records")
    return 0


def _stats(args) -> int:
    from engine.flex.library import stats
    from engine.flex.tracking import PlateauRule, tracking_report

    lib = _open(args.library)
    recs = sorted(lib.experiences, key=lambda e: e.step)
    out = stats(recs)
    out["tracking"] = tracking_report([float(e.is_correct) for e in recs], PlateauRule(window=args.window))
    out["archive"] = str(lib.archive_path) if lib.archive_path.exists() else None
    print(json.dumps(out, indent=2))
    return 0


def _prune(args) -> int:
    lib = _open(args.library, repair=args.repair)
    if lib.repaired_bytes:
        print(f"repaired: cut a torn last line of {lib.repaired_bytes} bytes")
    n = 0
    if args.dedup:
        newest: dict[tuple, str] = {}
        for e in sorted(lib.experiences, key=lambda e: e.step):
            newest[(e.domain, " ".join(e.problem.split()), e.is_correct)] = e.key
        keep = set(newest.values())
        n += lib.archive([e.key for e in lib.experiences if e.key not in keep], "duplicate")
    if args.max_records and len(lib.experiences) > args.max_records:
        old = sorted(lib.experiences, key=lambda e: e.step)[: len(lib.experiences) - args.max_records]
        n += lib.archive([e.key for e in old], "max_records")
    print(f"archived {n} records to {lib.archive_path}; {len(lib.experiences)} remain in {lib.path}")
    return 0
