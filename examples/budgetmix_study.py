"""The BudgetMix study from Python: what ``budgetmix study`` runs, with the same function.

Trains the arms (the imitation base, RL at a fixed generous T, at a fixed tight T, with
BudgetMix, with a process reward; budget hidden and visible), evaluates them beside the random
agent on tasks not used in training, tests the pre-registered contrasts and writes the study
page::

    python examples/budgetmix_study.py --quick --out /tmp/study --docs /tmp/study/study.md
    python examples/budgetmix_study.py --report-only   # tables and figures from study/records

Needs ``pip install -e ".[rllib,plots]"`` in a clone of this repository.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from budget_envs.study import StudySpec, full_spec, quick_spec, run_study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the few-minute pipeline check")
    parser.add_argument("--report-only", action="store_true", help="no training, no episodes")
    parser.add_argument("--out", default="study", help="study folder (default study)")
    parser.add_argument("--docs", default="docs/study.md", help="page to write")
    args = parser.parse_args(argv)
    saved = Path(args.out) / "study.json"
    if args.report_only and saved.exists():
        spec = StudySpec.from_json(json.loads(saved.read_text(encoding="utf-8")))
    else:
        spec = quick_spec() if args.quick else full_spec()

    def progress(stage: str, done: int, total: int) -> None:
        if done == total:
            print(f"{stage}: {done}/{total} done")

    report = run_study(spec, args.out, args.docs, report_only=args.report_only, progress=progress)
    for c in report.contrasts:
        shown = (
            "not run" if c.estimate is None else f"{c.estimate:+.3f} [{c.low:+.3f}, {c.high:+.3f}]"
        )
        print(f"{c.family} {c.name}: {c.verdict} {shown}")
    print(f"report: {args.docs}; tables: {Path(args.out) / 'tables'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
