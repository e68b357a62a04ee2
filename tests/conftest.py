"""Tests run on the CPU: kernels in Numba's CUDA simulator, compile checks through the real compiler in a
subprocess (the simulator and the compiler cannot share one process)."""
import os
import tempfile

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("AUTOTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="autotune-test-cache-"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng(request):
    """Fresh random data for every test, seeded from the test's name so a failure can be replayed."""
    return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)
