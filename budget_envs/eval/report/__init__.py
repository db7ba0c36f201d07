"""Reports of a run: markdown and CSV tables, PNG figures; and the comparison of two runs.

Tables and numbers come from :mod:`budget_envs.eval.metrics`; the figures need matplotlib (the
``plots`` extra) and are drawn with the object-oriented API (no pyplot global state). One idea
per module: :mod:`.surfaces` (Pass@(K,T) surfaces of records), :mod:`.tables` (formats, CSV
files, shared markdown sections), :mod:`.figures`, :mod:`.write` (a run's report) and
:mod:`.compare` (two runs). Every public name is importable from here.
"""

from __future__ import annotations

from budget_envs.eval.report.compare import Comparison, compare_runs
from budget_envs.eval.report.figures import figure_class as _figure_module  # noqa: F401
from budget_envs.eval.report.surfaces import GroupSurface, group_surfaces
from budget_envs.eval.report.tables import prefix_markdown, recovery_by_cell_markdown
from budget_envs.eval.report.write import ReportResult, write_report

__all__ = [
    "Comparison",
    "GroupSurface",
    "ReportResult",
    "compare_runs",
    "group_surfaces",
    "prefix_markdown",
    "recovery_by_cell_markdown",
    "write_report",
]
