"""``budgetmix study --check`` on the committed study: the pre-registration's sha256 is the one
DEVIATIONS.md names, every committed cell is paired and evaluated on unseen tasks, what the
reused first-design cells miss is listed, and the second design's new cells are pending."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from budget_envs.study import StudySpec, check_study, load_study_records
from budget_envs.study.check import listed_cells

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "study"


def test_the_committed_study_passes_its_check():
    proc = subprocess.run(
        [sys.executable, "-m", "budget_envs.cli", "study", "--check", "--out", str(STUDY)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "problems (0):" in proc.stdout and "study check: ok;" in proc.stdout


def test_every_committed_cell_is_paired_on_unseen_tasks_or_listed():
    spec = StudySpec.from_json(json.loads((STUDY / "study.json").read_text(encoding="utf-8")))
    report = check_study(spec, STUDY)
    committed = sorted(p.name[: -len(".jsonl.gz")] for p in (STUDY / "records").glob("*.jsonl.gz"))
    assert committed, "the study has records"
    for cell in committed:
        line = next(x for x in report.passed if x.startswith(f"{cell}: "))
        assert "paired" in line and "unseen tasks" in line, line
        # a cell with a finding is one DEVIATIONS.md names
        if not line.endswith("(as designed)"):
            assert cell in listed_cells(STUDY)
    pending = {line.split(":")[0] for line in report.pending}
    assert pending.isdisjoint(committed)
    assert not report.problems


def test_the_bootstrap_comparison_script_covers_every_contrast_old_and_new():
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "study_bootstrap_compare.py"),
            "--out",
            str(STUDY),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| alfworld |")]
    names = [row.split("|")[2].strip() for row in rows]
    from budget_envs.study import CONTRASTS

    records = load_study_records(STUDY)
    mine = [r for r in records if r["study_family"] == "alfworld"]
    # C4 and C2o run once a cell with the imitation arm / off-path probes has records (the
    # reused cells have neither)
    has = {
        "C4": any(r["agent"] == "imitation" for r in mine),
        "C2o": any(r.get("record") == "probe" and r.get("fault") for r in mine),
    }
    ran = [c.name for c in CONTRASTS if has.get(c.name, True)]
    assert names == [*ran, "C2 (old)", "C3a (old)"]
    for row in rows:
        assert row.count("Holm p") == 2 and row.count("[") == 2
