"""Compile kernels of every family with Numba's call typing and autotune's remembering one.

Run by tests/test_numba_typing.py in its own process (the real compiler, not the simulator). For each variant,
while it compiles, every question put to a function type is answered by a fresh template search and by the
replacement, and the signatures and implementation keys compared; then its PTX is made once with each version in
place. Prints one JSON object: whether the replacement was installed, and per variant the questions asked, those
answered from the record, whether every answer was equal and whether the PTX was identical.
"""
import json

from lowering_sample import VARIANTS, ptx  # tests/ is the first entry of sys.path when run as a script
from numba.core.target_extension import get_local_target
from numba.core.types.functions import BaseFunction

from autotune import numba_typing
from autotune.build import build_kernel


def main():
    kernels = {name: build_kernel(kind, params, dtype, **args) for name, (kind, dtype, args, params) in
               VARIANTS.items()}  # loading a kernel installs the replacement
    ours = BaseFunction.get_call_type
    installed = getattr(ours, "__wrapped__", None) is not None
    out = {"installed": installed, "source_matches": numba_typing.original_source_matches(), "variants": {}}
    if not installed:
        print(json.dumps(out))
        return
    theirs = ours.__wrapped__
    for name, kernel in kernels.items():
        seen = {"questions": 0, "remembered": 0, "equal": True}

        def both(self, context, args, kws):
            key = (self, context, get_local_target(context), tuple(args), tuple(sorted(kws.items())))
            seen["remembered"] += key in numba_typing._answers
            expected = theirs(self, context, args, kws)
            expected_impl = self._impl_keys[expected.args]
            self._impl_keys[expected.args] = None
            found = ours(self, context, args, kws)
            seen["questions"] += 1
            seen["equal"] &= found == expected and self._impl_keys[found.args] == expected_impl
            return found

        try:
            BaseFunction.get_call_type = both
            ptx(kernel)
            BaseFunction.get_call_type = theirs
            before = ptx(kernel)
        finally:
            BaseFunction.get_call_type = ours
        seen["same_ptx"] = ptx(kernel) == before
        out["variants"][name] = seen
    print(json.dumps(out))


if __name__ == "__main__":
    main()
