"""Reading YAML files with libyaml's parser, under the same bounds as ``yamlfile.py``: databases, and the search
spaces a first call validates its configuration against (the matmul space took 0.39 s in the pure-Python parser
on this project's CPU, 0.04 s here).

PyYAML's pure-Python parser reads about a megabyte a second, and ``yamlfile.parse_yaml`` parses twice (its depth
check reads the event stream before composing, because the pure-Python composer recurses once per level). Here
libyaml, through PyYAML's C extension, composes the node graph; libyaml (0.2.6 on) refuses nesting deeper than
1000 levels by itself, so composing cannot exhaust the C stack, and that refusal is probed once per process
rather than trusted from a version number. Then one walk in Python (``yamlfile.loaded_document``) refuses a graph
that nests deeper than ``max_depth`` or expands, through aliases, to more than ``max_nodes`` values, and the strict
constructor of ``yamlfile.py`` (a key given twice in one mapping is an error; any constructor it gains) builds
the value. Where PyYAML has no libyaml, or one without the nesting limit, ``yamlfile.parse_yaml`` reads the text:
slower, and bounded the same way.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from .yamlfile import MAX_BYTES, MAX_DEPTH, MAX_NODES, YamlFileError, _StrictLoader, loaded_document, parse_yaml, read_yaml

LIBYAML_NESTING = 1000  # the depth libyaml refuses beyond


@functools.lru_cache(maxsize=1)
def libyaml_usable() -> bool:
    """Whether PyYAML has libyaml and libyaml refuses deep nesting itself (probed: a list nested
    ``LIBYAML_NESTING + 100`` deep must be refused)."""
    if not getattr(yaml, "__with_libyaml__", False):
        return False
    depth = LIBYAML_NESTING + 100
    try:
        yaml.compose("[" * depth + "]" * depth, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return True
    return False


def parser_name() -> str:
    """Which parser ``parse_yaml_fast`` uses in this process: 'libyaml' or 'python'."""
    return "libyaml" if libyaml_usable() else "python"


def parse_yaml_fast(text: str, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """The value of one YAML document in ``text``, bounded as ``yamlfile.parse_yaml`` says (messages without a
    file), parsed by libyaml where it is usable."""
    if not libyaml_usable():
        return parse_yaml(text, max_nodes=max_nodes, max_depth=max_depth)
    loader = _c_loader()(text)
    try:
        return loaded_document(loader, max_nodes, max_depth)
    except YamlFileError:
        raise
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem) and exc.problem_mark is not None:  # libyaml's own limit
            raise YamlFileError(f"line {exc.problem_mark.line + 1}: nested deeper than {max_depth} levels") from None
        raise YamlFileError(f"not valid YAML: {' '.join(str(exc).split())[:300]}") from None
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {' '.join(str(exc).split())[:300]}") from None
    except RecursionError:
        raise YamlFileError(f"nested deeper than {max_depth} levels") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a scalar its constructor cannot make (a 13th month)
        raise YamlFileError(f"not valid YAML: a value cannot be read: {' '.join(str(exc).split())[:200]}") from None
    finally:
        loader.dispose()


def read_yaml_fast(path: str | Path, *, max_bytes: int = MAX_BYTES, max_nodes: int = MAX_NODES,
                   max_depth: int = MAX_DEPTH) -> Any:
    """``yamlfile.read_yaml`` through ``parse_yaml_fast``: the same checks and messages naming the file."""
    return read_yaml(path, max_bytes=max_bytes, max_nodes=max_nodes, max_depth=max_depth, parse=parse_yaml_fast)


@functools.lru_cache(maxsize=1)
def _c_loader() -> type:
    """libyaml's parser and composer with the constructors (and their refusals) of ``yamlfile``'s loader (a class
    made on first use: PyYAML without libyaml has no ``CParser``)."""
    from yaml.cyaml import CParser

    class CStrictLoader(CParser, _StrictLoader):
        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._tags: dict[tuple, str] = {}
            self._scalars: dict[tuple, Any] = {}

        def resolve(self, kind, value, implicit):
            """The tag of a scalar or collection, remembered per (kind, value, implicit): a database repeats its
            keys and most of its values thousands of times, and a safe loader has no path resolvers, so the tag
            depends on nothing else."""
            key = (kind, value, implicit)
            tag = self._tags.get(key)
            if tag is None:
                tag = self._tags[key] = super().resolve(kind, value, implicit)
            return tag

        def construct_object(self, node, deep=False):
            """A scalar's value, remembered per (tag, text): every scalar a safe constructor makes is immutable
            (text, numbers, booleans, null, dates, bytes), so equal scalars may share one object."""
            if type(node) is not ScalarNode:
                return super().construct_object(node, deep)
            key = (node.tag, node.value, node.style)
            value = self._scalars.get(key, _MISSING)
            if value is _MISSING:
                value = self._scalars[key] = super().construct_object(node, deep)
            return value

    return CStrictLoader


_MISSING = object()
