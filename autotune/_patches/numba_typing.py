"""The one place that touches Numba's private function typing: ``BaseFunction.get_call_type`` remembered.

Type inference asks a function type (``operator.add``, ``min``, an intrinsic) for the signature of each call by
trying its templates in turn; lowering asks again for each call it lowers. Numba keeps no record of the answers,
so an unrolled matmul tile, with thousands of index additions and multiplications on a handful of argument
types, repeats the same template search thousands of times: about a quarter of a large winner's compile.
The replacement remembers each successful answer per function type, typing context, target and argument types,
and on a repeated question returns it and re-records the implementation key the search would have recorded
(lowering reads it next). Questions that fail are searched each time, so errors read as before.

Installed as ``autotune._patches.guard`` describes, over numba 0.68.1's method only; ``AUTOTUNE_NUMBA_PATCH``
(``autotune.runtime.compiler``) can leave it out. It affects every function the process compiles, by speed only.
"""
from __future__ import annotations

from .guard import install_once, source_matches

KNOWN_SOURCE_SHA256 = "6559c167bfc0ad36ab4af049ed2f2b9ddc28ce1eedbc2e3462b69b62079e850e"

MAX_ANSWERS = 100_000  # a record that outgrows this is started afresh (its keys hold types and contexts alive)
_state = {"installed": False}
_answers: dict = {}


def _functions():
    from numba.core.types import functions

    return functions


def original_source_matches() -> bool:
    """True when Numba's method is the one the replacement was written against."""
    return source_matches(_functions().BaseFunction.get_call_type, KNOWN_SOURCE_SHA256)


def remembered(original):
    """``original`` (Numba's ``get_call_type``), answering a question it answered before from the record."""
    from numba.core.target_extension import get_local_target

    def get_call_type(self, context, args, kws):
        key = (self, context, get_local_target(context), tuple(args), tuple(sorted(kws.items())))
        try:
            answer = _answers.get(key)
        except TypeError:  # an unhashable argument type: search as Numba does
            return original(self, context, args, kws)
        if answer is not None:
            signature, impl_key = answer
            self._impl_keys[signature.args] = impl_key
            return signature
        signature = original(self, context, args, kws)
        if signature is not None:
            if len(_answers) >= MAX_ANSWERS:
                _answers.clear()
            _answers[key] = (signature, self._impl_keys[signature.args])
        return signature

    get_call_type.__wrapped__ = original
    return get_call_type


def install() -> bool:
    """Put the remembering version in place (once per process); False where the guard says no."""
    base = _functions().BaseFunction
    return install_once(_state, original_source_matches,
                        lambda: setattr(base, "get_call_type", remembered(base.get_call_type)))
