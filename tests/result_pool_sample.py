"""Drive autotune.runtime.result_pool with Numba's real array and memory classes (not the simulator's) over a stand-in
CUDA context whose blocks are numbered addresses, no GPU needed.

Run by tests/test_result_pool.py in its own process. Prints one JSON object of what was observed: pointers
handed out in each situation, the blocks the stand-in allocated and freed, the strides and CUDA Array Interface
of the arrays made.
"""
import gc
import json

import numpy as np
from numba.cuda.cudadrv import driver
from numba.cuda.cudadrv.devicearray import DeviceNDArray

from autotune.runtime import arrays, result_pool


class Context:
    """memalloc as Numba's context has it: a MemoryPointer whose finalizer frees the block (here: records it)."""

    def __init__(self):
        self.next_address = 1 << 20
        self.allocated: list[int] = []
        self.freed: list[int] = []
        self.fail_next = 0

    def memalloc(self, size: int):
        if self.fail_next:
            self.fail_next -= 1
            raise MemoryError("stand-in: out of memory")
        address, self.next_address = self.next_address, self.next_address + size + 4096
        self.allocated.append(address)
        return driver.MemoryPointer(self, driver.binding.CUdeviceptr(address), size,
                                    finalizer=lambda: self.freed.append(address))


class Stream:
    def __init__(self, handle: int):
        self.handle = handle

    def __int__(self):
        return self.handle


def pointer(d) -> int:
    return d.__cuda_array_interface__["data"][0]


def main() -> None:
    context = Context()
    result_pool._numba().current_context = lambda: context
    seen: dict = {}
    seen["strides"] = [[list(result_pool.empty(s, "f4", o).strides), list(np.empty(s, "f4", order=o).strides)]
                       for s in ((3, 5, 7), (1,), (4, 1), (2, 3)) for o in "CF"]
    a = result_pool.empty((3, 5), np.float64)
    interface = a.__cuda_array_interface__
    seen["interface"] = [list(interface["shape"]), interface["typestr"], a.dtype.name]
    constructed = DeviceNDArray((3, 5), (40, 8), np.float64, gpu_data=a.gpu_data)
    seen["as_constructed"] = {"type": type(a) is DeviceNDArray, "attributes": vars(a).keys() == vars(constructed).keys()
                              and all(vars(a)[k] == v for k, v in vars(constructed).items() if k != "_dummy"),
                              "dummy": vars(a)["_dummy"] is vars(constructed)["_dummy"]}
    saved = result_pool.CONSTRUCTED
    result_pool.CONSTRUCTED = saved | {"attribute of another numba-cuda"}
    result_pool._constructed.cache_clear()
    fallback = result_pool.empty((2, 7), np.float32)
    seen["as_constructed"]["fallback"] = (result_pool._constructed((fallback.shape, fallback.strides, fallback.dtype))
                                          is None and fallback.shape == (2, 7) and fallback.strides == (28, 4))
    result_pool.CONSTRUCTED = saved
    result_pool._constructed.cache_clear()

    first = result_pool.empty((1000,), "f4")
    p_first = pointer(first)
    del first
    second = result_pool.empty((1000,), "f4")
    third = result_pool.empty((1000,), "f4")
    seen["reuse"] = {"after_drop": pointer(second) == p_first, "while_alive": pointer(third) != pointer(second)}

    p_second = pointer(second)
    view = DeviceNDArray((990,), (4,), "f4", gpu_data=second.gpu_data.view(40))  # what second[10:] makes
    del second
    fourth = result_pool.empty((1000,), "f4")
    seen["view"] = {"kept_by_view": pointer(fourth) != p_second, "view_pointer": pointer(view) == p_second + 40,
                    "arrays_pointer": arrays.device_pointer(view) == p_second + 40}
    del view
    fifth = result_pool.empty((1000,), "f4")
    seen["view"]["after_view_dropped"] = pointer(fifth) == p_second

    on_seven = result_pool.empty((1000,), "f4", stream=Stream(7))
    p_seven = pointer(on_seven)
    del on_seven
    seen["streams"] = {"other_stream": pointer(result_pool.empty((1000,), "f4")) != p_seven,
                       "same_stream": pointer(result_pool.empty((1000,), "f4", stream=Stream(7))) == p_seven}

    other = Context()
    given = result_pool.empty((1000,), "f4", context=other)
    seen["context"] = {"given_used": other.allocated == [pointer(given)],
                       "of": result_pool.context_of(given) is other and result_pool.context_of(np.zeros(2)) is None}
    p_given = pointer(given)
    del given
    seen["context"]["kept_apart"] = pointer(result_pool.empty((1000,), "f4")) != p_given

    small = result_pool.empty((100,), "f4")  # 400 bytes: a 512-byte block
    p_small = pointer(small)
    del small
    seen["rounded"] = pointer(result_pool.empty((128,), "f4")) == p_small

    gc.collect()
    result_pool.free_all_blocks()
    freed_before = len(context.freed)
    result_pool._cache.limit = 1024
    blocks = [result_pool.empty((128,), "f4") for _ in range(3)]
    addresses = [pointer(b) for b in blocks]
    del blocks
    seen["limit"] = {"cached_bytes": result_pool.cached_bytes(),
                     "freed": len(set(context.freed[freed_before:]) & set(addresses))}
    result_pool.free_all_blocks()
    seen["free_all"] = {"cached_bytes": result_pool.cached_bytes(),
                        "all_freed": set(addresses) <= set(context.freed)}
    result_pool._cache.limit = result_pool.MAX_CACHED_BYTES

    kept = result_pool.empty((256,), "f4")
    del kept
    context.fail_next = 1
    count = len(context.allocated)
    retried = result_pool.empty((4096,), "f4")
    seen["out_of_memory"] = {"retried": len(context.allocated) == count + 1 and retried is not None,
                             "cache_given_back": result_pool.cached_bytes() == 0}
    context.fail_next = 1
    try:
        result_pool.empty((8192,), "f4")
        seen["out_of_memory"]["nothing_cached_raises"] = False
    except MemoryError:
        seen["out_of_memory"]["nothing_cached_raises"] = True
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
