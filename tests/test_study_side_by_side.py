"""Two studies' verdicts side by side (the action scorer's and a language model's): one row per
contrast and family, one sentence per question on whether the answers agree, and the page of
one study written with the other's verdicts beside its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from budget_envs.study.results import Analysis, Binding, ContrastResult
from budget_envs.study.verdicts import comparison_sentence, policy_class, side_by_side_table

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("action scorer", "language model (m)")


def result(name, q, verdict, *, family="alfworld", claimed=True, est=0.1):
    run = verdict != "not run"
    return ContrastResult(
        family=family, name=name, text="", how="", verdict=verdict,
        estimate=est if run else None, low=est - 0.05 if run else None,
        high=est + 0.05 if run else None, claimed=claimed, question=q,
        note="" if run else "no records",
    )  # fmt: skip


def analysis(*results, binds=True, margin=True):
    families = sorted({r.family for r in results})
    bindings = [
        Binding(family=f, t=6, shares={}, binds=binds, margin=0.2, margin_met=margin)
        for f in families
    ]
    return Analysis(list(results), bindings, [], [], [], [], [], [])


def test_agreeing_differing_and_incomparable_answers_are_said_so():
    a = analysis(
        result("C1", 1, "inconclusive"), result("C2", 2, "contradicted"),
        result("C3a", 3, "supported"), result("C4", 0, "inconclusive"),
    )  # fmt: skip
    b = analysis(
        result("C1", 1, "inconclusive"), result("C2", 2, "supported"),
        result("C3a", 3, "not run"), result("C4", 0, "inconclusive", claimed=False),
    )  # fmt: skip
    assert comparison_sentence(1, a, b, NAMES).endswith("the answers agree: not answered for both.")
    assert "the answers differ: no for the action scorer, yes for the language model (m)" in (
        comparison_sentence(2, a, b, NAMES)
    )
    for q in (3, 0):
        said = comparison_sentence(q, a, b, NAMES)
        assert "cannot be compared: the language model (m) study has no claimed contrast" in said
    table = side_by_side_table(a, b, NAMES)
    rows = {(r[0], r[1]): r for r in table.rows}
    assert rows[("C1", "alfworld")][-1] == "yes" and rows[("C2", "alfworld")][-1] == "no"
    assert (
        rows[("C3a", "alfworld")][3].startswith("not run") and rows[("C3a", "alfworld")][-1] == "-"
    )
    assert rows[("C4", "alfworld")][3].startswith("not claimed")
    text = "\n".join(table.markdown)
    assert "### The answers for the action scorer and the language model (m)" in text
    assert "is not a measured difference between the policy classes" in text


def test_policy_classes_are_named_by_trainer_and_model():
    assert policy_class("rllib", "tiny") == "action scorer"
    assert policy_class("trl", "runs/sft") == "language model (runs/sft)"
    assert policy_class("trl", None) == "language model"


def test_a_base_record_names_the_model_it_fine_tuned(tmp_path):
    """A study whose base-sft record fine-tuned a prepared model with LoRA is named by it."""
    from budget_envs.study.folder import BASE_RECORD

    (tmp_path / BASE_RECORD).mkdir()
    record = {"trainer": "sft", "settings": {"model": "smollm2-135m", "lora": True}}
    (tmp_path / BASE_RECORD / "budgetmix_policy.json").write_text(json.dumps(record))
    named = policy_class("trl", "runs/x", tmp_path)
    assert named == "language model (smollm2-135m with LoRA)"
    assert policy_class("rllib", "runs/x", tmp_path) == "action scorer"


def test_a_page_written_with_another_studys_verdicts_beside_its_own(tmp_path):
    """The committed ALFWorld records compared with a copy of themselves: every verdict agrees,
    and the page carries the table right after the answers."""
    from dataclasses import replace

    from budget_envs.study.page import write_study_report
    from budget_envs.study.spec import StudySpec

    spec = StudySpec.from_json(json.loads((ROOT / "study" / "study.json").read_text()))
    curve = [c for c in spec.curves if c[0] == "alfworld"]
    alfworld = [f for f in spec.families if f.name == "alfworld"]
    spec = replace(spec, families=alfworld, curve=curve, n_boot=50)
    for name in ("other", "here"):
        (tmp_path / name / "records").mkdir(parents=True)
        for path in (ROOT / "study" / "records").glob("alfworld__*"):
            shutil.copy(path, tmp_path / name / "records" / path.name)
        (tmp_path / name / "study.json").write_text(json.dumps(spec.to_json()))
    here = tmp_path / "here"
    report = write_study_report(
        spec, here, tmp_path / "page.md", figures=False, compare_with=tmp_path / "other"
    )
    text = report.markdown
    head = text.index("### The answers for the action scorer in other and the action scorer here")
    assert text.index("### The questions, answered") < head < text.index("### Pre-registered")
    assert "the answers agree" in text and "the answers differ" not in text
    assert (here / "tables" / "side_by_side.csv").is_file()
    with pytest.raises(FileNotFoundError, match="no study.json"):
        write_study_report(spec, here, tmp_path / "p2.md", figures=False, compare_with=tmp_path)


def test_the_language_model_page_names_its_own_design_record():
    """docs/study-lm.md points at the language-model study's pre-registration and deviations,
    never at the action scorer's (which only the pre-registration's own text cites), and shows
    the pre-registration's sha256 as it is."""
    from budget_envs.study.check import sha256_file

    page = (ROOT / "docs" / "study-lm.md").read_text(encoding="utf-8")
    folder = "study/lm/study"
    assert (
        f"As {folder}/PREREGISTRATION.md states them (its deviations: {folder}/DEVIATIONS.md)"
        in page
    )
    others = page.split("### The pre-registration (")[0].replace(f"{folder}/", "")
    assert "study/PREREGISTRATION.md" not in others and "study/DEVIATIONS.md" not in others
    sha = sha256_file(ROOT / folder / "PREREGISTRATION.md")
    assert f"({folder}/PREREGISTRATION.md, sha256 `{sha}`)" in page
