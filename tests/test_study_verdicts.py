"""The study's reviewer-facing statistics on synthetic records with known values: recovery net
of consistency, the budget-visible contrasts, the claim rule (binding and the base's margin),
BudgetMix against the better fixed arm, the power note, the crossed tables over T, and the
generated answers."""

from __future__ import annotations

import numpy as np
import pytest
from test_study_contrasts import FAM, TOP, _family, _spec, by_contrast, cell, episode, never, probe

from budget_envs.study import contrasts as C
from budget_envs.study.grid import crossed_differences, crossed_surfaces
from budget_envs.study.verdicts import answer_sentence, answer_table


def visible(agent, outcome, *, seeds=(0, 1, 2), tasks=12, samples=2, grid=(2, 3, 4, 6, TOP)):
    """Budget-visible episodes: one per T, ``outcome(task, seed, sample, T)`` the first-success
    turn (None: never won)."""
    out = []
    for t_budget in grid:
        for r in cell(agent, lambda t, s, k, T=t_budget: outcome(t, s, k, T), seeds=seeds,
                      tasks=tasks, samples=samples):  # fmt: skip
            won = r["first_success_turn"]
            out.append(
                dict(r, study_visibility="remaining", visibility="remaining", budget=t_budget,
                     turns=won if won else t_budget, key=r["key"] + f"|T{t_budget}")
            )  # fmt: skip
    return out


# ---------------------------------------------------------------------- recovery net of consistency
def test_net_recovery_subtracts_how_often_a_won_task_is_won_again_without_a_fault():
    # 4 samples per unit; samples 0-2 won, sample 3 lost. A fault on sample 0 or 1 (both won
    # twins) is recovered on sample 0 only. The other no-fault samples of a won twin: 2 of 3
    # won. So recovery 1/2, consistency 2/3, net 1/2 - 2/3 on the same episodes.
    def outcome(t, s, k):
        return 2 if k < 3 else None

    records = cell("base", outcome)
    for s in (0, 1, 2):
        for t in range(12):
            records += [
                episode("base", t, s, k, 4 if k == 0 else None, fault_turn=1) for k in (0, 1)
            ]
            # a fault on the lost sample 3 has no won twin: it counts nowhere
            records.append(episode("base", t, s, 3, 4, fault_turn=1))
    fu = C.family_units(FAM, records)
    get = {
        m: C.draws(fu, [C.Term(1.0, "base", m)], 200)
        for m in ("recovery", "consistency", "net_recovery")
    }
    assert get["recovery"].value == pytest.approx(1 / 2)
    assert get["consistency"].value == pytest.approx(2 / 3)
    assert get["net_recovery"].value == pytest.approx(1 / 2 - 2 / 3)
    assert np.allclose(get["net_recovery"].boots, 1 / 2 - 2 / 3)  # every unit the same


def test_c2_is_net_recovery_against_single_steps_as_differences_in_probability():
    # RL wins every sample and recovers every fault: recovery 1 but consistency 1, net 0.
    # base wins half the samples, recovers none: net 0 - 1/3 (its other samples: 1 of 3 won).
    def half(t, s, k):
        return 2 if k % 2 == 0 else None

    records = cell("base", half) + cell("fixed_generous", lambda t, s, k: 2)
    records += cell("random", never) + cell("fixed_tight", half) + cell("mix", half)
    for s in (0, 1, 2):
        for t in range(12):
            records += [episode("fixed_generous", t, s, 0, 3, fault_turn=1)]
            records += [episode("base", t, s, 0, None, fault_turn=1)]
            records += [probe(a, t, s, t % 2 == 0) for a in ("base", "fixed_generous")]
    c2 = by_contrast(C.analyse(_spec(), records))["C2"]
    assert c2.verdict != "not run"
    assert c2.estimate == pytest.approx((1 - 1) - (0 - 1 / 3) - 0)
    # the old reading (relative recovery alone) would have said 1 - 0 = 1
    assert c2.estimate < 1


# ---------------------------------------------------------------------- budget visible
def test_visible_contrasts_read_pass1_from_the_run_at_t():
    # budget visible: mix wins at turn 2 whatever T; fixed_tight only when T >= 4 (it wastes
    # its first turns when it sees a small T). At the tight T=3: mix 1, fixed_tight 0.
    records = visible("mix", lambda t, s, k, T: 2)
    records += visible("fixed_tight", lambda t, s, k, T: 2 if T >= 4 else None)
    records += visible("fixed_generous", lambda t, s, k, T: 2)
    res = by_contrast(C.analyse(_spec(), records))
    c3c, c3d = res["C3c"], res["C3d"]
    assert c3c.visibility == "remaining" and c3c.estimate == pytest.approx(1.0)
    assert c3d.estimate == 0 and c3d.verdict == "inconclusive"
    # the hidden C3a has no records at all here
    assert res["C3a"].verdict == "not run"


# ---------------------------------------------------------------------- the claim rule
def test_a_family_whose_base_misses_its_margin_is_out_of_the_claims():
    # the budget binds (base never wins, every episode runs to T), but random wins as often as
    # base: the base's margin over random is 0 < 0.10, so nothing here is claimed
    def some(t, s, k):
        return 5 if t % 2 else None

    records = [r for a in ("base", "random") for r in cell(a, some)]
    records += [
        r for a in ("fixed_generous", "fixed_tight", "mix") for r in cell(a, lambda t, s, k: 2)
    ]
    analysis = C.analyse(_spec(), records)
    (b,) = analysis.bindings
    assert b.binds and b.margin == 0 and b.margin_met is False and not b.claimed
    res = by_contrast(analysis)
    # RL - base is 1 - 0 at tight T=3 and 1 - 1/2 at generous T=6: C1 -1/2, and the test
    # rejects...
    assert res["C1"].verdict == "contradicted" and res["C1"].estimate == pytest.approx(-0.5)
    assert not res["C1"].claimed  # ...but it is not a claim
    assert "misses its margin" in answer_sentence(1, analysis)
    assert "Not answered: no claimed contrast ran" in answer_sentence(1, analysis)


def test_holm_runs_over_the_claimed_contrasts_of_every_family_together():
    def base(t, s, k):
        return 2 if t % 3 == 0 else None

    def rl(t, s, k):
        return 2 if t % 3 == 0 else (5 if (t + s + k) % 4 else None)

    fams = (FAM, _family("twin"))
    records = []
    for fam in fams:
        for agent, how in (("base", base), ("fixed_generous", rl), ("fixed_tight", rl),
                           ("mix", rl), ("random", never)):  # fmt: skip
            records += cell(agent, how, family=fam.name)
    analysis = C.analyse(_spec(*fams), records)
    ran = [r for r in analysis.contrasts if r.verdict != "not run"]
    assert len(ran) == 6 and all(r.claimed and r.tests == 6 for r in ran)
    assert sorted(r.rank for r in ran) == [1, 2, 3, 4, 5, 6]
    text = answer_sentence(1, analysis)
    assert text.startswith("**Question 1:") and "Yes: C1 in toy (budget hidden) supported" in text
    assert "covers toy, twin" in text


# ---------------------------------------------------------------------- mix against the better arm
def test_mix_is_measured_against_the_better_fixed_arm_chosen_in_each_resample():
    # fixed_tight wins at turn 2 on even tasks, fixed_generous at turn 5 on every task: at T=3
    # the better is fixed_tight (1/2), at T=6 fixed_generous (1). mix wins at turn 2 on even
    # tasks and at turn 5 on odd ones: as good as the better arm at every T (difference 0).
    def tight(t, s, k):
        return 2 if t % 2 == 0 else None

    def generous(t, s, k):
        return 5

    def mix(t, s, k):
        return 2 if t % 2 == 0 else 5

    records = cell("mix", mix) + cell("fixed_tight", tight) + cell("fixed_generous", generous)
    analysis = C.analyse(_spec(visibilities=["hidden"]), records)
    rows = {b.t: b for b in analysis.best_fixed}
    assert set(rows) == set(FAM.eval_budgets)
    assert rows[3].better == "fixed_tight" and rows[3].estimate == 0
    assert rows[6].better == "fixed_generous" and rows[6].estimate == 0
    assert rows[2].estimate == 0 and rows[TOP].estimate == 0
    # the max inside each resample never lets mix look better than both
    assert all(b.high <= 1e-12 for b in rows.values())
    # an arm missing: every T says why
    gone = C.analyse(_spec(visibilities=["hidden"]), cell("mix", mix)).best_fixed
    assert {b.note for b in gone} == {"no records of fixed_tight, fixed_generous"}


# ---------------------------------------------------------------------- the power note
def test_power_note_from_the_crossed_standard_error_and_its_seed_and_task_parts():
    def base(t, s, k):
        return 2 if t % 3 == 0 else None

    def rl(t, s, k):
        return 2 if t % 3 == 0 or (t + 2 * s + k) % 3 else None

    records = cell("base", base) + cell("fixed_generous", rl) + cell("fixed_tight", rl)
    records += cell("mix", base) + cell("random", never)
    analysis = C.analyse(_spec(), records)
    power = {p.name: p for p in analysis.power}
    assert set(power) == {"C1", "C3a", "C3b"}  # the claimed contrasts that ran
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    for p in power.values():
        k = z(1 - 0.05 / (2 * p.tests)) + z(0.8)
        assert p.mdd == pytest.approx(k * p.se)
        assert 0 < p.se_tasks <= p.se * 1.5 and p.se_seeds >= 0
        assert p.projected <= p.mdd + 1e-12 and p.seeds == 3 and p.seeds_to == 8
    # one seed says nothing of the variance between seeds: no projection to more seeds
    one = [r for r in records if r["study_seed"] == 0]
    assert {p.projected for p in C.analyse(_spec(), one).power} == {None}


def test_seeds_only_and_tasks_only_resamples_hold_the_other_factor():
    seeds = [s for s in (0, 1, 2) for _ in range(4)]
    tasks = [t for _ in (0, 1, 2) for t in "abcd"]
    only_seeds = C.crossed_weights(seeds, tasks, 50, factors=("seeds",)).reshape(50, 3, 4)
    only_tasks = C.crossed_weights(seeds, tasks, 50, factors=("tasks",)).reshape(50, 3, 4)
    assert np.all(only_seeds == only_seeds[:, :, :1])  # every task once per drawn seed
    assert np.all(only_tasks == only_tasks[:, :1, :])  # every seed once per drawn task
    with pytest.raises(ValueError, match="factors"):
        C.crossed_weights(seeds, tasks, 5, factors=("episodes",))


# ---------------------------------------------------------------------- tables over T
def test_pass1_against_t_and_differences_use_the_crossed_bootstrap():
    def rl(t, s, k):
        return 2 if (t + s) % 2 else 5

    records = cell("fixed_generous", rl) + cell("mix", lambda t, s, k: 2)
    spec = _spec(visibilities=["hidden"])
    analysis = C.analyse(spec, records)
    surf = crossed_surfaces(spec, analysis.units)[("toy", "hidden", "fixed_generous")]
    assert surf.ts == sorted(FAM.eval_budgets)
    j = surf.ts.index(3)
    assert surf.mean[0, j] == pytest.approx(0.5) and surf.low[0, j] < 0.5 < surf.high[0, j]
    d = C.draws(
        analysis.units[("toy", "hidden")], [C.Term(1.0, "fixed_generous", "pass1", 3)], spec.n_boot
    )
    assert (surf.low[0, j], surf.high[0, j]) == pytest.approx(d.interval(0.95))
    (diff,) = crossed_differences(spec, analysis.units)
    assert diff.arm == "mix" and diff.cells[3][0] == pytest.approx(0.5)
    assert diff.cells[6] == (0.0, 0.0, 0.0) and diff.units == 36


def test_the_answers_open_the_page_with_one_sentence_per_question():
    records = cell("base", never) + cell("random", never)
    table = answer_table(C.analyse(_spec(), records))
    lines = [line for line in table.markdown if line.startswith("* **")]
    assert [line[4:14] for line in lines] == [
        "Question 1",
        "Question 2",
        "Question 3",
        "Imitation ",
    ]
    assert all("Not answered" in line for line in lines)
