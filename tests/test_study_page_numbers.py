"""The study page's hand-written Design and Limits sections state no number that the committed
design (``study/study.json``) or the study code does not give.

Every number written in those sections (outside code spans, which name things) must be one of:
a value of ``study.json`` (any field, a list's length, a range's ends), a quantity the design
implies (env steps and gradient updates per arm, a curve checkpoint's env steps, T over the
optimal length), or a constant of ``budget_envs.study`` (confidence, Holm's alpha, the claim
thresholds); shares may be written as percentages. A number that is none of these is a claim
the page makes on its own, and fails here with its line.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from budget_envs.study import bootstrap, check, contrasts

holm = importlib.import_module("budget_envs.study.holm")

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "study.md"
SPEC = ROOT / "study" / "study.json"
SECTIONS = ("Design", "Limits")

_CODE = re.compile(r"`[^`]*`")
# A number: not part of a word or a name (C1, s5, Pass@1, D4, 3x).
_NUMBER = re.compile(r"(?<![\w@.\-])(\d[\d,]*(?:\.\d+)?(?:e-\d+)?)(?![\w@])")
# Coverage bounds of the crossed bootstrap's test (tests/test_study_contrasts.py), which the
# Statistics section cites; read from that test, not restated here.
_COVERAGE = re.compile(r"assert (0\.\d+) <= crossed <= (0\.\d+)")


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip() if line[3:].strip() in SECTIONS else None
            if current:
                out[current] = []
            continue
        if current:
            out[current].append(line)
    return out


def _leaves(value, into: set[float]) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        into.add(float(value))
    elif isinstance(value, dict):
        for item in value.values():
            _leaves(item, into)
    elif isinstance(value, (list, tuple)):
        into.add(float(len(value)))
        for item in value:
            _leaves(item, into)


def _implied(spec: dict) -> set[float]:
    """What the design's fields imply: per family the env steps and gradient updates of an RL
    arm, the env steps at each curve checkpoint, and every T over the optimal length."""
    out: set[float] = set()
    for fam in spec["families"]:
        steps = fam["iterations"] * fam["batch_size"]
        updates = fam["iterations"] * fam["num_epochs"] * fam["batch_size"] // fam["minibatch_size"]
        out |= {float(steps), float(updates)}
        out |= {float(i * fam["batch_size"]) for i in fam["curve_iterations"]}
        for t in [*fam["eval_budgets"], fam["tight"], fam["generous"]]:
            out.add(round(t / fam["optimal"], 2))
    return out


def _constants() -> set[float]:
    names = (
        bootstrap.CONFIDENCE,
        holm.ALPHA,
        contrasts.BINDS_AT,
        contrasts.BASE_MARGIN,
        contrasts.POWER,
        contrasts.SEEDS_TO,
        check.STEPS_TOLERANCE,
    )
    test_text = (ROOT / "tests" / "test_study_contrasts.py").read_text(encoding="utf-8")
    bounds = _COVERAGE.search(test_text)
    assert bounds, "the coverage test's bounds moved: update _COVERAGE"
    return {float(x) for x in names} | {float(x) for x in bounds.groups()}


def _allowed() -> set[float]:
    spec = json.loads(SPEC.read_text(encoding="utf-8"))
    base: set[float] = set()
    _leaves(spec, base)
    base |= _implied(spec) | _constants()
    percents = {round(v * 100, 6) for v in base if 0 < v <= 1}
    return base | percents


def _parse(token: str) -> float:
    return float(token.replace(",", ""))


def _numbers(lines: list[str]) -> list[tuple[str, str]]:
    found = []
    for line in lines:
        for token in _NUMBER.findall(_CODE.sub("", line)):
            found.append((token, line.strip()))
    return found


def test_the_page_has_both_hand_written_sections():
    sections = _sections(PAGE.read_text(encoding="utf-8"))
    assert set(sections) == set(SECTIONS)
    for name in SECTIONS:
        assert _numbers(sections[name]), f"no number found in {name}: the parser is broken"


@pytest.mark.parametrize("section", SECTIONS)
def test_every_number_of_a_hand_written_section_comes_from_the_design(section):
    lines = _sections(PAGE.read_text(encoding="utf-8"))[section]
    allowed = _allowed()
    stray = [
        f"{token!r} in: {line}"
        for token, line in _numbers(lines)
        if not any(abs(_parse(token) - v) <= 1e-9 * max(1.0, abs(v)) for v in allowed)
    ]
    assert not stray, "numbers that study.json does not give:\n" + "\n".join(stray)


def test_a_number_the_design_does_not_give_is_caught():
    lines = ["Each RL arm runs 70 iterations of 1,024 env steps (71,680 steps) at lr 2e-4."]
    allowed = _allowed()
    caught = {t for t, _ in _numbers(lines) if _parse(t) not in allowed}
    assert caught == {"70", "71,680", "2e-4"}
