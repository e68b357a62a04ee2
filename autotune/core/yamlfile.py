"""Reading the YAML files users give us (databases, search spaces), safely and in bounded time and memory.

``yaml.safe_load`` constructs no objects, but a 1 KB file of nested aliases (``&a [*b, *b, ...]`` nine deep)
stands for billions of nodes: anything that walks or prints the value then runs for minutes and dies of memory.
So a file is read here in steps, each bounded: its size, its text (UTF-8), its node graph (composed once, then
measured as it would be expanded, without expanding it: every alias counts as many nodes as it stands for), its
depth, then the value. A key given twice in one mapping, which PyYAML would silently resolve to the last, is an
error. Only a regular file is read: a FIFO or a device named ``*.yaml`` would block the reader or never end.
Scalars that PyYAML's constructors cannot build (``!!int abc``, ``2026-02-30``, ``!!bool maybe``) raise
``ValueError``, ``KeyError``, ``IndexError`` or worse from inside PyYAML; each is caught where its node is known,
and an integer is refused before it is built when its text is longer than any number a file of ours holds
(PyYAML builds ``1:2:3:...`` in time quadratic in its length, and Python refuses to print an int of more than
4300 digits). Every refusal is a ``YamlFileError`` that names the file and, where it can, the line.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Callable

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_BYTES = 4 << 20
MAX_NODES = 200_000
MAX_DEPTH = 64
MAX_INT_CHARS = 1000  # an integer scalar's text; 10**400 still loads (and is then refused by the field it is in)
#: what PyYAML's scalar constructors raise for a scalar they cannot build
CONSTRUCTOR_ERRORS = (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError)


class YamlFileError(ValueError):
    """A YAML file was refused; the message names the file, and the line where one is known."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping key given twice."""


def _construct_mapping(loader: _StrictLoader, node: MappingNode, deep: bool = False):
    if not isinstance(node, MappingNode):  # an explicit !!map on a scalar or a sequence
        raise YamlFileError(f"line {node.start_mark.line + 1}: !!{node.tag.rpartition(':')[2]} needs a mapping")
    seen: dict[Any, Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # an unhashable key: the constructor below reports it
            continue
        if first is not key_node:  # another key node, on another line or the same one (a flow mapping)
            raise YamlFileError(f"line {key_node.start_mark.line + 1}: key {key!r} is given twice in one mapping "
                                f"(first on line {first.start_mark.line + 1})")
    return SafeConstructor.construct_mapping(loader, node, deep=deep)


def _int_bounded(construct: Callable) -> Callable:
    def construct_int(loader: yaml.SafeLoader, node: Node):
        if isinstance(node, ScalarNode) and len(node.value) > MAX_INT_CHARS:
            raise YamlFileError(f"line {node.start_mark.line + 1}: an integer written in {len(node.value)} "
                                f"characters (at most {MAX_INT_CHARS})")
        return construct(loader, node)

    return construct_int


def _scalar_checked(construct: Callable) -> Callable:
    """``construct`` with what it raises for a scalar it cannot build turned into a YamlFileError naming the line,
    the tag and the text."""
    def construct_checked(loader: yaml.SafeLoader, node: Node):
        try:
            return construct(loader, node)
        except YamlFileError:
            raise
        except CONSTRUCTOR_ERRORS as exc:
            tag = node.tag.rpartition(":")[2]
            text = node.value if isinstance(node, ScalarNode) else ""
            shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "..."
            raise YamlFileError(f"line {node.start_mark.line + 1}: {shown} is not a valid {tag} "
                                f"({_reason(exc)})") from None

    return construct_checked


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def guard_constructors(loader: type[yaml.SafeLoader]) -> None:
    """Install on ``loader`` (a SafeLoader class, or its C twin) the checks of this module: a key given twice,
    integers bounded, and every scalar a constructor cannot build refused with its line."""
    loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    scalars = ("null", "bool", "int", "float", "binary", "timestamp", "str")
    for name in scalars:
        tag = f"tag:yaml.org,2002:{name}"
        construct = loader.yaml_constructors[tag]
        loader.add_constructor(tag, _scalar_checked(_int_bounded(construct) if name == "int" else construct))


guard_constructors(_StrictLoader)


def read_yaml(path: str | Path, *, max_bytes: int = MAX_BYTES, max_nodes: int = MAX_NODES,
              max_depth: int = MAX_DEPTH, parse: Callable[..., Any] | None = None) -> Any:
    """The value of the YAML file at ``path``; YamlFileError naming the file when it is refused. ``parse`` is
    ``parse_yaml`` or another parser under the same bounds (``yamlfast.read_yaml_fast`` passes libyaml's)."""
    path = Path(path)
    text = decode_text(path, read_bytes(path, max_bytes=max_bytes))
    try:
        return (parse or parse_yaml)(text, max_nodes=max_nodes, max_depth=max_depth)
    except YamlFileError as exc:
        raise YamlFileError(f"{path}: {exc}") from None


def read_bytes(path: Path, *, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them (YamlFileError naming the file
    beyond, or for what is no regular file: ``read_regular``)."""
    data = read_regular(path, max_bytes + 1, YamlFileError)
    if len(data) > max_bytes:
        raise YamlFileError(f"{path}: larger than {max_bytes >> 20} MiB; not read")
    return data


def decode_text(path: Path, data: bytes) -> str:
    """``data``, read from ``path``, as text: UTF-8 without NUL bytes (YamlFileError naming the file else)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise YamlFileError(f"{path}: line {line}: not UTF-8 text (byte {exc.start}); is this a YAML file?") from None
    if "\x00" in text:
        raise YamlFileError(f"{path}: holds NUL bytes; not a YAML text file")
    return text


def read_regular(path: Path, max_bytes: int, error: type[Exception] = OSError) -> bytes:
    """The first ``max_bytes`` of the regular file at ``path``; ``error`` naming the file for anything else (a
    FIFO, a device, a folder, a socket) or a file that cannot be read. The file is opened without blocking, so a
    FIFO with no writer is named instead of waited for."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            chunks, left = [], max_bytes
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    raise error(f"{path}: not a regular file ({_file_kind(mode)}); only regular files are read")


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def parse_yaml(text: str, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """The value of one YAML document in ``text``, bounded as ``read_yaml`` says (messages without a file)."""
    loader = None
    try:
        _check_depth(text, max_depth)  # before composing, which recurses once per level
        loader = _StrictLoader(text)
        return loaded_document(loader, max_nodes, max_depth)
    except YamlFileError:
        raise
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {' '.join(str(exc).split())[:300]}") from None
    except RecursionError:
        raise YamlFileError(f"nested deeper than {max_depth} levels") from None
    except CONSTRUCTOR_ERRORS as exc:  # from PyYAML where no node is known (the constructors name theirs)
        raise YamlFileError(f"cannot be read ({type(exc).__name__}: {_reason(exc)})") from None
    finally:
        if loader is not None:
            loader.dispose()


def loaded_document(loader, max_nodes: int, max_depth: int) -> Any:
    """The one document ``loader`` (a PyYAML loader of this module's constructors) holds: composed, measured
    (``_measure``) before anything is built, then constructed; None for an empty document."""
    node = loader.get_single_node()
    if node is None:
        return None
    _measure(node, max_nodes, max_depth)
    return loader.construct_document(node)


def _check_depth(text: str, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth`` from the event stream, stopping at the first level too deep."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > max_depth:
                raise YamlFileError(f"line {event.start_mark.line + 1}: nested deeper than {max_depth} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def _measure(root: Node, max_nodes: int, max_depth: int) -> None:
    """Refuse a graph that, expanded, has more than ``max_nodes`` nodes, nests deeper than ``max_depth`` or
    refers to itself. Sizes are memoised per node, so aliases are counted with their multiplicity in time
    proportional to the file, not to its expansion."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node, depth: int) -> int:
        # a collection counts its own level, as the event check (``_check_depth``) counts its start
        if depth + (not isinstance(node, ScalarNode)) > max_depth:
            raise YamlFileError(f"line {node.start_mark.line + 1}: nested deeper than {max_depth} levels")
        key = id(node)
        if key in sizes:
            return sizes[key]
        if isinstance(node, ScalarNode):
            return 1
        if key in open_nodes:
            raise YamlFileError(f"line {node.start_mark.line + 1}: an alias refers to the node that holds it")
        open_nodes.add(key)
        children = node.value if isinstance(node, SequenceNode) else [n for pair in node.value for n in pair]
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > max_nodes:
                raise YamlFileError(f"line {node.start_mark.line + 1}: expands to more than {max_nodes} values "
                                    f"(through aliases *name?); refused")
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


class _PlainDumper(yaml.SafeDumper):
    """SafeDumper that writes repeated objects out in full instead of as anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(doc: Any, **options: Any) -> str:
    return yaml.dump(doc, Dumper=_PlainDumper, **options)
