"""On the GPU: a study whose kernel changed under it writes nothing wrong into the database (issue 52, item 1).

A copy of the example softmax family is tuned into a scratch database; then its template is edited so that it
computes a wrong result (every row's sum doubled), and the same tuning command runs again; then once more with a
template that no longer compiles. Each later run must start a fresh study (saying so), find no winner (its variants
fail their checks), leave the database file byte for byte as the first run wrote it and exit 1; a lookup of the
entry must warn that its kernel changed since it was tuned, and `autotune db check` must fail on it.

    python lab/stale_study_gpu.py [--device 0] [--shape 64x256] [--trials 6] [--keep]
    python lab/stale_study_gpu.py --simulator --shape 3x37 --trials 2      (the same in the CUDA simulator)

Prints one line per check (PASS/FAIL) and exits 1 if any failed; --keep leaves the scratch folder (printed) for
inspection. Nothing outside the scratch folder is written.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Every row's scale 1 / sum (each line that computes it): doubled, or followed by a line that is not Python.
WRONG = ("    r = {{ dtype }}(1) / s\n", "    r = {{ dtype }}(2) / s\n")
BROKEN = ("    r = {{ dtype }}(1) / s\n", "    r = {{ dtype }}(1) / s\n    this is not Python\n")
LOOKUP = """
import json, sys, warnings
import autotune
autotune.register_family(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    autotune.get_best_kernel("softmax", tuple(int(v) for v in sys.argv[2].split("x")), db=sys.argv[3])
print(json.dumps([str(w.message) for w in caught if issubclass(w.category, autotune.TunedKernelWarning)]))
"""


def run(args: list[str], simulator: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="0")
    parser.add_argument("--shape", default="64x256")
    parser.add_argument("--trials", default="6")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--simulator", action="store_true", help="in the CUDA simulator (a check of this script)")
    opts = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="autotune-stale-study-"))
    family = scratch / "softmax"
    shutil.copytree(ROOT / "examples" / "softmax", family)
    template = family / "softmax.py.j2"
    original = template.read_text()
    where = ["--simulator", "--write-db", "--compile-workers", "1"] if opts.simulator else ["--device", opts.device]
    tune = ["-m", "autotune", "tune", "--family", str(family), *where, "--shape", opts.shape, "--trials", opts.trials,
            "--state-dir", str(scratch / "state"), "--db", str(scratch / "db")]
    failures = 0

    def check(ok: bool, what: str, detail: str = "") -> None:
        nonlocal failures
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {what}" + (f"\n{detail[-3000:]}" if not ok and detail else ""), flush=True)

    first = run(tune, opts.simulator)
    files = sorted((scratch / "db").glob("*.yaml"))
    check(first.returncode == 0 and len(files) == 1, "the first run tunes and writes its winner",
          first.stdout + first.stderr)
    if failures:
        return 1
    written = files[0].read_bytes()
    check(b"source_hash: " in written, "the entry records the hash of the source it measured")
    for name, (old, new) in (("a wrong result", WRONG), ("no longer compiling", BROKEN)):
        assert original.count(old) >= 1, f"the template changed: {old!r} is not in it"
        template.write_text(original.replace(old, new))
        again = run(tune, opts.simulator)
        out = again.stdout + again.stderr
        check(again.returncode == 1, f"with {name}, the run finds no winner (exit 1)", out)
        check("the kernel changed since the study" in out and "starting a fresh study" in out,
              f"with {name}, a fresh study is started and said", out)
        check(files[0].read_bytes() == written, f"with {name}, the database file is left as it was")
    template.write_text(original.replace(*WRONG))
    lookup = run(["-c", LOOKUP, str(family), opts.shape, str(scratch / "db")], opts.simulator)
    notes = json.loads(lookup.stdout.strip().splitlines()[-1]) if lookup.returncode == 0 else []
    check(any("changed since it was tuned" in n for n in notes), "a lookup warns that the entry's kernel changed",
          lookup.stdout + lookup.stderr)
    db_check = run(["-m", "autotune", "db", "check", "--db", str(scratch / "db"), "--family", str(family)],
                   opts.simulator)
    check(db_check.returncode == 1 and "stale" in db_check.stdout, "`autotune db check` fails on the stale entry",
          db_check.stdout + db_check.stderr)
    if opts.keep:
        print(f"scratch folder: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{'all checks passed' if not failures else f'{failures} check(s) failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
