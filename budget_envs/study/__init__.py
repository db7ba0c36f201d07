"""The BudgetMix study: train the budget arms, evaluate them on unseen tasks, compare, report.

:func:`run_study` is what ``budgetmix study`` (and ``examples/budgetmix_study.py``) runs. A
:class:`StudySpec` says what to train and evaluate; the stages write into one study folder, and
the report reads the compressed records only, so ``--report-only`` regenerates every table and
figure without training. A killed study is resumed by running it again.

One module per concern; each imports only modules above it in this list:

* :mod:`~budget_envs.study.spec` - the arms, :class:`Family`, :class:`StudySpec` and the
  presets (:func:`full_spec`, :func:`quick_spec`, :func:`demo_spec`);
* :mod:`~budget_envs.study.folder` - the study folder's layout; the records, gzipped and read
  back;
* :mod:`~budget_envs.study.stats` - the report's descriptive numbers: Pass@(K,T) surfaces,
  differences against the fixed-generous arm, turns to success, single step against recovery;
* :mod:`~budget_envs.study.contrasts` - the study's tests: the pre-registered contrasts with
  Holm's correction, the headline and secondary differences, the stop-reason mix, whether a
  family is claimed (the budget binds, the base meets its margin), mix against the better fixed
  arm, the power note, Pass@(K,T), the learning curves, all from one crossed paired bootstrap
  (seeds and tasks; :mod:`~budget_envs.study.bootstrap`, :mod:`~budget_envs.study.units`);
* :mod:`~budget_envs.study.grid` - Pass@1 and the differences against fixed_generous at every
  T of the grid, on the same crossed bootstrap;
* :mod:`~budget_envs.study.provenance` - one ``train.json`` per policy, committed without the
  weights; :mod:`~budget_envs.study.check` - ``budgetmix study --check``;
* :mod:`~budget_envs.study.trl_stage` - the train stage with TRL (``trainer="trl"``) and
  :func:`trl_quick_spec`, its CPU pipeline check;
* :mod:`~budget_envs.study.stages` - the train, eval and compare stages;
* :mod:`~budget_envs.study.pair` - two arms side by side (``budgetmix demo``);
* :mod:`~budget_envs.study.tables`, :mod:`~budget_envs.study.verdicts` and
  :mod:`~budget_envs.study.figures` - the report's tables (page section and CSV), its plain
  answers and figures;
* :mod:`~budget_envs.study.page` - the report: tables, figures and the generated section of
  ``docs/study.md``;
* :mod:`~budget_envs.study.run` - the whole study in one call.

Every public name is importable from here. Nothing heavy loads on import: RLlib, Ray, torch
and matplotlib load when a stage or a figure needs them.
"""

from __future__ import annotations

from budget_envs.study.check import CheckReport, check_study
from budget_envs.study.contrasts import (
    ALPHA,
    BASE_MARGIN,
    BINDS_AT,
    CONTRASTS,
    Analysis,
    Binding,
    Contrast,
    ContrastResult,
    CurvePoint,
    Level,
    PairDiff,
    PassK,
    StopMix,
    Term,
    analyse,
    crossed_weights,
    derived_stop,
    hierarchical_weights,
    holm,
)
from budget_envs.study.folder import compress_records, load_study_records
from budget_envs.study.page import BEGIN, END, StudyReport, write_study_report
from budget_envs.study.pair import PairSummary, pair_summary
from budget_envs.study.run import run_study
from budget_envs.study.spec import (
    ARMS,
    BASE,
    IMITATION,
    RANDOM,
    RL,
    VISIBILITIES,
    Family,
    StudySpec,
    arm_budget,
    curve_agent,
    demo_spec,
    full_spec,
    quick_spec,
)
from budget_envs.study.stages import Progress, compare_stage, eval_stage, train_stage
from budget_envs.study.trl_stage import train_stage_trl, trl_quick_spec

#: The records' writer under the name it had when the study was one module.
_compress = compress_records

__all__ = [
    "ALPHA",
    "ARMS",
    "BASE",
    "BASE_MARGIN",
    "BEGIN",
    "BINDS_AT",
    "CONTRASTS",
    "END",
    "IMITATION",
    "RANDOM",
    "RL",
    "VISIBILITIES",
    "Analysis",
    "Binding",
    "CheckReport",
    "Contrast",
    "ContrastResult",
    "CurvePoint",
    "Family",
    "Level",
    "PairDiff",
    "PairSummary",
    "PassK",
    "Progress",
    "StopMix",
    "StudyReport",
    "StudySpec",
    "Term",
    "analyse",
    "arm_budget",
    "check_study",
    "compare_stage",
    "compress_records",
    "curve_agent",
    "demo_spec",
    "derived_stop",
    "eval_stage",
    "full_spec",
    "crossed_weights",
    "hierarchical_weights",
    "holm",
    "load_study_records",
    "pair_summary",
    "quick_spec",
    "run_study",
    "train_stage",
    "train_stage_trl",
    "trl_quick_spec",
    "write_study_report",
]
