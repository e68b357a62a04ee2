"""Result arrays come from a cache of freed blocks kept per stream and size (autotune/runtime/result_pool.py).

The cache's rules are checked directly; the Numba adapter (real DeviceNDArray and MemoryPointer, a stand-in
context) in its own process (tests/result_pool_sample.py), since this one runs the simulator, where results are
plain device arrays.
"""
import json

import numpy as np
from test_compile import run_compiler_script

from autotune.runtime import result_pool
from autotune.runtime.result_pool import BlockCache


def test_the_cache_hands_back_a_block_of_its_key_once_and_drops_blocks_past_its_limit():
    cache = BlockCache(limit=2048)
    assert cache.take(("s0", 512), 512) is None
    cache.put(("s0", 512), 512, "a")
    cache.put(("s1", 512), 512, "b")
    assert cache.take(("s2", 512), 512) is None
    assert cache.take(("s1", 512), 512) == "b" and cache.take(("s1", 512), 512) is None
    cache.put(("s0", 1024), 1024, "c")
    cache.put(("s0", 1024), 1024, "d")  # 512 + 1024 + 1024 > 2048: dropped
    assert cache.cached_bytes == 1536
    assert cache.take(("s0", 1024), 1024) == "c" and cache.take(("s0", 1024), 1024) is None
    cache.clear()
    assert cache.cached_bytes == 0 and cache.take(("s0", 512), 512) is None


def test_in_the_simulator_results_are_plain_device_arrays_of_the_shape_dtype_and_order(rng):
    for shape, order in (((3, 5, 7), "C"), ((3, 5, 7), "F"), ((0, 4), "C"), ((), "C")):
        d = result_pool.empty(shape, "float32", order)
        assert d.shape == shape and d.dtype == np.float32
        want = np.empty(shape, np.float32, order=order).strides
        assert d.strides == want
        host = rng.standard_normal(shape).astype(np.float32)
        d.copy_to_device(host)
        assert np.array_equal(d.copy_to_host(), host)


def test_numba_arrays_on_cached_blocks_reuse_per_stream_and_size_and_never_while_alive():
    proc = run_compiler_script("result_pool_sample.py", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    for ours, numpys in seen["strides"]:
        assert ours == numpys
    assert seen["interface"] == [[3, 5], "<f8", "float64"]
    assert seen["as_constructed"] == {"type": True, "attributes": True, "dummy": True, "fallback": True}
    assert seen["reuse"] == {"after_drop": True, "while_alive": True}
    assert seen["view"] == {"kept_by_view": True, "view_pointer": True, "arrays_pointer": True,
                            "after_view_dropped": True}
    assert seen["streams"] == {"other_stream": True, "same_stream": True}
    assert seen["context"] == {"given_used": True, "of": True, "kept_apart": True}
    assert seen["rounded"] is True
    assert seen["limit"] == {"cached_bytes": 1024, "freed": 1}
    assert seen["free_all"] == {"cached_bytes": 0, "all_freed": True}
    assert seen["out_of_memory"] == {"retried": True, "cache_given_back": True, "nothing_cached_raises": True}
