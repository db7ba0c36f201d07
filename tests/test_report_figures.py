"""The report's figures read as they should with one, two and many fault turns or samples:
whole-number ticks only, an interval on every fault point, no tick labels on top of each other.
Each figure is drawn (Agg) and its tick labels are read back as text and as boxes on the canvas."""

from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer

from budget_envs.eval.report.figures import figure_class, integer_ticks, recovery_figure


def _labels(fig, axis):
    """The visible tick labels of ``axis`` after drawing: (text, window box)."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    lo, hi = sorted(axis.axes.get_xlim() if axis.axis_name == "x" else axis.axes.get_ylim())
    out = []
    for tick in axis.get_major_ticks():
        label = tick.label1
        if label.get_visible() and label.get_text() and lo <= tick.get_loc() <= hi:
            out.append((label.get_text(), label.get_window_extent(renderer)))
    return out


def _check_readable(fig, axis, values):
    labels = _labels(fig, axis)
    assert labels, "no tick labels"
    texts = [t.replace("\u2212", "-") for t, _ in labels]
    assert all(t.lstrip("-").isdigit() for t in texts), texts  # whole numbers only
    shown = [int(t) for t in texts]
    if len(set(values)) <= 12:
        assert set(values) <= set(shown), (values, shown)  # every value has its tick
    boxes = sorted((b for _, b in labels), key=lambda b: b.x0)
    for left, right in zip(boxes, boxes[1:]):
        assert left.x1 <= right.x0, "overlapping tick labels"


def _rows(fault_turns, budgets=(10,), agents=("eps", "random"), episodes=7):
    rows = []
    for agent in agents:
        for budget in budgets:
            for i, t in enumerate(fault_turns):
                rows.append(
                    {
                        "env_id": "BudgetMix/Toy-v0",
                        "agent": agent,
                        "budget": budget,
                        "fault_turn": t,
                        "episodes": episodes,
                        "success": ((i + len(agent)) % (episodes + 1)) / episodes,
                        "baseline_success": 0.8,
                    }
                )
    return rows


@pytest.mark.parametrize(
    "fault_turns", [[2], [1, 3], list(range(1, 16))], ids=["one", "two", "many"]
)
def test_recovery_figure_has_integer_ticks_and_an_interval_on_every_point(fault_turns):
    rows = _rows(fault_turns, budgets=(5, 20))
    fig = recovery_figure(rows, "BudgetMix/Toy-v0")
    axes = fig.get_axes()
    assert len(axes) == 2
    for ax in axes:
        _check_readable(fig, ax.xaxis, fault_turns)
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == 2  # one per agent
        for bar in bars:
            data, _, (yerr,) = bar.lines
            assert list(data.get_xdata()) == fault_turns
            assert len(yerr.get_segments()) == len(fault_turns)  # an interval on every point
            # The interval holds the point and is not empty with 7 episodes.
            for (_, y), seg in zip(data.get_xydata(), yerr.get_segments()):
                (_, y0), (_, y1) = seg
                assert y0 <= y <= y1 and y1 - y0 > 0.05


@pytest.mark.parametrize(
    "values", [[1], [1, 2], [1, 2, 3], list(range(1, 9)), list(range(1, 41))], ids=str
)
def test_sample_and_budget_axes_take_whole_numbers_only(values):
    fig = figure_class()(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    ys = [v / max(values) for v in values]
    ax.plot(values, ys, "o-")
    ax.fill_between(values, [y * 0.9 for y in ys], ys, alpha=0.2)
    integer_ticks(ax.xaxis, values)
    _check_readable(fig, ax.xaxis, values)


def test_study_figure_budget_labels_sit_clear_of_the_legend_and_curves():
    from types import SimpleNamespace

    import numpy as np

    from budget_envs.study.figures import _pass1

    ts = list(range(1, 21))
    curves = []
    for i, arm in enumerate(["base", "fixed_generous", "fixed_tight", "mix", "process"]):
        mean = np.minimum(1.0, np.array(ts) / (6 + i))[None, :]
        curves.append((arm, SimpleNamespace(ts=ts, mean=mean, low=mean * 0.9, high=mean)))
    fam = SimpleNamespace(name="ALFWorld", tight=6, generous=20)
    fig = _pass1(figure_class(), fam, "hidden", curves)
    fig.tight_layout()
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.get_axes()
    legend = ax.get_legend().get_window_extent(renderer)
    plot = ax.get_window_extent(renderer)
    whole = fig.bbox
    names = [t for t in ax.texts if t.get_text() in ("tight", "generous")]
    assert len(names) == 2
    for text in names:
        box = text.get_window_extent(renderer)
        assert not box.overlaps(legend), text.get_text()
        assert box.y0 >= plot.y1 - 1  # above the plot area: no curve runs under it
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and box.y1 <= whole.y1
    assert legend.x1 <= whole.x1 + 1  # the legend stays on the figure
