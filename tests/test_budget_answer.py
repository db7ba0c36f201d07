"""What a turn buys (``budgetmix report --keep``, the report's section, ``compare``): the
smallest T keeping a share of Pass@1 at T_max, its task-bootstrap interval, per-turn gains and
costs, on records whose answers are known by hand, and through the CLI on real eval runs with
mixed outcomes."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from budget_envs.cli import main
from budget_envs.eval.report import group_surfaces
from budget_envs.eval.report.budget import budget_answers, budget_curve_rows, check_keep


def _rec(task, sample, budget, fs, turns=None, visibility="hidden", agent="a", **kw):
    """An episode record; ``fs`` the first-success turn (None: not won)."""
    return {
        "env_id": "BudgetMix/Toy-v0",
        "agent": agent,
        "task_id": task,
        "sample": sample,
        "budget": budget,
        "visibility": visibility,
        "fault_turn": None,
        "first_success_turn": fs,
        "won": fs is not None,
        "turns": turns if turns is not None else (fs if fs is not None else budget),
        "record": "episode",
        "error": None,
        **kw,
    }


def _answer(records, keep=0.95, n_boot=400):
    surfaces = group_surfaces(records, n_boot=1)
    (answer,) = budget_answers(surfaces, records, keep=keep, n_boot=n_boot, seed=0)
    return answer


def test_smallest_t_keeping_the_share_and_the_per_turn_gains_by_hand():
    # 10 tasks x 2 samples, T_max 10: first successes at 2 (8 tasks), at 9 (2 tasks); each task's
    # second sample never wins.
    recs = []
    for i in range(10):
        recs += [_rec(f"t{i}", 0, 10, 2 if i < 8 else 9), _rec(f"t{i}", 1, 10, None)]
    a = _answer(recs, keep=0.95)
    assert a.ts == list(range(1, 11))
    assert a.pass1[1] == pytest.approx(0.4) and a.pass1[-1] == pytest.approx(0.5)
    # 0.4 < 0.95 * 0.5 until T=9, where all of it is there.
    assert a.t_keep == 9
    assert a.marginal[1] == pytest.approx(0.4) and a.marginal[8] == pytest.approx(0.1)
    assert a.top_gains() == [(2, pytest.approx(0.4)), (9, pytest.approx(0.1))]
    assert a.t_low <= a.t_keep <= a.t_high <= a.t_max
    # At 80% the T of the steep part answers.
    assert _answer(recs, keep=0.8).t_keep == 2
    text = a.sentence()
    assert "keeps 95% of its Pass@1 at T=10 (0.500) from T=9" in text
    assert "+0.400 at T=2" in text


def test_an_interval_that_may_never_be_reached_reads_above_t_max():
    # One task of 10 wins: a third of the resamples draw no winner at all.
    recs = [_rec(f"t{i}", 0, 8, 3 if i == 0 else None) for i in range(10)]
    a = _answer(recs)
    assert a.t_keep == 3 and a.t_high is None
    assert a.interval_text() == "[3, > 8]"
    # An agent that wins nothing has no T to keep.
    none = _answer([_rec(f"t{i}", 0, 8, None) for i in range(4)])
    assert none.t_keep is None and none.interval_text() == "-"
    assert "wins nothing at T=8" in none.sentence()


def test_visible_runs_answer_only_at_the_budgets_they_played():
    recs = []
    for t, wins in ((4, 2), (8, 6), (12, 8)):
        recs += [
            _rec(f"t{i}", 0, t, 3 if i < wins else None, visibility="remaining") for i in range(8)
        ]
    a = _answer(recs, keep=0.95)
    assert a.ts == [4, 8, 12]
    assert a.pass1 == pytest.approx([0.25, 0.75, 1.0])
    # Per extra turn: the step's gain over the turns it took.
    assert a.marginal == pytest.approx([0.25 / 4, 0.5 / 4, 0.25 / 4])
    assert a.t_keep == 12


def test_costs_per_turn_and_per_success_from_the_records():
    recs = [
        _rec("t0", 0, 6, 2, wall_time=1.0, tokens={"prompt_tokens": 150, "completion_tokens": 50}),
        _rec(
            "t1", 0, 6, None, wall_time=3.0, tokens={"prompt_tokens": 500, "completion_tokens": 100}
        ),
    ]
    a = _answer(recs, keep=1.0)
    # 800 tokens over 8 turns, 4 s over 8 turns.
    assert a.tokens_per_turn == pytest.approx(100.0) and a.seconds_per_turn == pytest.approx(0.5)
    # At T=2 both episodes have used 2 turns: 200 tokens an episode, half of them win.
    assert a.t_keep == 2
    assert a.tokens[1] == pytest.approx(200.0)
    assert a.per_success(a.tokens, 2) == pytest.approx(400.0)
    # At T=6 the winner stopped at 2, the loser ran 6: 4 turns an episode on average.
    assert a.tokens[-1] == pytest.approx(400.0)
    rows = budget_curve_rows([a])
    assert [r["T"] for r in rows] == list(range(1, 7))
    assert rows[1]["tokens_per_success"] == pytest.approx(400.0) and rows[0]["keeps"] == 0
    assert rows[0]["tokens_per_success"] is None  # nothing won at T=1
    assert "100 tokens (400 tokens per success at T=2)" in a.sentence()


@pytest.mark.parametrize("bad", [0, -0.1, 1.01, float("nan"), True, "0.9"])
def test_keep_outside_zero_one_is_refused(bad):
    with pytest.raises(ValueError, match="keep"):
        check_keep(bad)


def _rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_report_and_compare_keep_on_real_runs(tmp_path, capsys):
    env = ["BudgetMix/TextWorld-v0", "--env-kwargs", '{"level": 1}', "--tasks", "10"]
    env += ["--samples", "3", "--budgets", "16", "--quiet"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert (
        main(["eval", *env, "--agent", "random", "--agent", "oracle:epsilon=0.5", "--out", str(a)])
        == 0
    )
    assert main(["eval", *env, "--agent", "oracle:epsilon=0.2", "--out", str(b)]) == 0
    capsys.readouterr()
    assert main(["report", str(a), "--keep", "0.9", "--no-figures"]) == 0
    text = capsys.readouterr().out
    assert "## What a turn buys" in text and "T keeping 90%" in text
    rows = _rows(a / "report" / "budget_curve.csv")
    agents = {r["agent"] for r in rows}
    assert len(agents) == 2 and {r["T"] for r in rows} == {str(t) for t in range(1, 17)}
    for agent in agents:
        mine = [r for r in rows if r["agent"] == agent]
        p = np.array([float(r["pass1"]) for r in mine])
        assert np.all(np.diff(p) >= -1e-9)  # Pass@1 never falls with more turns
        if p[-1] > 0:
            first = min(int(r["T"]) for r in mine if r["keeps"] == "1")
            assert first == min(t for t, x in zip(range(1, 17), p) if x >= 0.9 * p[-1] - 1e-9)
            assert f"from T={first} [" in text
    assert main(["compare", str(a), str(b), "--agent-a", "oracle-eps0.5", "--no-figures"]) == 0
    out = capsys.readouterr().out
    assert "oracle-eps0.5 on BudgetMix/TextWorld-v0" in out
    assert "oracle-eps0.2 on BudgetMix/TextWorld-v0" in out
    assert "keeps 95% of its Pass@1" in out
    both = _rows(b / "compare" / "budget_curve.csv")
    assert {r["agent"] for r in both} == {"oracle-eps0.5", "oracle-eps0.2"}
    for bad in ("0", "1.5", "x"):
        with pytest.raises(SystemExit) as exc:
            main(["report", str(a), "--keep", bad])
        assert exc.value.code == 2
    capsys.readouterr()
    json.dumps(rows)  # plain strings: a CSV a spreadsheet reads
