"""The study's figures: Pass@1 against T, the difference heatmap and single step against
recovery, per family and visibility (matplotlib loads when they are drawn)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.study.spec import RANDOM, StudySpec


def draw_figures(
    spec: StudySpec,
    surfaces: Mapping[tuple, Any],
    heat: Mapping[tuple[str, str], Mapping[str, list[tuple[int, float, float, float]]]],
    scatter: Mapping[tuple[str, str], list[tuple[str, float | None, float | None]]],
    img: Path,
) -> list[Path]:
    from budget_envs._util import import_optional

    Figure = import_optional("matplotlib.figure", extra="plots", what="figures").Figure
    img.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            keys = [(fam.name, vis, a) for a in [*spec.arms, RANDOM, *spec.references]]
            present = [k for k in keys if k in surfaces]
            if not present:
                continue
            fig = Figure(figsize=(6.5, 4))
            ax = fig.subplots()
            for k in present:
                s = surfaces[k]
                ax.plot(s.ts, s.mean[0], marker="." if vis != "hidden" else None, label=k[2])
                ax.fill_between(s.ts, s.low[0], s.high[0], alpha=0.15)
            for t, name in ((fam.tight, "tight"), (fam.generous, "generous")):
                ax.axvline(t, color="grey", ls=":", lw=1)
                ax.text(t, 1.01, name, fontsize=7, ha="center")
            ax.set(xlabel="turn budget T", ylabel="Pass@1", ylim=(-0.02, 1.05))
            ax.set_title(f"{fam.name}, budget {vis}: Pass@1 against T", fontsize=9)
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
            fig.tight_layout()
            path = img / f"pass1_{fam.name}_{vis}.png"
            fig.savefig(path, dpi=110)
            out.append(path)

            cells = heat.get((fam.name, vis), {})
            if cells:
                arms = list(cells)
                ts = sorted({t for v in cells.values() for t, *_ in v})
                m = np.full((len(arms), len(ts)), np.nan)
                for i, arm in enumerate(arms):
                    for t, d, _lo, _hi in cells[arm]:
                        m[i, ts.index(t)] = d
                fig = Figure(figsize=(1.2 + 0.8 * len(ts), 1.2 + 0.6 * len(arms)))
                ax = fig.subplots()
                im = ax.imshow(m, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
                ax.set_xticks(range(len(ts)), [str(t) for t in ts])
                ax.set_yticks(range(len(arms)), arms, fontsize=7)
                for i in range(len(arms)):
                    for j in range(len(ts)):
                        if m[i, j] == m[i, j]:
                            ax.text(j, i, f"{m[i, j]:+.2f}", ha="center", va="center", fontsize=7)
                ax.set_xlabel("turn budget T")
                ax.set_title(f"{fam.name}, {vis}: Pass@1 minus fixed generous", fontsize=9)
                fig.colorbar(im, ax=ax)
                fig.tight_layout()
                path = img / f"diff_{fam.name}_{vis}.png"
                fig.savefig(path, dpi=110)
                out.append(path)

            pts = [p for p in scatter.get((fam.name, vis), []) if None not in p[1:]]
            if pts:
                fig = Figure(figsize=(5, 4))
                ax = fig.subplots()
                for agent, x, y in pts:
                    ax.scatter([x], [y], label=agent)
                ax.set(
                    xlabel="single-step accuracy (oracle-prefix states)",
                    ylabel="success after one fault (largest T)",
                    xlim=(-0.02, 1.02),
                    ylim=(-0.02, 1.02),
                )
                ax.set_title(f"{fam.name}, {vis}: single step against recovery", fontsize=9)
                ax.legend(fontsize=7)
                ax.grid(alpha=0.3)
                fig.tight_layout()
                path = img / f"step_recovery_{fam.name}_{vis}.png"
                fig.savefig(path, dpi=110)
                out.append(path)
    return out
