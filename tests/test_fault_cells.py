"""Fault cells (explicit/silent x transient/permanent), ``cells=`` selection and stop reasons."""

from __future__ import annotations

from pathlib import Path

import pytest
from budget_envs.registry import entry_for, registered_ids
from budget_envs.wrappers import ErrorInjection
from contract_helpers import make, policy_action

from budget_envs.core import CELLS, GENERIC_KINDS, STOP_REASONS

IDS = registered_ids()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_fault_cells_map_every_kind_of_the_env_to_a_cell(env_id):
    env = make(env_id, budget=None)
    cells = env.unwrapped.fault_cells()
    assert set(cells) == set(GENERIC_KINDS) | set(env.unwrapped.fault_kinds())
    assert set(cells.values()) <= set(CELLS)
    env.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_stop_reason_is_budget_on_the_truncating_step(env_id):
    env = make(env_id, budget=3)
    obs, info = env.reset(seed=0, options={"task_id": 0})
    assert "stop_reason" not in info
    for turn in range(1, 4):
        # An empty action is an invalid turn: it counts, and it can never win or lose.
        obs, reward, terminated, truncated, info = env.step("")
        assert not terminated
        if turn < 3:
            assert not truncated and "stop_reason" not in info
    assert truncated
    assert info["stop_reason"] == "budget"
    assert info["episode_summary"]["stop_reason"] == "budget"
    env.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_stop_reason_is_won_on_the_winning_step(env_id):
    env = make(env_id, budget=200)
    obs, info = env.reset(seed=0, options={"task_id": 0})
    terminated = truncated = False
    while not (terminated or truncated):
        assert "stop_reason" not in info
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
    assert terminated and info["won"]
    assert info["stop_reason"] == "won" and "won" in STOP_REASONS
    env.close()


def test_stop_reason_is_lost_when_the_task_is_lost():
    env = make("BudgetMix/ToolUse-v0", level=1)
    env.reset(seed=0, options={"task_id": 0})
    obs, reward, terminated, truncated, info = env.step(
        '{"tool_calls": [{"name": "submit", "arguments": {"answer": "123456.78"}}]}'
    )
    assert terminated and info["lost"]
    assert info["stop_reason"] == "lost"
    env.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_cells_select_kinds_and_intersect_with_kinds(env_id):
    base = make(env_id, budget=None)
    cells = base.unwrapped.fault_cells()
    for cell in CELLS:
        inside = sorted(k for k, c in cells.items() if c == cell)
        if not inside:
            with pytest.raises(ValueError, match="no fault kind"):
                ErrorInjection(base, cells=[cell])
            continue
        env = ErrorInjection(base, cells=[cell], rate=1.0, seed=0)
        assert sorted(env.kinds) == inside
        asked = sorted({*GENERIC_KINDS, inside[0]})
        both = ErrorInjection(base, kinds=asked, cells=[cell])
        assert set(both.kinds) == set(asked) & set(inside)
    # A bare word selects a row or a column of the table.
    explicit = ErrorInjection(base, cells="explicit")
    assert explicit.kinds and {cells[k][0] for k in explicit.kinds} == {"explicit"}
    assert set(explicit.kinds) == {k for k, c in cells.items() if c[0] == "explicit"}
    base.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_a_faulty_turn_reports_its_cell(env_id):
    import numpy as np

    base = make(env_id, budget=None)
    cells = base.unwrapped.fault_cells()
    env = ErrorInjection(base, kinds="garble", rate=1.0, seed=0)
    obs, info = env.reset(seed=0, options={"task_id": 0})
    obs, reward, terminated, truncated, info = env.step(
        policy_action(env, info, np.random.default_rng(0))
    )
    assert info["fault"]["cell"] == list(cells["garble"])
    assert info["faults"][0]["cell"] == list(cells["garble"])
    base.close()


def test_bad_cells_are_refused_with_the_value_quoted():
    base = make("BudgetMix/ToolUse-v0", budget=None, level=1)
    with pytest.raises(ValueError, match="'loud'"):
        ErrorInjection(base, cells=["loud"])
    with pytest.raises(TypeError):
        ErrorInjection(base, cells=3)
    base.close()


def _cell_table_families() -> tuple[str, ...]:
    """The families of docs/faults.md's table of cells (its first column)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "faults.md").read_text()
    table = text.split("| family | explicit, transient |", 1)[1].split("\n\n", 1)[0]
    return tuple(row.split("|")[1].strip() for row in table.splitlines()[2:])


#: A family's own fault kinds are optional (docs/extending.md; ``check_family`` does not ask for
#: all four cells): the families that fill every cell are the ones the faults page says do.
ALL_CELL_FAMILIES = _cell_table_families()
FAMILY_IDS = [i for i in IDS if entry_for(i).family in ALL_CELL_FAMILIES]


def test_every_family_of_the_cell_table_is_registered():
    assert len(ALL_CELL_FAMILIES) >= 4, ALL_CELL_FAMILIES
    assert {entry_for(i).family for i in FAMILY_IDS} == set(ALL_CELL_FAMILIES)


@pytest.mark.parametrize("env_id", FAMILY_IDS, ids=FAMILY_IDS)
def test_every_cell_has_a_kind_in_every_family(env_id):
    env = make(env_id, budget=None)
    cells = env.unwrapped.fault_cells()
    for cell in CELLS:
        assert any(c == cell for c in cells.values()), (env_id, cell, cells)
    env.close()
