"""Every trial of every study in a journal file, one JSON line each (state, config, timing, compile and
measure seconds, cache hits), then a summary per study: where the tuner's time went.

    python lab/study_dump.py autotune-out/studies/nvidia-h100-80gb-hbm3.journal > trials.jsonl
"""
import json
import statistics
import sys

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend


def main(path: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(path))
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        for t in trials:
            print(json.dumps({"study": summary.study_name, "number": t.number, "state": t.state.name,
                              "value": t.value, **t.user_attrs}, default=str))
        done = [t for t in trials if t.state.name == "COMPLETE" and "measure_s" in t.user_attrs]
        compile_s = [t.user_attrs["compile_s"] for t in trials if t.user_attrs.get("compile_s")]
        stages = {s: [t.user_attrs["measure_s"][s] for t in done] for s in ("load", "check", "time")}
        line = {"study": summary.study_name, "trials": len(trials),
                "states": {s: sum(t.state.name == s for t in trials) for s in ("COMPLETE", "FAIL", "PRUNED")},
                "compile_s_median": statistics.median(compile_s) if compile_s else None,
                "measure_s_median": {s: statistics.median(v) for s, v in stages.items() if v},
                "cache_hits": sum(t.user_attrs.get("cache_hits", 0) for t in done), "measured": len(done)}
        print(json.dumps(line), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
