"""The one place that touches numba-cuda's private SSA passes: reconstruction and phi stripping, the same
algorithms, visiting only the statements that name each variable.

numba-cuda's ``ssa._run_ssa`` fixes one variable at a time, and for each one rewrites every statement of every
block twice (a pass that renames its assignments, a pass that points its uses at the reaching definition), then
finds each use's position by scanning its block from the top. Its cost is variables x statements: a generated
matmul's unrolled K loop is one block of thousands of statements and a few hundred reassigned accumulators and
fragments, so this pass alone was about a third of the compile of a large winner. This version indexes, once,
which statements define and use each variable and where they stand, then runs numba-cuda's own handlers
(``_FreshVarHandler``, ``_FixSSAVars``) on those statements only, in the same order; statements that do not name
the variable are the ones numba-cuda's handlers return unchanged, so the result is the same IR, with the same new
names and the same phi nodes in the same places.

Before lowering, ``PreLowerStripPhis._strip_phi_nodes`` turns each phi into assignments in its predecessors,
each placed after the last assignment of its incoming value; it finds that assignment by scanning the block with
IR equality once per phi, and the block position by another scan. ``strip_phi_nodes`` keeps each block's
assignments by target and makes the same choices (the first statement equal to that assignment, as
``list.index`` finds it), so the blocks come out statement for statement the same.

It is installed only over the exact functions it was written against (``KNOWN_SOURCE_SHA256``, numba-cuda 0.30.4):
any other version keeps its own. ``AUTOTUNE_NUMBA_PATCH`` (``autotune.runtime.compiler``) can leave it out. Installation
is process-wide and affects every function this process compiles, autotune's or not, by speed only.
"""
from __future__ import annotations

import hashlib
import inspect
from collections import defaultdict
from copy import copy

from .guard import install_once, replace_in

KNOWN_SOURCE_SHA256 = "1fac9cb9ff87f831027d6d9079199cb1e0f378e6368c33f81e3c788e41072ad0"
REPLACED = ("_run_ssa", "_fix_ssa_vars", "_fresh_vars", "_run_block_rewrite", "_run_ssa_block_pass",
            "_FreshVarHandler", "_FixSSAVars")

_state = {"installed": False}


def _ssa():
    from numba.cuda.core import ssa

    return ssa


def _typed_passes():
    from numba.cuda.core import typed_passes

    return typed_passes


def _originals(ssa, typed_passes) -> list:
    """The functions and classes this replacement mirrors, in a fixed order (numba-cuda's own where installed)."""
    found = [getattr(ssa, name) for name in REPLACED]
    found.append(typed_passes.PreLowerStripPhis._strip_phi_nodes)
    return [getattr(obj, "__wrapped__", obj) for obj in found]


def _source_digest(ssa, typed_passes) -> str:
    """The hash of the sources this replacement mirrors."""
    return hashlib.sha256("\n".join(inspect.getsource(obj) for obj in _originals(ssa, typed_passes)).encode()
                          ).hexdigest()


def original_source_matches() -> bool:
    """True when numba-cuda's SSA passes are the ones the replacement was written against."""
    try:
        return _source_digest(_ssa(), _typed_passes()) == KNOWN_SOURCE_SHA256
    except (OSError, TypeError, AttributeError):
        return False


def _used_names(stmt, ir) -> set[str]:
    """The variables whose uses ``_FixSSAVars`` would rewrite in ``stmt`` (an assignment's target is not a use)."""
    if isinstance(stmt, ir.assign_types):
        rhs = stmt.value
        if isinstance(rhs, ir.inst_types):
            return {v.name for v in rhs.list_vars()}
        if isinstance(rhs, ir.var_types):
            return {rhs.name}
        return set()
    return {v.name for v in stmt.list_vars()}


class _Statements:
    """Every block's statements as a mutable list, where each statement stands, and which name which variable.

    Positions never move: phi nodes are kept aside per block and prepended once at the end, in the order
    numba-cuda's passes would have prepended them. A replaced statement keeps its slot; the old object stays
    known at that slot, because numba-cuda's ``_find_def`` looks definitions up in the block as it was before the
    current variable's rewrite."""

    def __init__(self, blocks, ir):
        self.bodies = {label: list(block.body) for label, block in blocks.items()}
        self.where: dict[int, tuple[int, object]] = {}
        self.defs = defaultdict(lambda: defaultdict(list))
        self.uses = defaultdict(lambda: defaultdict(list))
        self.phis: dict = defaultdict(list)
        for label, body in self.bodies.items():
            for pos, stmt in enumerate(body):
                self.where[id(stmt)] = (pos, stmt)
                if isinstance(stmt, ir.assign_types):
                    self.defs[stmt.target.name][label].append(pos)
                for name in _used_names(stmt, ir):
                    self.uses[name][label].append(pos)

    def replace(self, label, pos: int, stmt) -> None:
        self.bodies[label][pos] = stmt
        self.where[id(stmt)] = (pos, stmt)

    def position(self, stmt, default: int) -> int:
        found = self.where.get(id(stmt))
        return found[0] if found is not None and found[1] is stmt else default


def _fix_handler(ssa, statements: _Statements):
    class FixSSAVars(ssa._FixSSAVars):
        """numba-cuda's handler with a position lookup instead of a scan of the block."""

        length = 0

        def _stmt_index(self, defstmt, block, stop=-1):
            limit = self.length - 1 if stop == -1 else min(stop, self.length)
            pos = statements.position(defstmt, self.length)
            return pos if pos < limit else self.length

    return FixSSAVars(ssa._CacheListVars())


def run_ssa(blocks):
    """``ssa._run_ssa`` with the same result: the same violators, fixed in the same order by the same handlers."""
    ssa = _ssa()
    ir = ssa.ir
    if not blocks:
        return {}
    cfg = ssa.compute_cfg_from_blocks(blocks)
    df_plus = ssa._iterated_domfronts(cfg)
    violators = ssa._find_defs_violators(blocks, cfg)
    if not violators:
        return blocks
    statements = _Statements(blocks, ir)
    scope = ssa._get_scope(blocks)
    fresh = ssa._FreshVarHandler()
    fix = _fix_handler(ssa, statements)
    for varname in violators:
        defmap = _rename_assignments(statements, blocks, fresh, scope, varname)
        _rewrite_uses(statements, blocks, fix, scope, varname, defmap, cfg, df_plus)
    newblocks = {}
    for label, block in blocks.items():
        newblock = ir.Block(scope=block.scope, loc=block.loc)
        newblock.body = statements.phis[label] + statements.bodies[label]
        newblocks[label] = newblock
    if ssa.compute_cfg_from_blocks(newblocks) != cfg:
        raise ssa.errors.CompilerError("CFG mutated in SSA pass")
    return newblocks


def _rename_assignments(statements: _Statements, blocks, fresh, scope, varname: str):
    """``_fresh_vars``: each assignment to ``varname`` after the first gets a fresh name; the definition map."""
    states = {"scope": scope, "varname": varname, "defmap": defaultdict(list)}
    where = statements.defs.get(varname, {})
    for label in blocks:
        states["label"] = label
        for pos in where.get(label, ()):
            stmt = statements.bodies[label][pos]
            new = fresh.on_assign(states, stmt)
            if new is not stmt:
                statements.replace(label, pos, new)
    return states["defmap"]


def _rewrite_uses(statements: _Statements, blocks, fix, scope, varname: str, defmap, cfg, df_plus) -> None:
    """``_fix_ssa_vars``: each use of ``varname`` reads its reaching definition, with phi nodes where needed."""
    ssa = _ssa()
    ir = ssa.ir
    states = {"scope": scope, "varname": varname, "defmap": defmap, "phimap": defaultdict(list), "cfg": cfg,
              "phi_locations": ssa._compute_phi_locations(df_plus, defmap)}
    where = statements.uses.get(varname, {})
    for label, block in blocks.items():
        positions = where.get(label)
        if not positions:
            continue
        states["label"] = label
        states["block"] = block
        fix.length = len(statements.bodies[label])
        for pos in positions:
            stmt = statements.bodies[label][pos]
            if isinstance(stmt, ir.assign_types):
                new = fix.on_assign(states, stmt)
            else:
                new = fix.on_other(states, stmt)
            if new is not stmt:
                statements.replace(label, pos, new)
    for label, philist in states["phimap"].items():
        if philist:
            statements.phis[label] = philist + statements.phis[label]


def _same_var(a, b) -> bool:
    """``a == b`` for IR variables (numba-cuda compares their type and name; location and scope do not count)."""
    return type(a) is type(b) and a.name == b.name


class _Assignments:
    """One block's statements and, per (type, name) of target, its assignments in block order."""

    def __init__(self, body: list, ir):
        self.body = body
        self.ir = ir
        self.by_target: dict = defaultdict(list)
        for stmt in body:
            if isinstance(stmt, ir.assign_types):
                self.by_target[self._key(stmt.target)].append(stmt)

    @staticmethod
    def _key(var):
        return type(var), getattr(var, "name", None)

    def of(self, value) -> list:
        """The block's assignments whose target equals ``value`` (none for a value that is not a variable)."""
        if not isinstance(value, self.ir.var_types):
            return []
        return [stmt for stmt in self.by_target.get(self._key(value), ()) if _same_var(stmt.target, value)]

    def _index(self, stmt) -> int:
        return next(i for i, s in enumerate(self.body) if s is stmt)

    def insert_after(self, stmt, anchor) -> None:
        """``Block.insert_after``: after the first statement equal to ``anchor`` (all of them assign its target)."""
        first = next(s for s in self.by_target[self._key(anchor.target)] if s is anchor or s == anchor)
        at = self._index(first) + 1
        self.body.insert(at, stmt)
        self._record(stmt, at)

    def prepend(self, stmt) -> None:
        self.body.insert(0, stmt)
        self._record(stmt, 0)

    def _record(self, stmt, at: int) -> None:
        same = self.by_target[self._key(stmt.target)]
        positions = [self._index(s) for s in same]
        same.insert(sum(1 for p in positions if p < at), stmt)


def strip_phi_nodes(self, func_ir):
    """``PreLowerStripPhis._strip_phi_nodes`` with the same result: each phi becomes an assignment in each
    predecessor, after the last assignment of its incoming value there, else at the top of the block."""
    ir = _ssa().ir
    exporters = defaultdict(list)
    phis = set()
    for block in func_ir.blocks.values():
        for assign in block.find_insts(ir.assign_types):
            if isinstance(assign.value, ir.expr_types) and assign.value.op == "phi":
                phis.add(assign)
                phi = assign.value
                for ib, iv in zip(phi.incoming_blocks, phi.incoming_values):
                    exporters[ib].append((assign.target, iv))
    newblocks = {}
    for label, block in func_ir.blocks.items():
        newblk = copy(block)
        newblocks[label] = newblk
        newblk.body = [stmt for stmt in block.body if stmt not in phis]
        term_loc = block.terminator.loc if block.is_terminated else block.loc
        assignments = _Assignments(newblk.body, ir) if exporters[label] else None
        for target, rhs in exporters[label]:
            if rhs is ir.UNDEFINED:
                rhs = ir.Expr.null(loc=func_ir.loc)
            found = assignments.of(rhs)
            if found:
                assignments.insert_after(ir.Assign(target=target, value=rhs, loc=rhs.loc), found[-1])
            else:
                assignments.prepend(ir.Assign(target=target, value=rhs, loc=term_loc))
    func_ir.blocks = newblocks
    return func_ir


def _put() -> None:
    replace_in((_ssa(),), "_run_ssa", run_ssa)
    replace_in((_typed_passes().PreLowerStripPhis,), "_strip_phi_nodes", strip_phi_nodes)


def install() -> bool:
    """Put the indexed versions in place (once per process); False where the guard says no."""
    return install_once(_state, original_source_matches, _put)
