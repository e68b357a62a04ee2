#!/usr/bin/env bash
# Check the upstream patches (docs/upstream/patches/*.diff) against the numba and numba-cuda of the active
# environment, which must be numba 0.68.1 and numba-cuda 0.30.4:
#   1. each patch applies alone (patch -p1 --dry-run) to a copy of the installed packages, and all apply together;
#   2. the lowered LLVM IR and the PTX of autotune's sample kernels and the reproducer's kernels are the same with
#      and without the patches (ir_digests.py, autotune's own replacements off: AUTOTUNE_NUMBA_PATCH=0);
#   --sim-tests:   numba-cuda's own tests (numba.cuda.tests.cudapy) in the CUDA simulator, without and with;
#   --numba-tests: numba's typing tests with the typing patch;
#   --gpu-tests:   numba-cuda's own tests on the GPU (needs one), without and with.
# The test runs need pytest and filecheck (numba-cuda's test helpers import it; a PYTHONPATH given is kept after
# the patched copy). Run from the repository root:
#   docs/upstream/verify.sh [--sim-tests] [--numba-tests] [--gpu-tests]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
site=$(python -c 'import numba, os; print(os.path.dirname(os.path.dirname(numba.__file__)))')
versions=$(python -c 'from importlib.metadata import version as v; print(v("numba"), v("numba-cuda"))')
if [ "$versions" != "0.68.1 0.30.4" ]; then
    echo "verify.sh: the patches are against numba 0.68.1 and numba-cuda 0.30.4; this environment has $versions" >&2
    exit 2
fi
[ -d "$site/numba_cuda" ] || { echo "verify.sh: no numba_cuda next to numba in $site" >&2; exit 2; }

given=${PYTHONPATH:-}
work=$(mktemp -d)
patched_path="$work/patched${given:+:$given}"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pristine" "$work/run"
cp -r "$site/numba" "$site/numba_cuda" "$work/pristine/"
for p in "$here"/patches/*.diff; do
    if ! (cd "$work/pristine" && patch -p1 --dry-run --quiet < "$p"); then
        echo "FAIL: $(basename "$p") does not apply" >&2
        exit 1
    fi
    echo "applies alone: $(basename "$p")"
done
cp -r "$work/pristine" "$work/patched"
for p in "$here"/patches/*.diff; do
    (cd "$work/patched" && patch -p1 --quiet < "$p")
done
echo "all patches applied together"

export AUTOTUNE_NUMBA_PATCH=0
python "$here/ir_digests.py" "$work/original.json" > "$work/original.log"
PYTHONPATH="$patched_path" python "$here/ir_digests.py" "$work/patched.json" > "$work/patched.log"
if cmp -s "$work/original.json" "$work/patched.json"; then
    echo "LLVM IR and PTX identical with and without the patches: $(grep -c '"ptx"' "$work/original.json") kernels"
else
    echo "FAIL: LLVM IR or PTX differ" >&2
    diff "$work/original.json" "$work/patched.json" >&2 || true
    exit 1
fi

# numba-cuda's tests use a fixture of its repository's conftest.py, which the installed package lacks
cat > "$work/run/conftest.py" <<'EOF'
import pytest


def pytest_addoption(parser):
    parser.addoption("--dump-failed-filechecks", action="store_true")


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request):
    request.cls._dump_failed_filechecks = request.config.getoption("dump_failed_filechecks")
EOF

cuda_tests() {  # $1: label, $2: PYTHONPATH
    (cd "$work/run" && PYTHONPATH="$2" python -m pytest -q -p no:cacheprovider --import-mode=importlib \
        --continue-on-collection-errors --pyargs numba.cuda.tests.cudapy 2>&1 | tail -3 | sed "s/^/$1: /") || true
}

for arg in "$@"; do
    case "$arg" in
        --sim-tests)
            NUMBA_ENABLE_CUDASIM=1 cuda_tests "simulator, original" "$given"
            NUMBA_ENABLE_CUDASIM=1 cuda_tests "simulator, patched" "$patched_path" ;;
        --gpu-tests)
            cuda_tests "GPU, original" "$given"
            cuda_tests "GPU, patched" "$patched_path" ;;
        --numba-tests)
            (cd "$work/run" && PYTHONPATH="$patched_path" python -m numba.runtests numba.tests.test_typeinfer \
                numba.tests.test_errorhandling numba.tests.test_typingerror numba.tests.test_literal_dispatch \
                numba.tests.test_target_extension numba.tests.test_types numba.tests.test_extending \
                numba.tests.test_extending_types numba.tests.test_operators 2>&1 \
                | tail -3 | sed 's/^/numba, patched: /') || true ;;
        *) echo "verify.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done
