"""The budgetmix CLI: list, play, eval, report, compare, demo and the dispatchers."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from contract_helpers import TOY_ID

from budget_envs import cli
from budget_envs.eval.runner import load_records


def run(argv, stdin=""):
    out = io.StringIO()
    rc = cli.main(argv, stdin=io.StringIO(stdin), stdout=out)
    return rc, out.getvalue()


def test_list_shows_every_registered_id():
    rc, text = run(["list"])
    assert rc == 0 and TOY_ID in text and "T=12" in text


def test_console_script_runs():
    script = Path(sys.executable).with_name("budgetmix")
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for command in ("list", "eval", "report", "compare", "play", "demo", "prepare", "serve-web"):
        assert command in proc.stdout


def test_play_reads_stdin_and_shows_the_budget():
    # toy-001: the oracle path, typed by a person (with a typo and a help command on the way)
    from contract_helpers import make

    env = make(TOY_ID, budget=None)
    env.reset(seed=0, options={"task_id": 1})
    moves = []
    while not env.unwrapped.done:
        a = env.unwrapped.oracle_actions()[0]
        moves.append(a)
        env.step(a)
    stdin = "\n".join([":actions", "jump around"] + moves) + "\n"
    rc, text = run(["play", TOY_ID, "--task", "1", "--budget", "20"], stdin)
    assert rc == 0
    assert "Goal: Take the key" in text and "Valid now: look" in text
    assert "[turn 0/20, 20 left]" in text and "[turn 1/20, 19 left]" in text
    assert f"You won: {len(moves) + 1} of 20 turns used" in text


def test_play_runs_out_of_turns_and_ends_on_eof():
    rc, text = run(["play", TOY_ID, "--budget", "2", "--seed", "3"], "look\nlook\n")
    assert rc == 0 and "Out of turns: 2 of 2 turns used" in text
    rc, text = run(["play", TOY_ID], "look\n")
    assert rc == 0 and "(end of input)" in text


def test_play_takes_visibility_and_faults():
    # remaining: the observation carries the turns left; one drop at turn 1, listed at the end
    rc, text = run(
        ["play", TOY_ID, "--task", "1", "--budget", "2", "--visibility", "remaining"]
        + ["--faults", '{"kinds": ["drop"], "at_turn": 1}'],
        "look\nlook\n",
    )
    assert rc == 0
    assert "Turns left: 2 of 2" in text and "Turns left: 1 of 2" in text
    assert "Nothing happens." in text  # the dropped turn's no-effect feedback
    assert "Out of turns: 2 of 2 turns used." in text
    assert text.rstrip().endswith("Faults injected: drop at turn 1.")
    # hidden (the default): no budget line in the observation, only the status line
    rc, text = run(["play", TOY_ID, "--task", "1", "--budget", "2"], "look\nlook\n")
    assert rc == 0 and "Turns left:" not in text and "[turn 1/2, 1 left]" in text
    assert "Faults injected" not in text
    # kinds alone: a comma list, as for serve
    rc, text = run(["play", TOY_ID, "--budget", "2", "--faults", "slip,drop"], "look\nlook\n")
    assert rc == 0 and "Out of turns" in text


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--faults", "nosuch"], "unknown fault kind 'nosuch'"),
        (["--faults", "{bad"], "bad --faults '{bad': not JSON"),
        (["--visibility", "loud"], "visibility must be one of"),
    ],
)
def test_play_bad_visibility_or_faults_is_one_line(capsys, extra, says):
    rc, _ = run(["play", TOY_ID, *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err


def test_eval_report_compare(tmp_path):
    run_dir = tmp_path / "run"
    rc, text = run(
        [
            "eval",
            TOY_ID,
            "--agent",
            "random",
            "--agent",
            "eps=oracle:epsilon=0.2",
            "--agent",
            "oracle",
            "--tasks",
            "4",
            "--samples",
            "3",
            "--budgets",
            "12",
            "--fault-turns",
            "1,3",
            "--probe-states",
            "2",
            "--out",
            str(run_dir),
            "--quiet",
        ]
    )
    assert rc == 0, text
    recs = load_records(run_dir)
    assert {r["agent"] for r in recs} == {"random", "eps", "oracle"}
    # the closing table: one row per agent, episodes without a fault, Pass@1 at T_max = 12
    table = text.split("Pass@1 at T_max", 1)[1].splitlines()[1:5]
    assert table[0].split()[:5] == ["env", "agent", "episodes", "errors", "T_max"]
    rows = {line.split()[1]: line.split() for line in table[1:]}
    assert set(rows) == {"random", "eps", "oracle"}
    assert all(row[0] == TOY_ID and row[2:5] == ["12", "0", "12"] for row in rows.values())
    assert rows["oracle"][5:8] == ["1.000", "[1.000,", "1.000]"]
    assert 0.0 <= float(rows["random"][5]) <= 1.0 and float(rows["oracle"][-1]) >= 1
    assert f"budgetmix report {run_dir}" in text
    assert (run_dir / "config.json").exists()
    rc, text = run(["eval", TOY_ID, "--out", str(run_dir), "--quiet"])
    assert rc == 2  # no silent overwrite
    rc, text = run(
        [
            "eval",
            TOY_ID,
            "--agent",
            "random",
            "--agent",
            "eps=oracle:epsilon=0.2",
            "--agent",
            "oracle",
            "--tasks",
            "4",
            "--samples",
            "3",
            "--budgets",
            "12",
            "--fault-turns",
            "1,3",
            "--probe-states",
            "2",
            "--out",
            str(run_dir),
            "--quiet",
            "--resume",
        ]
    )
    assert rc == 0 and "0 records written" in text

    rc, text = run(["report", str(run_dir), "--boot", "200"])
    assert (
        rc == 0
        and "## Pass@(K,T)" in text
        and "## Recovery" in text
        and "## Single-step accuracy" in text
    )
    report = run_dir / "report"
    for name in (
        "report.md",
        "pass_at_kt.csv",
        "summary.csv",
        "single_step.csv",
        "recovery.csv",
        "Toy_v0_heatmap.png",
        "Toy_v0_pass1_vs_T.png",
        "Toy_v0_passK_at_Tmax.png",
        "Toy_v0_single_step.png",
        "Toy_v0_recovery.png",
    ):
        assert (report / name).stat().st_size > 0, name
    rows = list(csv.DictReader(open(report / "pass_at_kt.csv")))
    oracle_top = [r for r in rows if r["agent"] == "oracle" and r["K"] == "1" and r["T"] == "12"]
    assert float(oracle_top[0]["pass"]) == 1.0

    rc, text = run(
        [
            "compare",
            str(run_dir),
            str(run_dir),
            "--agent-a",
            "random",
            "--agent-b",
            "oracle",
            "--out",
            str(tmp_path / "cmp"),
            "--boot",
            "200",
        ]
    )
    assert rc == 0 and "oracle (B) minus random (A)" in text and "holds" in text
    assert (tmp_path / "cmp" / "difference.csv").exists() and (
        tmp_path / "cmp" / "Toy_v0_difference.png"
    ).exists()
    rc, _ = run(["compare", str(run_dir), str(run_dir)])
    assert rc == 2  # several agents: must choose


def test_eval_visible_run(tmp_path):
    rc, text = run(
        [
            "eval",
            TOY_ID,
            "--agent",
            "oracle",
            "--visibility",
            "remaining",
            "--budgets",
            "6,12",
            "--tasks",
            "2",
            "--samples",
            "2",
            "--out",
            str(tmp_path / "v"),
            "--quiet",
        ]
    )
    assert rc == 0
    rows = [line.split() for line in text.splitlines() if line.startswith(TOY_ID)]
    assert [row[1:3] for row in rows] == [["oracle", "(remaining)"]]
    assert rows[0][3:6] == ["8", "0", "12"]  # 2 tasks x 2 samples, at T=6 and at T=12
    rc, text = run(["report", str(tmp_path / "v"), "--no-figures", "--boot", "50"])
    assert rc == 0 and "oracle (remaining)" in text and "| T=6 | T=12 |" in text


def test_demo_on_what_is_registered(tmp_path):
    rc, text = run(
        ["demo", "--out", str(tmp_path / "demo"), "--quiet", "--workers", "1", "--env", TOY_ID]
        + ["--no-train"]
    )
    assert rc == 0, text
    assert "Trained pair" not in text and not (tmp_path / "demo" / "trained").exists()
    assert "Pass@(1,T_max)" in text and "oracle-eps0.3 (remaining)" in text
    assert "One oracle episode on BudgetMixTest/Toy-v0" in text and "episode summary:" in text
    assert "[turn 1/12, 11 left]" in text
    assert (tmp_path / "demo" / "report.md").exists()
    assert len(list((tmp_path / "demo").glob("*.png"))) == 6
    report = (tmp_path / "demo" / "report.md").read_text()
    assert "## What a turn buys" in report and "keeps 95% of its Pass@1" in report
    assert (tmp_path / "demo" / "budget_curve.csv").exists()


def test_dispatchers_explain_what_is_missing(capsys):
    rc, _ = run(["prepare", "nethack"])
    assert rc == 2 and "unknown family" in capsys.readouterr().err
    rc = cli._dispatch(
        "budget_envs.envs.nosuchfamily.prepare", ("cli_main",), [], "prepare nosuchfamily", "hint"
    )
    assert rc == 2 and "not available" in capsys.readouterr().err


def test_dispatchers_hand_every_argument_to_the_family(capsys):
    # --help goes to the family's own parser, not to budgetmix's
    with pytest.raises(SystemExit) as exc:
        run(["prepare", "textworld", "--help"])
    assert exc.value.code == 0 and "budgetmix prepare textworld" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        run(["serve-web", "--help"])
    assert exc.value.code == 0 and "--port" in capsys.readouterr().out


def test_bad_arguments_exit_with_usage():
    with pytest.raises(SystemExit):
        run(["eval", TOY_ID, "--out", "x", "--budgets", "a,b"])


def test_eval_budgets_take_the_budget_grammar_as_a_grid(tmp_path):
    argv = ["eval", TOY_ID, "--agent", "oracle", "--visibility", "remaining"]
    argv += ["--tasks", "2", "--samples", "1", "--quiet"]
    rc, text = run(argv + ["--out", str(tmp_path / "g"), "--budgets", "4..12:4"])
    assert rc == 0, text
    assert sorted({r["budget"] for r in load_records(tmp_path / "g")}) == [4, 8, 12]
    rc, text = run(argv + ["--out", str(tmp_path / "r"), "--budgets", "5..7"])
    assert rc == 0, text
    assert sorted({r["budget"] for r in load_records(tmp_path / "r")}) == [5, 6, 7]


@pytest.mark.parametrize("text", ["log:4..12", "x", "9..3"])
def test_eval_refuses_budgets_that_are_not_a_grid(text, capsys):
    with pytest.raises(SystemExit) as exc:
        run(["eval", TOY_ID, "--agent", "oracle", "--budgets", text])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--budgets" in err
    if text.startswith("log"):
        assert "distribution drawn per episode" in err
