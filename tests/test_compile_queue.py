"""The compile queue hands variants to the GPU threads as their own compiles finish, bounded, with timeouts."""
import concurrent.futures as cf
import time

from autotune.tuning.compile_queue import CompileQueue


def queue_of(limit: int, timeout_s: float = 60.0) -> tuple[CompileQueue, dict[str, cf.Future]]:
    """A queue whose compiles are futures the test settles by hand, by job name."""
    futures: dict[str, cf.Future] = {}

    def submit(job: str) -> cf.Future:
        futures[job] = cf.Future()
        futures[job].set_running_or_notify_cancel()
        return futures[job]

    return CompileQueue(submit, limit, timeout_s), futures


def test_a_slow_compile_holds_up_no_variant_behind_it():
    compiles, futures = queue_of(limit=3)
    for job in ("slow", "b", "c"):
        assert compiles.reserve(timeout_s=0)
        compiles.submit(f"payload {job}", job)
    assert not compiles.reserve(timeout_s=0.05)  # three in flight: no room for a fourth
    futures["c"].set_result("c built")
    futures["b"].set_result("b built")
    got = [compiles.get(), compiles.get()]
    assert [g.payload for g in got] == ["payload c", "payload b"]
    assert [g.future.result() for g in got] == ["c built", "b built"] and not any(g.timed_out for g in got)
    assert not compiles.reserve(timeout_s=0.05)  # handed on is not done: the place is held until released
    compiles.release()
    assert compiles.reserve(timeout_s=0)
    futures["slow"].set_result("slow built")
    assert compiles.get().payload == "payload slow"


def test_a_compile_past_its_timeout_is_handed_on_once_as_timed_out():
    compiles, futures = queue_of(limit=2, timeout_s=0.3)
    compiles.reserve(timeout_s=0)
    compiles.submit("hung", "hung")
    start = time.monotonic()
    item = compiles.get()
    assert item.payload == "hung" and item.timed_out and not item.future.done()
    assert 0.25 < time.monotonic() - start < 3
    futures["hung"].set_result("late")  # finishing after all hands it on no second time
    assert compiles.take_waiting() == []


def test_taking_the_waiting_variants_returns_them_all_once_and_frees_their_places():
    compiles, futures = queue_of(limit=3)
    for job in ("compiling", "compiled", "measuring"):
        compiles.reserve(timeout_s=0)
        compiles.submit(job, job)
    futures["measuring"].set_result("built")
    assert compiles.get().payload == "measuring"  # a GPU thread has it: not waiting
    futures["compiled"].set_result("built")
    assert sorted(compiles.take_waiting()) == ["compiled", "compiling"]
    assert compiles.reserve(timeout_s=0) and compiles.reserve(timeout_s=0)
    assert not compiles.reserve(timeout_s=0.05)  # the one being measured still holds its place
    futures["compiling"].set_result("built")  # taken away: never handed on
    compiles.close(readers=1)
    assert compiles.get() is None
