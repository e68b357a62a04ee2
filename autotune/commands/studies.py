"""``autotune studies``: list, show and delete the tuning studies kept in a state folder or a shared storage.

    autotune studies list [PATTERN ...]                  every study: trials by state, fastest, last activity
    autotune studies show STUDY                          one study's trials: state, time, parameters or reason
    autotune studies delete PATTERN ... --yes            remove studies: their problems' next runs start afresh

Studies are named ``<problem key>@<gpu model>`` (``autotune studies list`` shows them); a PATTERN is a name or a
shell-style pattern (``'softmax/*'``, quoted for the shell). ``--state-dir`` and ``--storage`` are tune's.
"""
from __future__ import annotations

import argparse

from ..core.log import logger
from .family_option import add_family_option, chosen_all


def add_studies_parser(sub, common: argparse.ArgumentParser, chosen: list) -> None:
    s = sub.add_parser("studies", parents=[common], help="list, show or delete the tuning studies kept in a state "
                       "folder or storage", description="The studies tuning runs keep (every measurement, so that "
                       "a stopped run resumes and a later one starts from what was measured): list them, show one's "
                       "trials, or delete them so that their problems' next runs start afresh. The tuned database "
                       "is not touched.")
    actions = s.add_subparsers(required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="every study with its trials, fastest and last "
                                 "activity", description="List the studies, one line each.")
    listing.add_argument("patterns", nargs="*", metavar="PATTERN", help="only studies with this name or matching "
                         "this shell-style pattern (e.g. 'softmax/*')")
    add_family_option(listing, chosen, what="only this family's studies", repeatable=True)
    listing.set_defaults(run=run_list)
    show = actions.add_parser("show", parents=[common], help="one study's trials", description="Print a study's "
                              "trials: number, state, measured time, and the parameters or why it failed.")
    show.add_argument("name", metavar="STUDY", help="the study's name (autotune studies list shows them)")
    show.add_argument("--last", type=int, metavar="N", help="only the last N trials")
    show.set_defaults(run=run_show)
    delete = actions.add_parser("delete", parents=[common], help="delete studies", description="Delete the studies "
                                "named or matched; without --yes, only list what would be deleted.")
    delete.add_argument("patterns", nargs="+", metavar="PATTERN", help="a study's name or a shell-style pattern")
    delete.add_argument("--yes", action="store_true", help="delete them (without it: list them and delete nothing)")
    delete.set_defaults(run=run_delete)
    for p in (listing, show, delete):
        p.add_argument("--state-dir", default="autotune-out", help="where the journal files of the studies are "
                       "(default autotune-out/, as tune's)")
        p.add_argument("--storage", help="a study storage URL shared by several tuners instead (as tune's)")


def _places(args):
    from ..tuning.studies import places

    found = places(args.state_dir, args.storage, logger.warning)
    if not found:
        logger.warning(f"no studies under {args.state_dir}/studies (tuning runs keep them there; --state-dir DIR "
                       f"or --storage URL reads others)")
    return found


def run_list(args) -> int:
    from ..tuning.report import table
    from ..tuning.studies import matching, summary

    patterns = list(args.patterns) + [f"{f.name}/*" for f in chosen_all(args)]
    rows = []
    for place in _places(args):
        for name in matching(place, patterns):
            s = summary(place, name)
            rows.append([s.name, s.complete, s.failed, s.pruned, s.unfinished, s.best_ms,
                         s.last.strftime("%Y-%m-%d %H:%M") if s.last else None, s.where])
    print(table(["study", "measured", "failed", "pruned", "unfinished", "fastest ms", "last trial", "kept in"], rows))
    return 0


def run_show(args) -> int:
    from ..tuning.report import table
    from ..tuning.studies import matching, summary, trials

    for place in _places(args):
        if args.name not in matching(place, [args.name]):
            continue
        s = summary(place, args.name)
        print(f"{s.name} ({s.where}): {s.complete} measured, {s.failed} failed, {s.pruned} pruned, "
              f"{s.unfinished} unfinished" + (f"; fastest {s.best_ms:.4g} ms" if s.best_ms is not None else ""))
        if args.last is not None and args.last < 1:
            raise ValueError(f"--last must be at least 1, got {args.last}")
        shown = trials(place, args.name)
        rows = [[t.number, t.state.name.lower(), t.value, t.user_attrs.get("stage"),
                 t.user_attrs.get("reason") or t.user_attrs.get("config") or t.params] for t in shown]
        print(table(["trial", "state", "ms", "stage", "parameters or reason"], rows[-args.last:] if args.last
                    else rows))
        return 0
    raise ValueError(f"no study named {args.name!r} (autotune studies list shows them)")


def run_delete(args) -> int:
    from ..tuning.studies import delete, matching

    found = [(place, name) for place in _places(args) for name in matching(place, args.patterns)]
    if not found:
        raise ValueError(f"no study matches {' '.join(args.patterns)} (autotune studies list shows them)")
    for place, name in found:
        if args.yes:
            delete(place, name)
        print(f"{'deleted' if args.yes else 'would delete'} {name} ({place.where})")
    if not args.yes:
        print(f"nothing deleted: add --yes to delete these {len(found)} studies")
        return 1
    return 0
