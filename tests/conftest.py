"""Tests run on the CPU: kernels in Numba's CUDA simulator, compile checks through the real compiler in a
subprocess (the simulator and the compiler cannot share one process)."""
import os
import shutil
import tempfile
import zlib

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
if "AUTOTUNE_CACHE_DIR" not in os.environ:  # the controlling process makes it; xdist workers inherit it
    os.environ["AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="autotune-test-cache-")
    os.environ["AUTOTUNE_TEST_CACHE_OWNED"] = "1"
if "AUTOTUNE_TEST_SEED" not in os.environ:  # one per run, shared by the xdist workers (they inherit it)
    os.environ["AUTOTUNE_TEST_SEED"] = str(int.from_bytes(os.urandom(4), "little"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_report_header(config):
    return f"random data: AUTOTUNE_TEST_SEED={os.environ['AUTOTUNE_TEST_SEED']} (set it to replay this run's data)"


@pytest.fixture
def rng(request):
    """Fresh random data for every test and run: seeded from the test's name and the run's seed (printed in the
    header; ``AUTOTUNE_TEST_SEED=N pytest ...`` replays a run's data). ``hash()`` of the name, as before, was salted
    per process, so a failure could not be replayed."""
    seed = zlib.crc32(request.node.nodeid.encode()) ^ int(os.environ["AUTOTUNE_TEST_SEED"])
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server on loopback: $AUTOTUNE_TEST_POSTGRES, else a throwaway one started from Debian's
    postgresql package (installed by .ci/run); the test is skipped, saying so, when neither is there."""
    import glob
    import subprocess
    from pathlib import Path

    if os.environ.get("AUTOTUNE_TEST_POSTGRES"):
        yield os.environ["AUTOTUNE_TEST_POSTGRES"]
        return
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        pytest.skip("no PostgreSQL: install Debian's postgresql package or set AUTOTUNE_TEST_POSTGRES=<url>")
    out = subprocess.run(["bash", str(Path(__file__).parent / "start_postgres.sh")], capture_output=True, text=True)
    if out.returncode:
        pytest.fail(f"could not start PostgreSQL:\n{out.stdout}{out.stderr}")
    url, data = out.stdout.split()
    yield url
    stop = [f"{bins[-1]}/pg_ctl", "-D", data, "-m", "fast", "stop"]
    subprocess.run(["runuser", "-u", "postgres", "--", *stop] if os.getuid() == 0 else stop, capture_output=True)
    shutil.rmtree(data, ignore_errors=True)


def pytest_configure(config):
    """Each xdist worker runs on CPUs of its own, an equal share (the processes it starts inherit them), where there
    are at least as many CPUs as workers. The simulator runs a block's threads as Python threads that hand the
    interpreter to each other at every barrier; a hand-off to a thread woken on a CPU busy with another worker's
    compile waits for that CPU's time slice: a 1.4 s simulator test took 10 s beside two busy processes on a
    2-CPU machine, and 0.95 s on a CPU of its own with both busy processes on the other (benchmarks/NOTES.md,
    item 52)."""
    worker = getattr(config, "workerinput", {}).get("workerid", "")
    count = int(getattr(config, "workerinput", {}).get("workercount", 0))
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker.startswith("gw") and 0 < count <= len(cpus):
        share = len(cpus) // count
        index = int(worker[2:]) % count
        os.sched_setaffinity(0, set(cpus[index * share:(index + 1) * share]))


def pytest_sessionfinish(session, exitstatus):
    """The generated-kernel cache this run made is removed when the whole run ends (not by a worker, which shares
    it with the others)."""
    if not hasattr(session.config, "workerinput") and os.environ.pop("AUTOTUNE_TEST_CACHE_OWNED", None):
        shutil.rmtree(os.environ["AUTOTUNE_CACHE_DIR"], ignore_errors=True)


#: tests that take half a minute or more on a 2-core machine (`--durations` of a CI run), as node id parts
LONG_TESTS = ("test_numba_replacements.py::", "test_compile.py::test_covering_samples_compile", "test_readme.py::",
              "test_tuner.py::test_failures_are_recorded", "test_compile.py::test_batched_kernels_offset")


def pytest_collection_modifyitems(config, items):
    """The long tests first, the rest in their order: the workers' last minutes are then short tests, which the
    idle one steals (``--dist worksteal``), not a long one started late while the other worker waits."""
    items.sort(key=lambda item: not any(part in item.nodeid for part in LONG_TESTS))
