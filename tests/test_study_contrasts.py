"""The study's pre-registered statistics (``budget_envs.study.contrasts``) and their report, on
synthetic records with known effects: verdicts, Holm's step-down, the hierarchical paired
bootstrap, relative recovery, stop reasons at a smaller T, Pass@(K,T), the learning curve, and
a report that is the same bytes twice and survives partial records."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from budget_envs.study import contrasts as C
from budget_envs.study.page import BEGIN, END, write_study_report
from budget_envs.study.spec import Family, StudySpec, curve_agent
from budget_envs.study.stats import bootstrap

TOP = 8


def _family(name: str = "toy", **kw) -> Family:
    sizes = dict(tight=3, generous=6, eval_budgets=[2, 3, 4, 6, TOP], eval_samples=4)
    sizes.update(kw)
    return Family(
        name=name,
        env_id="BudgetMix/ToolUse-v0",
        train_kwargs={},
        eval_kwargs={},
        optimal=2,
        max_actions=16,
        warm_start_episodes=1,
        fault_samples=2,
        fault_turns=[1, 2],
        **sizes,
    )


FAM = _family()


def _spec(*families: Family, **kw) -> StudySpec:
    kw.setdefault("arms", ["base", "fixed_generous", "fixed_tight", "mix"])
    return StudySpec(families=list(families or [FAM]), n_boot=400, **kw)


# ---------------------------------------------------------------------- record factory
def episode(agent, task, seed, sample, first, *, fault_turn=None, fired=True, turns=None,
            stop=None, family="toy"):  # fmt: skip
    """A budget-hidden episode record as ``load_study_records`` returns it (played at T=8)."""
    won = first is not None
    return {
        "record": "episode",
        "env_id": "BudgetMix/ToolUse-v0",
        "agent": agent,
        "task_id": f"t{task}|s{seed}",
        "task_index": task,
        "seed": 1000 * seed + 10 * task + sample,
        "study_family": family,
        "study_visibility": "hidden",
        "study_seed": seed,
        "visibility": "hidden",
        "sample": sample,
        "budget": TOP,
        "won": won,
        "first_success_turn": first,
        "fault_turn": fault_turn,
        "faults": [{"kind": "slip", "turn": fault_turn}] if fault_turn and fired else [],
        "turns": turns if turns is not None else (first if won else TOP),
        "stop_reason": stop or ("won" if won else "budget"),
        "oracle_agreement": [],
        "error": None,
        "key": f"episode|{agent}|{task}|{seed}|{sample}|{fault_turn}",
    }


def probe(agent, task, seed, correct, family="toy"):
    return {
        "record": "probe",
        "env_id": "BudgetMix/ToolUse-v0",
        "agent": agent,
        "task_id": f"t{task}|s{seed}",
        "study_family": family,
        "study_visibility": "hidden",
        "study_seed": seed,
        "prefix_turns": 1,
        "correct": correct,
        "error": None,
        "key": f"probe|{agent}|{task}|{seed}",
    }


def cell(agent, outcome, *, seeds=(0, 1, 2), tasks=12, samples=4, family="toy"):
    """No-fault episodes of ``agent``: ``outcome(task, seed, sample)`` is the first-success
    turn (None: never won)."""
    return [
        episode(agent, t, s, k, outcome(t, s, k), family=family)
        for s in seeds
        for t in range(tasks)
        for k in range(samples)
    ]


def never(t, s, k):
    return None


def by_contrast(analysis, family="toy"):
    return {r.name: r for r in analysis.contrasts if r.family == family}


# ---------------------------------------------------------------------- verdicts
def test_rl_winning_at_generous_but_not_tight_supports_c1():
    # Both win at turn 2 on a third of the tasks; RL also wins at turn 5 (above tight T=3,
    # within generous T=6) on most of the others: RL - base is 0 at tight, > 0 at generous.
    def base(t, s, k):
        return 2 if t % 3 == 0 else None

    def rl(t, s, k):
        return 2 if t % 3 == 0 else (5 if (t + s + k) % 4 else None)

    records = cell("base", base) + cell("fixed_generous", rl) + cell("fixed_tight", rl)
    records += cell("mix", rl) + cell("random", never)
    res = by_contrast(C.analyse(_spec(), records))
    c1 = res["C1"]
    assert c1.verdict == "supported" and c1.claimed
    assert c1.estimate == pytest.approx(0.5)  # 2/3 of tasks x 3/4 of samples, minus 0 at tight
    assert c1.low > 0 and c1.units == 36 and c1.seeds == 3
    # mix plays exactly as both fixed arms: nothing to detect, the interval is exactly [0, 0]
    for name in ("C3a", "C3b"):
        assert res[name].verdict == "inconclusive"
        assert (res[name].estimate, res[name].low, res[name].high, res[name].p) == (0, 0, 0, 1)
    # no probes and no fault episodes: C2 cannot be computed, nor the visible C3c/C3d and the
    # imitation control without their records; Holm runs over the other 3
    assert res["C2"].verdict == "not run" and "no fired fault" in res["C2"].note
    assert res["C3c"].note == "no records of mix, fixed_tight"
    assert res["C3d"].note == "no records of mix, fixed_generous"
    assert res["C4"].note == "no records of imitation"
    assert {res[n].tests for n in ("C1", "C3a", "C3b")} == {3}
    assert res["C1"].rank == 1 and res["C1"].level == pytest.approx(1 - 0.05 / 3)


def test_a_reversed_effect_is_contradicted():
    # mix only wins at turn 5, fixed_generous at turn 2: mix - fixed_generous < 0 at tight T
    def fast(t, s, k):
        return 2 if (t + k) % 4 else None

    def slow(t, s, k):
        return 5 if (t + k) % 4 else None

    records = cell("base", fast) + cell("fixed_generous", fast) + cell("fixed_tight", fast)
    records += cell("mix", slow)
    res = by_contrast(C.analyse(_spec(), records))
    assert res["C3a"].verdict == "contradicted"
    assert res["C3a"].estimate == pytest.approx(-0.75) and res["C3a"].high < 0
    assert res["C3b"].verdict == "inconclusive" and res["C3b"].estimate == 0


def test_identical_arms_are_inconclusive_with_an_interval_of_exactly_zero():
    def some(t, s, k):
        return 2 + (t % 5) if (3 * t + s + k) % 3 else None

    records = [r for a in ("base", "fixed_generous", "fixed_tight", "mix") for r in cell(a, some)]
    records += [probe(a, t, s, t % 2 == 0) for a in ("base", "fixed_generous") for s in (0, 1, 2)
                for t in range(12)]  # fmt: skip
    res = by_contrast(C.analyse(_spec(), records))
    assert set(res) == {c.name for c in C.CONTRASTS}
    for name in ("C1", "C3a", "C3b"):
        r = res[name]
        assert (r.verdict, r.estimate, r.low, r.high, r.p) == ("inconclusive", 0, 0, 0, 1)
    # C2 has single steps but no fault episodes with a won twin
    assert res["C2"].verdict == "not run" and "no fired fault" in res["C2"].note


def test_missing_arms_are_not_run_and_do_not_count_in_holm():
    records = cell("fixed_generous", lambda t, s, k: 2 if t % 2 else None)
    res = by_contrast(C.analyse(_spec(), records))
    assert res["C1"].verdict == "not run" and res["C1"].note == "no records of base"
    assert res["C3a"].verdict == "not run" and res["C3a"].note == "no records of mix, fixed_tight"
    assert all(r.tests == 0 for r in res.values())


# ---------------------------------------------------------------------- Holm
def test_holm_levels_adjusted_p_and_step_down_on_hand_computed_p_values():
    steps = C.holm([0.01, 0.04, 0.03, 0.005])
    assert [s.rank for s in steps] == [2, 4, 3, 1]
    assert [s.level for s in steps] == pytest.approx([1 - 0.05 / 3, 0.95, 0.975, 0.9875])
    assert [s.adjusted for s in steps] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # 0.03 > 0.05/2 stops the procedure: 0.04 <= 0.05 is not rejected after it
    assert [s.rejected for s in steps] == [True, False, False, True]


def test_holm_ties_keep_their_order_and_p_one_is_never_rejected():
    steps = C.holm([0.001, 0.001, 1.0])
    assert [s.rank for s in steps] == [1, 2, 3]
    assert [s.rejected for s in steps] == [True, True, False]
    assert steps[2].adjusted == 1.0
    with pytest.raises(ValueError, match="alpha"):
        C.holm([0.1], alpha=1.5)


def _small_effect(extra: int) -> list[dict]:
    """mix wins 2 x ``extra`` more of 48 (task, sample) episodes per seed than the other arms."""

    def base(t, s, k):
        return 2 if (t + k) % 2 else None

    def mix(t, s, k):
        return 2 if (t + k) % 2 or (t * 4 + k + 5 * s) % 48 < 2 * extra else None

    return (
        cell("base", base) + cell("fixed_generous", base) + cell("fixed_tight", base)
        + cell("mix", mix)
    )  # fmt: skip


def test_verdict_needs_holm_rejection_not_only_an_interval_above_zero():
    records = _small_effect(4)
    c3a = by_contrast(C.analyse(_spec(), records))["C3a"]
    plain = C.draws(
        C.family_units(FAM, records), next(c for c in C.CONTRASTS if c.name == "C3a").terms, 400
    )
    # precondition: uncorrected, the effect is significant (p < 0.05, 95% interval above 0)...
    assert c3a.rank == 1 and c3a.tests == 3
    assert 0.05 / 3 < c3a.p < 0.05 and plain.interval(0.95)[0] > 0
    # ...but rank 1 of 3 asks p <= 0.05 / 3: not rejected, so not supported
    assert c3a.verdict == "inconclusive" and c3a.low <= 0
    assert c3a.level == pytest.approx(1 - 0.05 / 3) and c3a.p_holm == pytest.approx(3 * c3a.p)
    # a little more of the same effect is supported
    assert by_contrast(C.analyse(_spec(), _small_effect(6)))["C3a"].verdict == "supported"


# ---------------------------------------------------------------------- the bootstrap
def test_hierarchical_weights_resample_seeds_then_tasks_within_them():
    seeds = [0] * 5 + [1] * 5 + [2] * 3
    w = C.hierarchical_weights(seeds, 300)
    assert w.shape == (300, 13)
    sizes = {0: 5, 1: 5, 2: 3}
    groups = {s: [i for i, x in enumerate(seeds) if x == s] for s in sizes}
    times = {s: w[:, groups[s]].sum(axis=1) / sizes[s] for s in sizes}
    # each seed's units are drawn in whole blocks: as many as the seed itself was drawn...
    for s in sizes:
        assert np.all(times[s] == np.round(times[s]))
    # ...three seeds per resample, and sometimes one seed fills all three places
    assert np.all(sum(times.values()) == 3)
    assert any(np.any(times[s] == 3) for s in sizes)
    assert any(np.any(times[s] == 0) for s in sizes)
    assert np.array_equal(w, C.hierarchical_weights(seeds, 300))  # seeded


def test_crossed_weights_draw_seeds_and_tasks_as_crossed_factors():
    seeds = [s for s in (0, 1, 2) for _ in range(4)]
    tasks = [t for _ in (0, 1, 2) for t in ("a", "b", "c", "d")]
    w = C.crossed_weights(seeds, tasks, 300)
    assert w.shape == (300, 12)
    grid = w.reshape(300, 3, 4)
    assert np.all(grid.sum(axis=(1, 2)) == 12)  # 3 seeds drawn x 4 tasks drawn
    for g in grid:
        seed_draws, task_draws = g.sum(axis=1) / 4, g.sum(axis=0) / 3
        # (draws of the seed) x (draws of the task): a task drawn k times counts k times under
        # every drawn seed, never under some seeds only
        assert np.array_equal(np.outer(seed_draws, task_draws), g)
        assert seed_draws.sum() == 3 and task_draws.sum() == 4
        assert np.all(seed_draws % 1 == 0) and np.all(task_draws % 1 == 0)
    assert (grid.sum(axis=2) == 0).any() and (grid.sum(axis=1) == 0).any()  # some left out
    assert np.array_equal(w, C.crossed_weights(seeds, tasks, 300))  # seeded
    with pytest.raises(ValueError, match="n_boot"):
        C.crossed_weights([0], ["a"], 0)


def _coverage(weights_of, reps: int = 200, n_seeds: int = 5, n_tasks: int = 50) -> float:
    """Share of ``reps`` synthetic crossed studies (seed and task effects on the logit, 2
    samples per unit) whose 95% percentile interval of the mean holds the population mean."""
    rng = np.random.default_rng(1)
    big = np.random.default_rng(123)
    a_all, b_all = big.normal(0, 0.3, 200_000), big.normal(0, 1.5, 200_000)
    truth = float(np.mean(1 / (1 + np.exp(-(a_all + b_all)))))
    seeds = np.repeat(np.arange(n_seeds), n_tasks)
    tasks = np.tile(np.arange(n_tasks), n_seeds)
    hits = 0
    for r in range(reps):
        a, b = rng.normal(0, 0.3, n_seeds), rng.normal(0, 1.5, n_tasks)
        p = 1 / (1 + np.exp(-(a[:, None] + b[None, :])))
        y = (rng.random((n_seeds, n_tasks, 2)) < p[..., None]).mean(axis=-1).reshape(-1)
        w = weights_of(seeds, tasks, r)
        low, high = np.quantile((w @ y) / w.sum(axis=1), [0.025, 0.975])
        hits += low <= truth <= high
    return hits / reps


def test_crossed_intervals_cover_the_truth_on_synthetic_crossed_data():
    """The study's shape: 5 training seeds x 50 tasks played under every seed, task effects
    larger than seed effects. The crossed bootstrap's 95% intervals cover the population mean
    93-97% of the time; resampling tasks inside each drawn seed falls short of 93%."""
    crossed = _coverage(lambda s, t, r: C.crossed_weights(s, t, 1000, r))
    nested = _coverage(lambda s, t, r: C.hierarchical_weights(s, 1000, r))
    print(f"\ncoverage of 95% intervals: crossed {crossed:.3f}, seeds then tasks {nested:.3f}")
    assert 0.93 <= crossed <= 0.97
    assert nested < 0.93


def test_with_one_seed_the_hierarchical_bootstrap_is_the_task_bootstrap():
    n, n_boot = 9, 500
    w = C.hierarchical_weights([4] * n, n_boot)
    idx = np.random.default_rng(0).integers(0, n, size=(n_boot, n))
    expected = np.stack([np.bincount(row, minlength=n) for row in idx])
    assert np.array_equal(w, expected)

    # and Pass@1 of one arm over one seed gets the interval of stats.bootstrap over its tasks
    def outcome(t, s, k):
        return 2 if (t * 7 + k) % 3 else None

    fu = C.family_units(FAM, cell("mix", outcome, seeds=(4,), tasks=n))
    d = C.draws(fu, [C.Term(1.0, "mix", "pass1", "generous")], n_boot)
    values = np.array([np.mean([outcome(t, 4, k) is not None for k in range(4)]) for t in range(n)])
    mean, low, high = bootstrap(values, n_boot)
    assert d.value == pytest.approx(mean)
    assert d.interval(0.95) == pytest.approx((low, high), abs=1e-12)


def test_paired_draws_are_shared_by_the_arms_of_a_comparison():
    # base and mix differ on every unit by the same +0.25: any shared resample gives +0.25,
    # unshared ones would scatter around it
    def base(t, s, k):
        return 2 if k == 0 and t % 2 else None

    def mix(t, s, k):
        return 2 if k in (0, 1) and t % 2 else (3 if k == 0 else None)

    fu = C.family_units(FAM, cell("base", base) + cell("mix", mix))
    terms = [C.Term(1.0, "mix", "pass1", "tight"), C.Term(-1.0, "base", "pass1", "tight")]
    d = C.draws(fu, terms, 300)
    assert d.value == pytest.approx(0.25)
    assert np.allclose(d.boots, 0.25)
    with pytest.raises(ValueError, match="n_boot"):
        C.hierarchical_weights([0, 1], 0)


# ---------------------------------------------------------------------- metrics
def test_relative_recovery_ignores_unfired_faults_and_units_lost_without_the_fault():
    records = [
        episode("base", 0, 0, 0, 3),  # won: its fault twins count
        episode("base", 0, 0, 1, None),  # lost: its fault twins do not
        episode("base", 0, 0, 0, 5, fault_turn=1),  # fired, won
        episode("base", 0, 0, 0, None, fault_turn=2, fired=False),  # never fired: left out
        episode("base", 0, 0, 1, 4, fault_turn=1),  # twin lost: left out
        episode("base", 0, 0, 1, None, fault_turn=2),  # twin lost: left out
        episode("base", 1, 0, 0, 2),
        episode("base", 1, 0, 0, None, fault_turn=1),  # fired, lost
        episode("base", 1, 0, 0, 6, fault_turn=2),  # fired, won
    ]
    fu = C.family_units(FAM, records)
    assert fu.agents["base"].recovery == {(0, "t0|s0"): (1, 1), (0, "t1|s0"): (1, 2)}
    d = C.draws(fu, [C.Term(1.0, "base", "recovery")], 50)
    assert d.value == pytest.approx(2 / 3)  # a ratio of means over the 3 counted episodes
    assert d.units == 2


def test_single_step_is_the_share_of_correct_probes_and_skips_unanswered_ones():
    records = cell("base", never, seeds=(0,), tasks=2)
    records += [probe("base", 0, 0, True), probe("base", 0, 0, False), probe("base", 1, 0, True)]
    records += [probe("base", 1, 0, None)]  # past the end of the task: no state, not counted
    fu = C.family_units(FAM, records)
    assert fu.agents["base"].probes == {(0, "t0|s0"): (1, 2), (0, "t1|s0"): (1, 1)}
    assert C.draws(fu, [C.Term(1.0, "base", "single_step")], 50).value == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("first", "turns", "stop", "t", "expected"),
    [
        (5, 5, "won", 3, "budget"),  # won later than T, so still running at T
        (5, 5, "won", 5, "won"),
        (None, 4, "lost", 3, "budget"),
        (None, 4, "lost", 4, "lost"),  # lost on turn T itself: its own reason
        (None, 4, "lost", 6, "lost"),
        (None, TOP, "budget", TOP, "budget"),
        (None, 2, None, 3, "error"),
    ],
)
def test_stop_reason_at_a_smaller_t(first, turns, stop, t, expected):
    r = episode("base", 0, 0, 0, first, turns=turns, stop=stop)
    r["stop_reason"] = stop
    assert C.derived_stop(r, t) == expected


def test_stop_mix_and_budget_binding():
    # base: half won at turn 2, half lost at turn 4; RL: a quarter still running at T=6
    def base(t, s, k):
        return 2 if k % 2 else None

    records = [
        dict(r, turns=r["turns"] if r["won"] else 4, stop_reason=r["stop_reason"].replace("budget", "lost"))
        for r in cell("base", base)
    ]  # fmt: skip
    records += cell("fixed_generous", lambda t, s, k: 2 if k else None)
    analysis = C.analyse(_spec(), records)
    mix = {(s.agent, s.t): s for s in analysis.stops}
    assert mix[("base", 3)].shares == {"won": 0.5, "lost": 0.0, "budget": 0.5}
    assert mix[("base", 4)].shares == {"won": 0.5, "lost": 0.5, "budget": 0.0}
    assert mix[("fixed_generous", 6)].shares == {"won": 0.75, "lost": 0.0, "budget": 0.25}
    assert mix[("base", 3)].episodes == 3 * 12 * 4
    (b,) = analysis.bindings
    # binding is judged at the tight T (3), where the share of budget endings is largest
    rl_at_tight = mix[("fixed_generous", 3)].shares["budget"]
    assert b.shares == {"base": 0.5, "fixed_generous": rl_at_tight} and b.binds and b.t == 3


def test_pass_at_k_is_the_unbiased_estimator_over_each_units_samples():
    fam = _family(eval_samples=2)  # K = 2 from 4 samples per task
    records = [episode("mix", 0, 0, k, f) for k, f in enumerate([3, None, None, None])]
    records += [episode("mix", 1, 0, k, f) for k, f in enumerate([2, 4, None, None])]
    analysis = C.analyse(_spec(fam), records)
    got = {p.t: p for p in analysis.pass_k if p.agent == "mix"}
    assert {p.k for p in got.values()} == {2}
    one, two = 1 - comb(3, 2) / comb(4, 2), 1 - comb(2, 2) / comb(4, 2)
    assert got[2].value == pytest.approx((0 + 1 - comb(3, 2) / comb(4, 2)) / 2)
    assert got[3].value == pytest.approx((one + one) / 2)
    assert got[4].value == pytest.approx((one + two) / 2)
    assert got[TOP].units == 2


def test_learning_curve_points_and_a_missing_checkpoint():
    steps = FAM.steps(10)
    records = cell("base", never, seeds=(0,)) + cell("fixed_generous", lambda t, s, k: 2)
    records += cell(curve_agent("fixed_generous", steps), lambda t, s, k: 2 if t % 2 else None,
                    seeds=(0,))  # fmt: skip
    points = C.analyse(_spec(curve=["toy", 0]), records).curve
    assert [(p.agent, p.steps) for p in points] == [
        ("base", 0),
        (curve_agent("fixed_generous", steps), steps),
        (curve_agent("fixed_generous", FAM.steps(30)), FAM.steps(30)),
        ("fixed_generous", FAM.steps()),
    ]
    assert [p.value for p in points] == [0.0, 0.5, None, 1.0]
    assert points[1].units == 12  # the curve's seed only
    assert points[1].low < 0.5 < points[1].high


# ---------------------------------------------------------------------- the report
def _study_records():
    def base(t, s, k):
        return 2 if t % 3 == 0 else None

    def rl(t, s, k):
        return 2 if t % 3 == 0 else (5 if (t + s + k) % 4 else None)

    out = (
        cell("base", base) + cell("fixed_generous", rl) + cell("mix", base) + cell("random", never)
    )
    for agent, outcome in (("base", base), ("fixed_generous", rl)):
        for s in (0, 1, 2):
            for t in range(12):
                out.append(probe(agent, t, s, (t + s) % 3 != 0))
                for k in (0, 1):
                    for ft in (1, 2):
                        won = outcome(t, s, k) is not None and (
                            agent == "fixed_generous" or ft == 2
                        )
                        out.append(episode(agent, t, s, k, 6 if won else None, fault_turn=ft))
    # a family where every unsolved episode is lost early: the budget never binds there
    for agent in ("base", "fixed_generous"):
        for r in cell(agent, base, family="calm"):
            out.append(r if r["won"] else dict(r, turns=2, stop_reason="lost"))
    return out


def test_report_sentences_and_the_same_bytes_twice(tmp_path):
    spec = _spec(FAM, _family("calm"))
    docs = tmp_path / "docs" / "study.md"
    first = write_study_report(
        spec, tmp_path / "out", docs, records=_study_records(), figures=False
    )
    page = docs.read_text(encoding="utf-8")
    snap = {p.name: p.read_bytes() for p in first.tables}
    again = write_study_report(
        spec, tmp_path / "out", docs, records=_study_records(), figures=False
    )
    assert {p.name: p.read_bytes() for p in again.tables} == snap
    assert docs.read_text(encoding="utf-8") == page and page.count(BEGIN) == page.count(END) == 1

    res = {(r.family, r.name): r for r in first.contrasts}
    c1 = res[("toy", "C1")]
    assert c1.verdict == "supported"
    sentence = (
        f"C1 (RL's advantage over base shrinks when T is squeezed), toy: supported: "
        f"+{c1.estimate:.3f} [+{c1.low:.3f}, +{c1.high:.3f}] (Holm-adjusted "
    )
    assert sentence in page
    # C2: RL keeps every won episode after a fault, base half; single steps are equal. Net of
    # consistency: base wins its won tasks' other samples always (net 0.5 - 1), RL wins 4/5
    # of them (1 - 4/5; a third of the tasks always won, the rest lose one sample in four)
    assert res[("toy", "C2")].estimate == pytest.approx((1 - 4 / 5) - (0.5 - 1))
    assert "Claims, toy: at the tight T=3" in page and "so its contrasts are claims" in page
    assert "calm: not a claim (the budget does not bind in calm)" in page
    assert not res[("calm", "C1")].claimed and res[("calm", "C3a")].verdict == "not run"
    assert "Headline, toy: fixed_generous - base, Pass@1 (budget hidden)" in page
    assert "Base level, toy: base - random at the generous T=6" in page
    assert "learned" not in page
    for name in ("contrasts.csv", "headline.csv", "secondary.csv", "stop_reasons.csv",
                 "pass_k_vs_t.csv", "learning_curve.csv", "levels.csv", "pass1_vs_t.csv"):  # fmt: skip
        assert name in snap
    assert "learning_status.csv" not in snap
    rows = snap["contrasts.csv"].decode().splitlines()
    assert rows[0].startswith("family,contrast,verdict,estimate,low,high,level,p,p_holm")
    assert len(rows) == 1 + 2 * len(C.CONTRASTS)


def test_partial_records_are_reported_not_fatal(tmp_path):
    # one seed of mix and random only, and a family without any record
    records = [r for r in _study_records() if r["agent"] in ("mix", "random")]
    records = [r for r in records if r["study_seed"] == 1 and r["study_family"] == "toy"]
    spec = _spec(FAM, _family("gone"), curve=["toy", 0], references={"oracle": "oracle"})
    report = write_study_report(spec, tmp_path / "out", tmp_path / "study.md", records=records,
                                figures=False)  # fmt: skip
    assert len(report.contrasts) == 2 * len(C.CONTRASTS)
    assert {r.verdict for r in report.contrasts} == {"not run"}
    page = report.markdown
    assert (
        "C1 (RL's advantage over base shrinks when T is squeezed), toy: not run (no records "
        in page
    )
    assert "C3a (mix beats fixed_tight at the tight T (budget hidden)), gone: not run (no " in page
    assert "Claims, gone: unknown" in page
    assert "Headline, toy: not run (no records of fixed_generous, base)." in page
    assert "| base | 0 | not run | 0 |" in page  # the learning curve's missing points


def test_the_learning_curve_is_drawn_when_it_has_points(tmp_path):
    steps = FAM.steps(10)
    records = cell("base", never) + cell("fixed_generous", lambda t, s, k: 2)
    records += cell(curve_agent("fixed_generous", steps), lambda t, s, k: 2 if t % 2 else None)
    docs = tmp_path / "docs" / "study.md"
    report = write_study_report(_spec(curve=["toy", 0]), tmp_path / "out", docs, records=records)
    curve = tmp_path / "docs" / "img" / "study" / "learning_curve_toy.png"
    assert curve in report.figures and curve.stat().st_size > 0
    assert "![learning_curve_toy](img/study/learning_curve_toy.png)" in docs.read_text()
