"""Fitted rules for untuned shapes: fitting from a cross-time matrix (the committed synthetic fixture and planted
data), their YAML form and its checks, and the lookup's use of them (exact entries first, the note, the cost)."""
import copy
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from autotune.core.device import DeviceInfo
from autotune.core.problem import Problem
from autotune.core.registry import family as family_named
from autotune.core.rule import RuleError, Split, parse_rule, rule_record
from autotune.core.space import config_key, load_space
from autotune.runtime import db
from autotune.runtime.lookup import TunedKernelWarning, choice, choose, get_best_kernel
from autotune.runtime.rules import adopt_rules, adopted, ranked_configs, rule_for
from autotune.tuning.instance import Instance
from autotune.tuning.fit import (LEGACY, FitSettings, Quality, efficiency, fit_rule, folds_of, losses,
                                 select_portfolio, settings_of, settings_record)
from autotune.tuning.matrix import CrossMatrix, MatrixError, read_matrix, to_dict, write_matrix

FIXTURE = Path(__file__).parent / "data" / "synthetic-matrix.json"
ARGS = family_named("matmul").family_args(layout="nn")  # every argument, as matrices and rules hold them
SIM = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
TIME = {"median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1, "reps": 10}
SMALL = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 2, "VEC": 2, "UNROLL_K": 4}
WIDE = {"BM": 64, "BN": 32, "BK": 16, "TM": 4, "TN": 4, "VEC": 4}


@pytest.fixture(scope="module")
def synthetic():
    return read_matrix(FIXTURE)


def planted(rng, device=SIM):
    """A matrix whose truth is known: SMALL is 1.5-3x faster than WIDE where K <= 256, WIDE 1.5-3x faster
    elsewhere, and a third candidate is slower than both everywhere; timings carry 2% noise."""
    space = load_space("matmul")
    configs = [space.validate(c, dtype="float32", args=ARGS) for c in (SMALL, WIDE, {"strategy": "shared16"})]
    shapes, ms = [], []
    while len(shapes) < 40:
        shape = tuple(int(d) for d in np.round(2 ** rng.uniform((5, 5, 4), 12)))  # M, N > 16: no skinny shape
        if shape in shapes:
            continue
        base = math.prod(shape) * 1e-9 * rng.uniform(0.5, 2)
        small, wide = (1.0, rng.uniform(1.5, 3)) if shape[2] <= 256 else (rng.uniform(1.5, 3), 1.0)
        noise = np.exp(rng.normal(0, 0.02, size=3))
        shapes.append(shape)
        ms.append([base * small * noise[0], base * wide * noise[1], base * 4 * max(small, wide) * noise[2]])
    return CrossMatrix(device=dict(device), family="matmul", dtype="float32", args=dict(ARGS), shapes=shapes,
                       candidates=configs, ms=ms)


# -- fitting ------------------------------------------------------------------------------------------
def test_fitting_is_deterministic_and_bounded(synthetic):
    settings = FitSettings(max_portfolio=5, max_depth=3)
    first, second = fit_rule(synthetic, settings, date="2026-11-27"), fit_rule(synthetic, settings, date="2026-11-27")
    assert yaml.safe_dump(first.record) == yaml.safe_dump(second.record)
    assert settings_of(parse_rule(first.record).record) == settings  # recorded, so it can be fitted again
    assert 1 <= len(first.portfolio) <= 5 and len(set(first.portfolio)) == len(first.portfolio)
    rule = parse_rule(first.record)
    assert [config_key(p) for p in rule.portfolio] == [config_key(synthetic.candidates[c]) for c in first.portfolio]
    # the chosen member of the portfolio can be no better than the portfolio's best member, nor that than 1
    assert first.fitted.geomean <= first.oracle.geomean + 1e-12 <= 1 + 1e-12
    assert first.held_out.shapes == len(synthetic.ruled_rows()) and 0 < first.held_out.worst <= 1


def test_portfolio_covers_every_shape_within_the_threshold_or_is_full(synthetic):
    loss = losses(synthetic, synthetic.measured_rows())
    for size in (1, 3, 8):
        chosen = select_portfolio(loss, size, 1.1)
        covered = loss[:, chosen].min(axis=1) <= math.log(1.1) + 1e-12
        assert len(chosen) == size or covered.all()
        # greedy: each member added lowered the summed loss of the best member per shape
        sums = [loss[:, chosen[:i + 1]].min(axis=1).sum() for i in range(len(chosen))]
        assert all(b < a for a, b in zip(sums, sums[1:]))


def test_cross_validated_quality_is_what_the_folds_choose(synthetic):
    """The reported held-out quality, recomputed here from the per-shape choices and the matrix itself."""
    result = fit_rule(synthetic, FitSettings(model="tree", folds=4))
    rows = synthetic.ruled_rows()
    assert [shape for shape, _, _ in result.per_shape] == [synthetic.shapes[r] for r in rows]
    recomputed = []
    for shape, candidate, eff in result.per_shape:
        row = synthetic.shapes.index(shape)
        best = min(t for t in synthetic.ms[row] if t is not None)
        assert eff == pytest.approx(best / synthetic.ms[row][candidate])
        recomputed.append(eff)
    assert result.held_out.geomean == pytest.approx(Quality.of(recomputed).geomean)
    assert result.held_out.worst == pytest.approx(min(recomputed))
    assert result.record["quality"]["held_out_geomean"] == pytest.approx(result.held_out.geomean, abs=1e-4)


def test_fit_and_score_leave_out_shapes_the_rule_does_not_serve():
    """A skinny shape (M or N at most 16) of a matmul set has arguments of its own: the rule never chooses for it,
    so it is neither fitted on nor scored (an H200 float32 set scored its rule 0.001 at worst on 16x6192x7081,
    where only the gemv candidates run)."""
    matrix = planted(np.random.default_rng(11))
    matrix.shapes = [s for s in matrix.shapes if min(s[:2]) > 16]
    matrix.ms = matrix.ms[:len(matrix.shapes)]
    served = len(matrix.shapes)
    matrix.shapes += [(16, 6192, 7081), (3001, 7, 129)]
    matrix.ms += [[None, None, 0.5], [None, None, 0.2]]
    assert matrix.measured_rows() == list(range(served + 2))
    assert matrix.ruled_rows() == list(range(served))
    result = fit_rule(matrix, FitSettings(folds=4))
    assert result.held_out.shapes == served and result.held_out.worst > 0.01
    assert all(min(shape[:2]) > 16 for shape, _, _ in result.per_shape)


def test_folds_are_a_seeded_partition():
    folds = folds_of(23, 5, seed=3)
    assert sorted(set(folds)) == [0, 1, 2, 3, 4] and folds == folds_of(23, 5, seed=3)
    assert [folds.count(k) for k in range(5)] in ([5, 5, 5, 4, 4],)
    assert folds != folds_of(23, 5, seed=4)
    assert sorted(set(folds_of(3, 5, seed=0))) == [0, 1, 2]  # fewer rows than folds: leave one out


def test_a_planted_rule_is_found(rng):
    matrix = planted(rng)
    result = fit_rule(matrix, FitSettings(model="tree", min_leaf=1))
    assert sorted(result.portfolio) == [0, 1]  # the always-slower candidate is never kept
    rule = parse_rule(result.record)
    assert isinstance(rule.tree, Split) and rule.tree.feature == 2
    ks = sorted(s[2] for s in matrix.shapes)
    below = max(k for k in ks if k <= 256)
    above = min(k for k in ks if k > 256)
    assert below < rule.tree.at < above
    for shape in matrix.shapes:  # every shape gets its faster candidate
        assert config_key(rule.choice(shape)) == config_key(matrix.candidates[0 if shape[2] <= 256 else 1])
    assert result.fitted.worst == pytest.approx(1.0, abs=0.06)
    # Held out, a shape can be missed only where its K lies between the nearest K on either side of 256 among the
    # other folds' shapes (the split falls midway between those): every other shape gets its faster candidate,
    # and a miss costs at most the planted 3x (and the noise).
    fold, efficiency_of = folds_of(len(matrix.shapes), 5, 0), {s: e for s, _, e in result.per_shape}
    in_gap = 0
    for i, shape in enumerate(matrix.shapes):
        trained = [s[2] for j, s in enumerate(matrix.shapes) if fold[j] != fold[i]]
        if max(k for k in trained if k <= 256) < shape[2] < min(k for k in trained if k > 256):
            in_gap += 1
        else:
            assert efficiency_of[shape] > 0.9, (shape, efficiency_of[shape])
    assert result.held_out.geomean >= 0.95 * (1 / 3.2) ** (in_gap / len(matrix.shapes))


def test_a_candidate_that_failed_on_a_shape_is_not_chosen_there(rng):
    matrix = planted(rng)
    row = next(i for i, s in enumerate(matrix.shapes) if s[2] > 256)
    matrix.ms[row][1] = None  # WIDE gave a wrong result there
    matrix.failed[(row, 1)] = "verify"
    assert efficiency(matrix, row, 1) == pytest.approx(1e-3)
    result = fit_rule(matrix, FitSettings(model="nearest"))
    rule = parse_rule(result.record)
    assert config_key(rule.choice(matrix.shapes[row])) != config_key(matrix.candidates[1])


def test_nearest_model_ranks_by_the_nearest_coverage_shape(rng):
    matrix = planted(rng)
    rule = parse_rule(fit_rule(matrix, FitSettings(model="nearest", neighbours=1)).record)
    assert rule.model == "nearest" and len(rule.nearest) == len(matrix.shapes)
    shape = matrix.shapes[5]
    nudged = (shape[0] + 1, shape[1], shape[2])
    assert rule.ranking(nudged) == rule.ranking(shape)


REDUCE_ALL = family_named("reduce").family_args(op="sum", axis="all")
NARROW = {"BLOCK": 256, "ITEMS": 1, "VEC": 4, "BLOCK_REDUCE": "shuffle", "COMBINE": "last_block", "WAVES": 1}
BROAD = {"BLOCK": 512, "ITEMS": 4, "VEC": 4, "BLOCK_REDUCE": "shuffle", "COMBINE": "last_block", "WAVES": 4}


def noisy_sums(rng, flips=8):
    """Whole-array sums whose truth is known: NARROW is 1.5-3x faster up to 2**18 elements, BROAD above; but on
    ``flips`` shapes the timings say the other one wins by 1.2x (a noisy measurement)."""
    space = load_space("reduce")
    configs = [space.validate(c, dtype="float32", args=REDUCE_ALL) for c in (NARROW, BROAD)]
    shapes, ms = [], []
    while len(shapes) < 60:
        n = int(2 ** rng.uniform(10, 28))
        if (n,) not in shapes:
            slower = rng.uniform(1.5, 3)
            shapes.append((n,))
            ms.append([n * 1e-9, n * 1e-9 * slower] if n <= 2 ** 18 else [n * 1e-9 * slower, n * 1e-9])
    for row in rng.choice(len(shapes), flips, replace=False):
        slow = max(ms[row])
        ms[row] = [slow, slow / 1.2] if ms[row][0] < ms[row][1] else [slow / 1.2, slow]
    return CrossMatrix(device=dict(SIM), family="reduce", dtype="float32", args=dict(REDUCE_ALL), shapes=shapes,
                       candidates=configs, ms=ms)


def test_neighbours_outvote_a_noisy_measurement():
    """Where a few coverage shapes were timed wrong, the nearest one alone passes its error on to the shapes near
    it; seven voting neighbours choose the truly faster configuration on more held-out shapes, and so lose less
    time even as judged by the noisy timings themselves."""
    for seed in range(4):
        matrix = noisy_sums(np.random.default_rng(seed))
        one, seven = (fit_rule(matrix, FitSettings(model="nearest", neighbours=k)) for k in (1, 7))
        right = [sum(c == (0 if shape[0] <= 2 ** 18 else 1) for shape, c, _ in r.per_shape) for r in (one, seven)]
        assert right[1] > right[0] and right[1] >= 54, (seed, right)
        assert seven.held_out.geomean > one.held_out.geomean
        rule = parse_rule(seven.record)
        assert rule.neighbours == 7 and rule.features == () and "slowdown" in seven.record["nearest"][0]
        assert all(x >= 1 for item in seven.record["nearest"] for x in item["slowdown"])


def output_tiles(rng):
    """Matmuls whose truth is known: SMALL is 2x faster where M*N <= 2**18 (few output tiles), WIDE 2x faster
    above, whatever K is."""
    space = load_space("matmul")
    configs = [space.validate(c, dtype="float32", args=ARGS) for c in (SMALL, WIDE)]
    shapes, ms = [], []
    while len(shapes) < 60:
        shape = tuple(int(d) for d in np.round(2 ** rng.uniform((5, 5, 5), (13, 13, 12))))
        if shape not in shapes:
            base, noise = math.prod(shape) * 1e-9, np.exp(rng.normal(0, 0.02, size=2))
            small, wide = (1.0, 2.0) if shape[0] * shape[1] <= 2 ** 18 else (2.0, 1.0)
            shapes.append(shape)
            ms.append([base * small * noise[0], base * wide * noise[1]])
    return CrossMatrix(device=dict(SIM), family="matmul", dtype="float32", args=dict(ARGS), shapes=shapes,
                       candidates=configs, ms=ms)


def middle_axis_outputs(rng):
    """Reductions along the middle of (outer, R, inner) whose truth is known: FEW is 2x faster where the outputs,
    outer * inner, are at most 2**12, MANY 2x faster above, however the outputs lie and whatever R is."""
    args = family_named("reduce").family_args(op="sum", axis=-2)
    space = load_space("reduce")
    few = {"BLOCK": 128, "ITEMS": 1, "VEC": 4, "ROW_SPLIT": 32, "BX": 1}
    many = {"BLOCK": 256, "ITEMS": 4, "VEC": 2, "ROW_SPLIT": 1, "BX": 128}
    configs = [space.validate(c, dtype="float32", args=args) for c in (few, many)]
    shapes, ms = [], []
    while len(shapes) < 60:
        shape = tuple(int(d) for d in np.round(2 ** rng.uniform((0, 1, 0), (12, 14, 12))))
        if shape not in shapes:
            noise = np.exp(rng.normal(0, 0.02, size=2))
            a, b = (1.0, 2.0) if shape[0] * shape[2] <= 2 ** 12 else (2.0, 1.0)
            shapes.append(shape)
            ms.append([math.prod(shape) * 1e-9 * a * noise[0], math.prod(shape) * 1e-9 * b * noise[1]])
    return CrossMatrix(device=dict(SIM), family="reduce", dtype="float32", args=dict(args), shapes=shapes,
                       candidates=configs, ms=ms)


@pytest.mark.parametrize("planted, small, features", [
    (output_tiles, lambda s: s[0] * s[1] <= 2 ** 18, (0, 1, 2, (0, 1))),
    (middle_axis_outputs, lambda s: s[0] * s[2] <= 2 ** 12, ((0, 2), 1)),
], ids=["matmul M*N", "reduce outer*inner"])
def test_a_familys_features_find_a_boundary_its_dimensions_blur(planted, small, features):
    """A family's rule_features (matmul: M, N, K and M*N; a 3-D reduction: outer * inner and R) find a boundary
    in the output's size that the dimensions alone blur: more held-out shapes get their truly faster
    configuration."""
    right = {"dims": 0, "family": 0}
    for seed in range(6):
        matrix = planted(np.random.default_rng(seed))
        for kind in right:
            result = fit_rule(matrix, FitSettings(model="nearest", features=kind))
            right[kind] += sum(c == (0 if small(s) else 1) for s, c, _ in result.per_shape)
            assert parse_rule(result.record).features == (features if kind == "family" else ())
    assert right["family"] > right["dims"] + 6, right


def test_the_vote_weighs_the_nearest_shapes_by_closeness():
    """The ranking by hand: the k nearest shapes' log(slowdown), each weighted by 1 / (distance + 0.5)."""
    items = [([64, 64, 64], [1, 2]), ([64, 64, 128], [1, 2]), ([64, 64, 1024], [3, 1]), ([64, 64, 4096], [3, 1])]
    raw = rule_raw(tree=None, neighbours=3, nearest=[{"shape": s, "slowdown": d} for s, d in items])
    rule = parse_rule(raw)
    assert rule.model == "nearest" and rule.neighbours == 3
    # K = 96: 64 and 128 (0.58 and 0.42 away) against 1024 (3.4 away), 4096 too far to count
    assert rule.ranking((64, 64, 96)) == (0, 1)
    # K = 2048: 1024 and 4096 (1 away each) against 128 (4 away)
    assert rule.ranking((64, 64, 2048)) == (1, 0)
    # one neighbour: the nearest one's own ranking (K = 512 is 1 away from 1024, 2 from 128)
    assert parse_rule({**raw, "neighbours": 1}).ranking((64, 64, 96)) == (0, 1)
    assert parse_rule({**raw, "neighbours": 1}).ranking((64, 64, 512)) == (1, 0)
    by_size = parse_rule({**raw, "neighbours": 1, "features": [[0, 1, 2]]})  # the product alone
    assert by_size.ranking((4096, 64, 64)) == (1, 0)  # as large as 64x64x4096
    text = yaml.safe_dump(raw)
    assert parse_rule(yaml.safe_load(text)).ranking((64, 64, 2048)) == (1, 0) and "!!python" not in text


def test_held_out_shapes_have_no_say_in_their_own_choice(rng):
    """Honest cross-validation: whatever the timings of one fold's shapes, the portfolio and the model that choose
    for them (``model="auto"``: tree or nearest, picked inside the fold) are the same."""
    matrix = planted(rng)
    settings = FitSettings(folds=4)
    before = fit_rule(matrix, settings)
    fold = folds_of(len(matrix.shapes), settings.folds, settings.seed)
    held = [r for r in range(len(matrix.shapes)) if fold[r] == 0]
    for r in held:  # the always-slower candidate now wins these shapes by far, the others swap
        matrix.ms[r] = [matrix.ms[r][1], matrix.ms[r][0], min(matrix.ms[r]) / 100]
    after = fit_rule(matrix, settings)
    chosen = lambda result: {shape: c for shape, c, _ in result.per_shape}
    assert [chosen(before)[matrix.shapes[r]] for r in held] == [chosen(after)[matrix.shapes[r]] for r in held]
    assert after.held_out.geomean < before.held_out.geomean  # they are judged by their new timings


def test_rules_fitted_before_the_voting_neighbours_are_fitted_again_as_they_were():
    """A record without the settings added later means the values it was fitted with (LEGACY): one neighbour, the
    dimensions, the model picked over all shapes; a new record names them only where they differ."""
    legacy = {"max_portfolio": 8, "threshold": 1.1, "max_depth": 4, "min_leaf": 2, "folds": 5, "seed": 0,
              "ranking": 4, "model": "auto"}
    settings = settings_of({"fit": legacy})
    assert (settings.neighbours, settings.features, settings.selection) == (1, "dims", "whole")
    assert settings_record(settings) == legacy
    new = FitSettings()
    assert new.neighbours > 1 and settings_of({"fit": settings_record(new)}) == new
    assert set(LEGACY) <= set(settings_record(new))


ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p for p in (ROOT / "benchmarks" / "coverage").glob("*.json") if not p.stem.endswith("held-out"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_each_committed_rule_is_what_its_committed_matrix_gives(path):
    """The shipped rule of a committed coverage matrix is fitted again, with the settings it records, to the same
    rule: the rules in tuned_db/ are reproducible from the data beside them."""
    matrix = read_matrix(path)
    shipped = db.load_file(db.db_path(ROOT / "tuned_db", matrix.device["name"]), strict=True)
    rule = next((r for r in shipped.rules if r.key == matrix.case), None)
    assert rule is not None, f"no rule for {matrix.case} in tuned_db: run `autotune rule fit {path}`"
    again = fit_rule(matrix, settings_of(rule.record), data=rule.record.get("data"), date=rule.record.get("date"))
    assert yaml.safe_load(yaml.safe_dump(again.record)) == rule.record


def test_each_shipped_adopted_rule_is_its_models_rule_today():
    """A rule tuned_db/ holds adopted from another model (``autotune rule adopt``) is that model's shipped rule, field
    for field but the mark: a refit of the source leaves no stale copy behind unnoticed (its bench was of the old)."""
    files = {f.device["name"]: f for f in (db.load_file(p, strict=True) for p in (ROOT / "tuned_db").glob("*.yaml"))}
    adopted_rules = [(f, r) for f in files.values() for r in f.rules if r.adopted_from]
    for holder, rule in adopted_rules:
        origin = files[rule.adopted_from["name"]]
        source = next((r for r in origin.rules if r.key == rule.key), None)
        assert source is not None and dict(rule.record, adopted_from=None) == dict(source.record, adopted_from=None), \
            f"{holder.path}'s rule for {rule.key} is not {origin.device['name']}'s today: bench the new one and run " \
            f"`autotune rule adopt {origin.path} {holder.path} {rule.key}`, or remove it"


# -- the file form ------------------------------------------------------------------------------------
def test_rules_live_in_the_database_file_and_round_trip(tmp_path, synthetic):
    rule = parse_rule(fit_rule(synthetic).record)
    path = tmp_path / "synthetic-gpu.yaml"
    problem = Problem("matmul", (64, 64, 64), "float32")
    db.write_entries(path, synthetic.device, [db.parse_entry(db.entry_record(
        problem, load_space("matmul").validate(SMALL, dtype="float32", args=problem.args), time=TIME))])
    db.write_rules(path, synthetic.device, [rule])
    text = path.read_text()
    loaded = db.load_file(path, strict=True)
    assert len(loaded.entries) == 1 and [r.key for r in loaded.rules] == ["matmul/float32/nn"]
    for shape in synthetic.shapes:
        assert loaded.rules[0].ranking(shape) == rule.ranking(shape)
    db.write_entries(path, synthetic.device, [loaded.entries[0]])  # a later entry write keeps the rule
    assert db.load_file(path).rules and path.read_text() == text
    assert "rules:" in text and "!!python" not in text


def test_files_without_rules_still_load(tmp_path):
    """A file as earlier releases wrote it (schema, device, entries): the shipped one without any rules."""
    shipped = sorted((Path(__file__).resolve().parents[1] / "tuned_db").glob("*.yaml"))[0]
    data = yaml.safe_load(shipped.read_text())
    data.pop("rules", None)
    old = tmp_path / shipped.name
    old.write_text(yaml.safe_dump(data))
    loaded = db.load_file(old, strict=True)
    assert len(loaded.entries) == len(data["entries"]) > 0 and loaded.rules == []


def rule_raw(**change):
    raw = rule_record("matmul", "float32", ARGS, 3, [SMALL, WIDE],
                      tree=Split(2, 256.5, (0, 1), (1,)), quality={"held_out_geomean": 0.97})
    raw["portfolio"] = [load_space("matmul").validate(p, dtype="float32", args=ARGS) for p in raw["portfolio"]]
    raw.update(change)
    return raw


@pytest.mark.parametrize("change, field", [
    ({"tree": {"use": [2]}}, "portfolio indices"),
    ({"tree": {"use": [0, 0]}}, "distinct"),
    ({"tree": {"dim": 3, "at": 10, "below": {"use": [0]}, "above": {"use": [1]}}}, "'dim'"),
    ({"tree": {"dim": 0, "at": float("nan"), "below": {"use": [0]}, "above": {"use": [1]}}}, "'at'"),
    ({"tree": {"dim": 0, "at": 5, "below": {"use": [0]}}}, "inner node"),
    ({"nearest": [{"shape": [4, 4, 4], "use": [0]}]}, "exactly one model"),
    ({"portfolio": [{"BM": 48}]}, "portfolio"),
    ({"portfolio": []}, "portfolio"),
    ({"rank": 0}, "rank"),
    ({"dtype": "int8"}, "dtype"),
    ({"layout": "xx"}, "layout"),
    ({"quality": {"held_out_geomean": "good"}}, "quality"),
    ({"extra": 1}, "unknown field 'extra'"),
    ({"family": "nosuch"}, "field 'family': "),
    ({"family": ["matmul"]}, "field 'family' must name a kernel family, got \\['matmul'\\]"),
    ({"neighbours": 3}, "belong to a nearest model"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "use": [0]}], "neighbours": 3}, "not 'use'"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "slowdown": [1]}], "neighbours": 3}, "'slowdown'"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "slowdown": [1, 0.5]}], "neighbours": 3}, "'slowdown'"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "slowdown": [1, 2]}], "neighbours": 0}, "'neighbours'"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "use": [0]}], "features": [0, 3]}, "'features'"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "use": [0]}], "features": [[1, 0]]}, "'features'"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "use": [0]}], "features": [0, 0]}, "twice"),
    ({"fill_alpha": 0.5}, "'fill_alpha' belongs to a nearest model"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "slowdown": [1, 2]}], "neighbours": 3, "fill_alpha": -1},
     "'fill_alpha' must be"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "slowdown": [1, 2]}], "neighbours": 3, "fill_alpha": 0.5},
     "and 'fill'"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "slowdown": [1, 2], "fill": [1, 0]}], "neighbours": 3,
      "fill_alpha": 0.5}, "'fill' must"),
    ({"tree": None, "nearest": [{"shape": [4, 4, 4], "slowdown": [1, 2], "fill": [1, 0.5]}], "neighbours": 3},
     "'use' \\(or 'slowdown'\\)"),
])
def test_a_bad_rule_is_refused_naming_the_field(change, field):
    parse_rule(rule_raw())
    with pytest.raises(RuleError, match=field):
        parse_rule(rule_raw(**change))


def test_a_tree_too_deep_is_refused():
    node = {"use": [0]}
    for _ in range(12):
        node = {"dim": 0, "at": 10.0, "below": node, "above": {"use": [1]}}
    with pytest.raises(RuleError, match="deeper"):
        parse_rule(rule_raw(tree=node))


def test_db_check_names_a_bad_rule_and_keeps_the_entries(tmp_path):
    path = tmp_path / "cuda-simulator.yaml"
    good = rule_raw()
    bad = copy.deepcopy(good)
    bad["tree"] = {"use": [7]}
    path.write_text(yaml.safe_dump({"schema": 1, "device": SIM, "entries": [], "rules": [good, bad]}))
    loaded = db.load_file(path)
    assert len(loaded.rules) == 1 and "rule #2" in loaded.problems[0] and "portfolio indices" in loaded.problems[0]
    with pytest.raises(db.DatabaseError, match="rule #2"):
        db.load_file(path, strict=True)
    twice = copy.deepcopy(good)
    path.write_text(yaml.safe_dump({"schema": 1, "device": SIM, "entries": [], "rules": [good, twice]}))
    assert "a second rule for matmul/float32/nn" in db.load_file(path).problems[0]


def test_rules_of_unregistered_families_are_kept(tmp_path):
    path = tmp_path / "gpu.yaml"
    foreign = {"family": "not-registered-here", "dtype": "float32", "rank": 2, "portfolio": [{"X": 1}],
               "tree": {"use": [0]}}
    path.write_text(yaml.safe_dump({"schema": 1, "device": SIM, "entries": [], "rules": [foreign]}))
    db.write_rules(path, SIM, [parse_rule(rule_raw())])
    rules = yaml.safe_load(path.read_text())["rules"]
    assert [r["family"] for r in rules] == ["matmul", "not-registered-here"]


def test_a_merge_keeps_the_files_own_rule_unless_forced(tmp_path):
    path = tmp_path / "cuda-simulator.yaml"
    mine, theirs = parse_rule(rule_raw()), parse_rule(rule_raw(tree={"use": [1, 0]}))
    db.write_rules(path, SIM, [mine])
    assert "kept the rule" in db.write_rules(path, SIM, [theirs], replace=False)[0]
    assert db.load_file(path).rules[0].ranking((9, 9, 9)) == (0, 1)
    assert db.write_rules(path, SIM, [theirs])[0].startswith("replaced the rule for matmul/float32/nn")
    assert db.load_file(path).rules[0].ranking((9, 9, 9)) == (1, 0)


# -- a sibling model's rule, adopted -------------------------------------------------------------------
SIBLING = {"name": "Sibling GPU", "cc": "9.0", "sm_count": 2}


def sibling_files(tmp_path, target_device=SIM):
    """A folder with SIBLING's file holding the planted rule and an empty file of ``target_device``."""
    db.write_rules(db.db_path(tmp_path, SIBLING["name"]), SIBLING, [parse_rule(rule_raw())])
    target = db.db_path(tmp_path, target_device["name"])
    db.write_entries(target, target_device, [])
    return db.load_file(db.db_path(tmp_path, SIBLING["name"])), target


def test_an_adopted_rule_chooses_and_says_whose_coverage_it_was_fitted_on(tmp_path):
    source, target = sibling_files(tmp_path)
    problem = Problem("matmul", (500, 300, 100), "float32")
    assert choice(problem, [tmp_path], device=SIM["name"]).how == "default"
    notes = adopt_rules(source, target, ["matmul/float32/nn"])
    assert notes[0].startswith("added the rule for matmul/float32/nn") and "fitted on the coverage of Sibling GPU" \
        in notes[0]
    rule = db.load_file(target).rules[0]
    assert rule.adopted_from == SIBLING and rule.portfolio == source.rules[0].portfolio
    chosen = choice(problem, [tmp_path], device=SIM["name"])
    assert chosen.how == "rule" and str(target) in chosen.note and "fitted on the coverage of Sibling GPU" in \
        chosen.note and "on its held-out shapes 0.970" in chosen.note
    assert chosen.params["BM"] == SMALL["BM"]  # K = 100 <= 256, as the sibling's rule chooses
    # adopted again (a newer sibling rule), it is replaced without --force; its origin is kept through a second hop
    assert adopt_rules(source, target, ["matmul/float32/nn"])[0].startswith("replaced")
    assert adopted(db.load_file(target).rules[0], db.load_file(target)).adopted_from == SIBLING
    # nor does it go home: the sibling's file refuses it, as its own model's coverage
    with pytest.raises(db.DatabaseError, match="was fitted on Sibling GPU's own coverage"):
        adopt_rules(db.load_file(target), db.db_path(tmp_path, SIBLING["name"]), ["matmul/float32/nn"], force=True)


def test_a_file_serves_an_adopted_rule_only_while_its_model_is_the_siblings(tmp_path):
    """A rule adopted from a model that is this file's own, or (its device record edited since) no longer of the
    same compute capability and multiprocessor count, is named and skipped, as a bad entry is."""
    raw = dict(rule_raw(), adopted_from=dict(SIBLING))
    for device, words in ((SIBLING, "names this file's own model"), (dict(SIM, cc="8.0"), "cc 9.0 and 8.0"),
                          (dict(SIM, sm_count=4), "sm_count 2 and 4")):
        path = db.db_path(tmp_path, device["name"])
        path.write_text(yaml.safe_dump({"schema": 1, "device": device, "entries": [], "rules": [raw]}))
        loaded = db.load_file(path)
        assert not loaded.rules and words in loaded.problems[0] and "rule #1" in loaded.problems[0]
    path.write_text(yaml.safe_dump({"schema": 1, "device": SIM, "entries": [], "rules": [raw]}))
    assert db.load_file(path).rules[0].adopted_from == SIBLING
    # nor is one written where reading would refuse it (a merge from a file whose record differs), nor taken from
    # another spelling of the file's own model (one file serves both)
    bare = db.db_path(tmp_path / "bare", SIM["name"])
    db.write_entries(bare, {"name": SIM["name"], "cc": "9.0"}, [])
    note = db.write_rules(bare, SIM, [parse_rule(raw)], replace=False)[0]
    assert note.startswith("left out the rule for matmul/float32/nn: adopted from Sibling GPU") and "sm_count" in note
    assert not db.load_file(bare, strict=True).rules
    spelt = db.db_path(tmp_path / "spelt", "CUDA-simulator")
    db.write_rules(spelt, dict(SIM, name="CUDA-simulator"), [parse_rule(rule_raw())])
    with pytest.raises(db.DatabaseError, match="both of"):
        adopt_rules(db.load_file(spelt), path, ["matmul/float32/nn"], force=True)


def test_a_merge_lets_a_rule_of_the_models_own_coverage_replace_an_adopted_one(tmp_path):
    path = db.db_path(tmp_path, SIM["name"])
    borrowed, own = parse_rule(dict(rule_raw(), adopted_from=dict(SIBLING))), parse_rule(rule_raw(tree={"use": [1, 0]}))
    db.write_rules(path, SIM, [borrowed])
    assert "kept the rule for matmul/float32/nn (this file's, adopted from Sibling GPU)" in \
        db.write_rules(path, SIM, [borrowed], replace=False)[0]
    note = db.write_rules(path, SIM, [own], replace=False)[0]
    assert note.startswith("replaced the rule for matmul/float32/nn adopted from Sibling GPU with one fitted")
    assert not db.load_file(path).rules[0].adopted_from
    assert "(this file's, own)" in db.write_rules(path, SIM, [borrowed], replace=False)[0]


@pytest.mark.parametrize("change, words", [({"sm_count": 4}, "sm_count 2 and 4"), ({"cc": "8.0"}, "cc 9.0 and 8.0")])
def test_a_rule_is_not_adopted_across_models_that_are_not_siblings(tmp_path, change, words):
    source, target = sibling_files(tmp_path, dict(SIM, **change))
    before = target.read_bytes()
    with pytest.raises(db.DatabaseError, match=words) as refused:
        adopt_rules(source, target, ["matmul/float32/nn"])
    assert str(target) in str(refused.value) and "Sibling GPU" in str(refused.value)
    assert target.read_bytes() == before


def test_adopting_names_a_missing_rule_and_keeps_the_files_own(tmp_path):
    source, target = sibling_files(tmp_path)
    with pytest.raises(db.DatabaseError, match="no rule for matmul/float64/nn \\(its rules: matmul/float32/nn\\)"):
        adopt_rules(source, target, ["matmul/float64/nn"])
    own = parse_rule(rule_raw(tree={"use": [1, 0]}))
    db.write_rules(target, SIM, [own])
    with pytest.raises(db.DatabaseError, match="its own rule for matmul/float32/nn"):
        adopt_rules(source, target, ["matmul/float32/nn"])
    assert db.load_file(target).rules[0].ranking((9, 9, 9)) == (1, 0)
    adopt_rules(source, target, ["matmul/float32/nn"], force=True)
    assert db.load_file(target).rules[0].ranking((9, 9, 9)) == (0, 1)
    with pytest.raises(RuleError, match="'adopted_from'"):
        parse_rule(rule_raw(adopted_from=""))
    for bad in (["H200"], "H200", {"name": "H200"}, {"name": "H200\n/x.yaml: forged", "cc": "9.0", "sm_count": 2},
                {"name": " ", "cc": "9.0", "sm_count": 2}):
        with pytest.raises(RuleError, match="'adopted_from'"):
            parse_rule(rule_raw(adopted_from=bad))
    misnamed = tmp_path / "copy-of-target.yaml"
    misnamed.write_bytes(target.read_bytes())
    with pytest.raises(db.DatabaseError, match="whose file is cuda-simulator.yaml"):
        adopt_rules(source, misnamed, ["matmul/float32/nn"], force=True)


# -- the vote corrected by how each configuration fills the shape ------------------------------------------
FILL_DEVICE = {"name": "CUDA simulator", "cc": "9.0", "sm_count": 2}
BIG = {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "VEC": 4}


def filled_matrix(rng, count=60):
    """A matrix whose truth is the fill: each candidate's time is a per-candidate constant times the shape's work
    over the candidate's filled fraction of it (big 128 x 128 tiles, 1.25x faster per tile than SMALL's 32 x 32,
    but overhanging small or ragged shapes), with 1% noise: a vote corrected by fill with alpha 1 recovers it."""
    impl, space = family_named("matmul"), load_space("matmul")
    device = DeviceInfo.from_record(FILL_DEVICE)
    configs = [space.validate(c, dtype="float32", args=ARGS) for c in (BIG, SMALL)]
    shapes, ms = [], []
    while len(shapes) < count:
        shape = tuple(int(d) for d in np.round(2 ** rng.uniform((5, 5, 6), (10, 10, 11))))
        if shape in shapes:
            continue
        problem = Problem("matmul", shape, "float32")
        fills = [impl.filled_fraction(c, problem, device, space) for c in configs]
        shapes.append(shape)
        ms.append([math.prod(shape) * 1e-9 * k / f * math.exp(rng.normal(0, 0.01))
                   for k, f in zip((1.0, 1.25), fills)])
    return CrossMatrix(FILL_DEVICE, "matmul", "float32", dict(ARGS), shapes, configs, ms)


def test_matmul_fills_are_tile_padding_times_the_last_waves_filling():
    """130 rows in 128-row tiles pad to 256; three 64-row tiles on 2 SMs leave the second wave half empty; gemv and
    the reduce family have no tiles over C (1.0)."""
    impl, space = family_named("matmul"), load_space("matmul")
    device = DeviceInfo.from_record(FILL_DEVICE)
    big = space.validate(BIG, dtype="float32", args=ARGS)
    problem = Problem("matmul", (130, 128, 64), "float32")
    fitted = impl.fit_config(big, problem, device, space)
    blocks = 2 * fitted.get("SPLIT_K", 1)
    assert impl.filled_fraction(big, problem, device, space) == pytest.approx(
        130 / 256 * blocks / (math.ceil(blocks / 2) * 2))
    wide = space.validate({**BIG, "BM": 64}, dtype="float32", args=ARGS)
    odd = Problem("matmul", (192, 128, 16), "float32")  # K too short to split: 3 blocks on 2 SMs
    assert impl.fit_config(wide, odd, device, space)["SPLIT_K"] == 1
    assert impl.filled_fraction(wide, odd, device, space) == pytest.approx(3 / 4)
    reduce = Problem("reduce", (1000, 3), "float32", {"op": "sum", "axis": 1})
    assert reduce.impl.filled_fraction(reduce.impl.default_params(reduce), reduce, device,
                                       load_space("reduce")) == 1.0


def test_a_vote_corrected_by_fill_is_fitted_stored_and_chosen_by(tmp_path, rng):
    """On a matrix whose truth is the fill, the corrected vote is chosen over the plain one by cross-validation
    (nested: the held-out quality never saw its shapes pick alpha), and beats it; its rule stores each neighbour's
    fills, reads back equal, and the lookup ranks with the new shape's fills: where the plain vote and the
    corrected one disagree, the lookup takes the corrected one's choice, the truth."""
    matrix = filled_matrix(rng)
    result = fit_rule(matrix, FitSettings(model="nearest", fill_alphas="0,1", folds=4))
    assert result.model == "nearest@1" and result.record["fill_alpha"] == 1.0
    assert result.models["nearest@1"].geomean > result.models["nearest"].geomean + 0.003
    assert result.held_out.geomean > 0.98 and all("fill" in item for item in result.record["nearest"])
    path = db.db_path(tmp_path, FILL_DEVICE["name"])
    db.write_rules(path, FILL_DEVICE, [parse_rule(result.record)])
    rule = db.load_file(path).rules[0]
    assert rule.wants_fills and "corrected by the configurations' fill (alpha 1)" in rule.summary()
    impl, space, device = family_named("matmul"), load_space("matmul"), DeviceInfo.from_record(FILL_DEVICE)
    disagree = 0
    for shape in [tuple(int(d) for d in np.round(2 ** rng.uniform((5, 5, 6), (10, 10, 11)))) for _ in range(200)]:
        problem = Problem("matmul", shape, "float32")
        fills = [impl.filled_fraction(c, problem, device, space) for c in rule.portfolio]
        cost = [(1.0 if config_key(c) == config_key(matrix.candidates[0]) else 1.25) / f
                for c, f in zip(rule.portfolio, fills)]
        truth = min(range(len(cost)), key=cost.__getitem__)
        if rule.ranking(shape)[0] == rule.ranking(shape, tuple(fills))[0] or max(cost) < 1.05 * min(cost):
            continue  # the votes agree, or the truth is within the timings' noise
        disagree += 1
        params, note = choose(problem, [tmp_path], device=FILL_DEVICE["name"])
        assert params["BM"] == rule.portfolio[truth]["BM"] and "alpha 1" in note, shape
    assert disagree >= 5
    legacy = fit_rule(matrix, FitSettings(model="nearest", fill_alphas="0", folds=4))
    assert "fill_alpha" not in legacy.record and "fill" not in legacy.record["nearest"][0]
    assert fit_rule(matrix, settings_of(result.record)).record == result.record  # fitted again, the same


# -- the matrix file ----------------------------------------------------------------------------------
def test_matrix_files_round_trip_and_refuse_damage(tmp_path, synthetic):
    path = tmp_path / "m.json"
    write_matrix(path, synthetic)
    again = read_matrix(path)
    assert again.shapes == synthetic.shapes and again.ms == synthetic.ms
    assert [config_key(c) for c in again.candidates] == [config_key(c) for c in synthetic.candidates]
    raw = to_dict(synthetic)
    for change, words in ((lambda d: d["ms"][0].pop(), "row #1"), (lambda d: d.update(format="x"), "format"),
                          (lambda d: d["shapes"].append(d["shapes"][0]), "twice"),
                          (lambda d: d["candidates"][0].update(BM=7), "candidates"),
                          (lambda d: d["ms"].__setitem__(0, [-1.0] * len(d["ms"][0])), "no time"),
                          (lambda d: d["device"].update(cc=[9, 0]), "'cc' must be"),
                          (lambda d: d["device"].update(extra=[[1]]), "unknown field 'extra'")):
        damaged = copy.deepcopy(raw)
        change(damaged)
        path.write_text(__import__("json").dumps(damaged))
        with pytest.raises(MatrixError, match=words):
            read_matrix(path)
    path.write_text('{"format": NaN}')
    with pytest.raises(MatrixError, match=str(path)):
        read_matrix(path)


# -- choosing -----------------------------------------------------------------------------------------
def write_rule(folder, matrix, device=SIM, **settings):
    rule = parse_rule(fit_rule(matrix, FitSettings(**settings)).record)
    db.write_rules(db.db_path(folder, device["name"]), device, [rule])
    return rule


def test_exact_entries_come_first_then_the_rule(tmp_path, rng):
    matrix = planted(rng)
    write_rule(tmp_path, matrix, model="tree", min_leaf=1)
    exact = Problem("matmul", (100, 100, 1000), "float32")
    full = load_space("matmul").validate({"strategy": "naive"}, dtype="float32", args=exact.args)
    db.write_entries(db.db_path(tmp_path, SIM["name"]), SIM, [db.parse_entry(db.entry_record(exact, full,
                                                                                               time=TIME))])
    params, note = choose(exact, [tmp_path], device=SIM["name"])
    assert note is None and params == full
    small_k = Problem("matmul", (500, 300, 100), "float32")
    params, note = choose(small_k, [tmp_path], device=SIM["name"])
    assert "fitted rule for matmul/float32/nn" in note and str(db.db_path(tmp_path, SIM["name"])) in note
    assert "held-out shapes" in note and params["BM"] == SMALL["BM"] and params["BN"] == SMALL["BN"]
    params, _ = choose(Problem("matmul", (500, 300, 3000), "float32"), [tmp_path], device=SIM["name"])
    assert params["BM"] == WIDE["BM"]
    # a layout with nothing of its own takes nn's rule's choice; another dtype has nothing: the default
    params, note = choose(Problem("matmul", (500, 300, 100), "float32", {"layout": "tn"}), [tmp_path],
                          device=SIM["name"])
    assert "using nn's choice for this shape (configuration #" in note and "of the fitted rule for matmul/float32/nn" \
        in note
    assert params["BM"] == SMALL["BM"]
    assert [choice(Problem("matmul", (500, 300, 100), "float32", {"layout": layout}), [tmp_path],
                   device=SIM["name"]).how for layout in ("nn", "tn")] == ["rule", "nn: rule"]
    _, note = choose(Problem("matmul", (500, 300, 100), "float64", {"layout": "tn"}), [tmp_path], device=SIM["name"])
    assert "default configuration" in note


def test_the_family_fits_the_choice_to_the_shape():
    """A portfolio configuration on a shape whose tiles leave most SMs idle gets split-K, and clamped edges where its
    tiles overhang; on a big square it is unsplit, as fit_config states."""
    impl, space = Problem("matmul", (8, 8, 8), "float32").impl, load_space("matmul")
    config = space.validate({"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, dtype="float32", args=ARGS)
    h100 = DeviceInfo.from_record({"name": "x", "cc": "9.0", "sm_count": 132})
    skinny = impl.fit_config(config, Problem("matmul", (256, 250, 8192), "float32"), h100, space)
    assert skinny["SPLIT_K"] > 1 and skinny["EDGE"] == "clamp" and space.validate(skinny, dtype="float32", args=ARGS)
    square = impl.fit_config(config, Problem("matmul", (4096, 4096, 4096), "float32"), h100, space)
    assert square["SPLIT_K"] == 1 and square["EDGE"] == "interior"


@pytest.mark.parametrize("tma", [0, 1])
def test_a_wgmma_choice_is_split_only_where_few_tiles_meet_a_long_k(tma):
    """wgmma tiles are split over K (combined by the last block, one block per tile) where they fill less than half
    a wave, each slice keeps 8 K tiles and the slices' blocks are resident at once; elsewhere unsplit, a split of
    the configuration's own dropped."""
    impl, space = Problem("matmul", (8, 8, 8), "float16").impl, load_space("matmul")
    h100 = DeviceInfo.from_record({"name": "x", "cc": "9.0", "sm_count": 132})
    given = {"BM": 128, "BN": 128, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": tma, "ASYNC_STAGES": 4}
    own = {"SCHEDULE": "persistent"} if tma else {"SPLIT_K": 2, "SPLIT_ADD": "last_block"}
    wgmma = space.validate({**given, **own}, dtype="float16", args=ARGS)
    unsplit = space.validate({**given, **({"SCHEDULE": "persistent"} if tma else {})}, dtype="float16", args=ARGS)

    def fitted(shape):
        problem = Problem("matmul", shape, "float16")
        form = impl.fit_config(wgmma, problem, h100, space)
        assert space.validate(form, dtype="float16", args=problem.args) == form and impl.unfit_for(form, h100) is None
        return form

    few = fitted((1024, 128, 7992))  # 8 tiles, 125 K steps: 16 slices fill 128 blocks, 7.8 steps: 8 slices
    assert (few["SPLIT_K"], few["SPLIT_ADD"]) == (8, "last_block") and few.get("SCHEDULE", "tile") == "tile"
    assert fitted((100, 100, 9000))["SPLIT_K"] == 16  # 1 tile, 140 K steps: the largest split keeping 8 a slice
    assert fitted((8192, 128, 8192))["SPLIT_K"] == 2  # 64 tiles: 2 slices of 64 steps fill 128 blocks
    # 55 tiles of 52 K steps, one block a SM: 4 slices would fill 90% of a wave, but in 220 blocks, two waves
    assert fitted((6973, 73, 3328))["SPLIT_K"] == 2
    # in 3 stages two blocks' shared memory fits a SM, but with the TMA's producer the registers of 384 threads
    # (about 96 each) do not; without it, 256 threads a block, two fit
    shallow = space.validate({**given, **own, "ASYNC_STAGES": 3}, dtype="float16", args=ARGS)
    problem = Problem("matmul", (6973, 73, 3328), "float16")
    assert impl.fit_config(shallow, problem, h100, space)["SPLIT_K"] == (2 if tma else 4)
    for shape in ((1000, 1000, 1000), (1024, 1024, 1024), (4096, 4096, 4096), (12928, 56, 6472), (8, 8, 8)):
        # 64 tiles of 15.6 or 16 K steps (2 slices save 8 steps, less than the combining costs); tiles of half a
        # wave or more; K of one tile
        form = fitted(shape)
        assert {k: v for k, v in form.items() if k != "GEMV"} == unsplit  # GEMV 0: a skinny shape's
    ampere = DeviceInfo.from_record({"name": "y", "cc": "8.0", "sm_count": 108})  # no valid wgmma form at all
    for split in (2, 4, 2):
        own = space.validate({**given, "TMA": 0, "SPLIT_K": split, "SPLIT_ADD": "last_block"}, dtype="float16",
                             args=ARGS)
        problem = Problem("matmul", (1024, 128, 7992), "float16")
        assert impl.fit_config(own, problem, ampere, space) == own  # as given, whatever was fitted before


def test_a_register_fed_tf32_wgmma_choice_stays_unsplit():
    impl, space = Problem("matmul", (8, 8, 8), "float32").impl, load_space("matmul")
    h100 = DeviceInfo.from_record({"name": "x", "cc": "9.0", "sm_count": 132})
    args = {**ARGS, "precision": "tf32"}
    tf32 = space.validate({"BM": 128, "BN": 128, "BK": 32, "MMA": 8, "WGMMA": 1, "ASYNC_STAGES": 0},
                          dtype="float32", args=args)
    problem = Problem("matmul", (1024, 128, 7992), "float32", {"precision": "tf32"})
    assert impl.fit_config(tf32, problem, h100, space)["SPLIT_K"] == 1


def test_reductions_keep_rows_per_split():
    impl, space = Problem("reduce", (8, 8), "float32", {"axis": 0}).impl, load_space("reduce")
    args = {"op": "sum", "axis": 0}
    config = space.validate({"BLOCK": 256, "BX": 32, "ROW_SPLIT": 64, "VEC": 4}, dtype="float32", args=args)
    device = DeviceInfo.from_record(SIM)
    few_rows = impl.fit_config(config, Problem("reduce", (100, 4096), "float32", args), device, space)
    assert few_rows["ROW_SPLIT"] == 8 and 100 // few_rows["ROW_SPLIT"] >= 8
    assert impl.fit_config(config, Problem("reduce", (65536, 128), "float32", args), device, space) == config
    narrow = impl.fit_config(config, Problem("reduce", (65536, 64), "float32", args), device, space)
    assert narrow == {**config, "BX": 16, "ROW_SPLIT": 1024}  # 16 x 4 columns a block; 64 rows a split


def test_choosing_costs_well_under_a_millisecond(tmp_path, synthetic):
    rule = write_rule(tmp_path, synthetic, device=synthetic.device)
    loaded = db.load_file(db.db_path(tmp_path, synthetic.device["name"]))
    draw = np.random.default_rng(0)
    rounds = []
    for _ in range(5):  # the best of five rounds: the machine running the tests may be busy with other work
        problems = [Problem("matmul", tuple(int(d) for d in s), "float32") for s in draw.integers(1, 20000, (100, 3))]
        start = time.perf_counter()
        for problem in problems:
            found, _ = rule_for(problem, [loaded])
            ranked_configs(found, problem, loaded.device)
        rounds.append((time.perf_counter() - start) / len(problems))
    assert found is loaded.rules[0] and rule.key == found.key
    assert min(rounds) < 1e-3, f"{min(rounds) * 1e3:.3f} ms per choice"


def test_get_best_kernel_announces_which_rule_chose(tmp_path, rng):
    matrix = planted(rng)
    write_rule(tmp_path, matrix, model="tree", min_leaf=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = get_best_kernel("matmul", (40, 24, 20), db=tmp_path)
    notes = [str(w.message) for w in caught if issubclass(w.category, TunedKernelWarning)]
    assert len(notes) == 1 and "the fitted rule for matmul/float32/nn" in notes[0]
    assert kernel.params["BM"] == SMALL["BM"]  # K = 20 <= 256
    # the chosen kernel's output, poisoned with NaN first, against float64 NumPy on fresh data
    assert Instance(Problem("matmul", (40, 24, 20), "float32"), rng).check(kernel) is None
