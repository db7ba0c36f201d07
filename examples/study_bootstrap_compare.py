"""Every contrast of the study, old and new, under the two bootstraps the study has used.

Prints a Markdown table: for each family and contrast, the estimate, and for the first design's
bootstrap (training seeds drawn, then tasks drawn inside each drawn seed) and the crossed one
(seeds and tasks drawn as crossed factors), the Holm-level interval, the Holm-adjusted p and
the verdict. Holm runs over the claimed contrasts of the study together, as the page does. The
old contrasts are the first design's C2 (relative recovery, not net of consistency) and C3a/C3b
(mix against fixed_generous at both T); the new ones are those of study/PREREGISTRATION.md.

Usage: ``python examples/study_bootstrap_compare.py [--out study]``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from budget_envs.study import StudySpec, load_study_records
from budget_envs.study.bootstrap import Draws, hierarchical_weights
from budget_envs.study.contrasts import CONTRASTS, Contrast, _diff, _verdict, budget_binding
from budget_envs.study.holm import holm
from budget_envs.study.spec import BASE, RL
from budget_envs.study.units import FamilyUnits, draws, family_units

OLD = (
    Contrast(
        "C2 (old)",
        "relative recovery against single steps",
        "[RL - base relative recovery] - [RL - base single-step accuracy]",
        _diff(RL, BASE, "recovery") + _diff(RL, BASE, "single_step", sign=-1.0),
        2,
    ),
    Contrast(
        "C3a (old)", "mix - fixed_generous at tight", "", _diff("mix", RL, "pass1", "tight"), 3
    ),
)


class Nested(FamilyUnits):
    """The first design's bootstrap: seeds drawn, then tasks inside each drawn seed."""

    def weights(self, units, n_boot, factors=None):  # type: ignore[override]
        return hierarchical_weights([s for s, _ in units], n_boot)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="study", help="the study folder (default study)")
    args = ap.parse_args()
    out = Path(args.out)
    spec = StudySpec.from_json(json.loads((out / "study.json").read_text(encoding="utf-8")))
    records = load_study_records(out)
    claimed = {b.family for b in budget_binding(spec, records) if b.claimed}
    contrasts = [*CONTRASTS, *OLD]
    got: dict[str, dict] = {"nested": {}, "crossed": {}}
    for fam in spec.families:
        for vis in spec.visibilities:
            crossed = family_units(fam, records, vis)
            nested = Nested(fam, crossed.agents, vis)
            for c in contrasts:
                if c.visibility != vis:
                    continue
                for name, fu in (("crossed", crossed), ("nested", nested)):
                    d = draws(fu, c.terms, spec.n_boot)
                    if isinstance(d, Draws):
                        got[name][(fam.name, c.name)] = d
    print("| family | contrast | estimate | first design's bootstrap | crossed bootstrap |")
    print("|---|---|---|---|---|")
    for fam in spec.families:
        for c in contrasts:
            key = (fam.name, c.name)
            if key not in got["crossed"]:
                continue
            cells = []
            for name in ("nested", "crossed"):
                group = [k for k in got[name] if (k[0] in claimed) == (fam.name in claimed)
                         and (fam.name in claimed or k[0] == fam.name)
                         and "(old)" not in k[1]]  # fmt: skip
                if "(old)" in c.name:  # an old contrast replaces its new namesake in Holm
                    new = c.name.split(" ")[0]
                    group = [k for k in group if k != (fam.name, new)] + [key]
                steps = dict(zip(group, holm([got[name][k].p for k in group])))
                d, step = got[name][key], steps[key]
                verdict, low, high = _verdict(d, step)
                cells.append(f"[{low:+.3f}, {high:+.3f}] Holm p {step.adjusted:.3f} {verdict}")
            mark = "" if fam.name in claimed else " (not claimed)"
            print(f"| {fam.name}{mark} | {c.name} | {got['crossed'][key].value:+.3f} | "
                  f"{cells[0]} | {cells[1]} |")  # fmt: skip


if __name__ == "__main__":
    main()
