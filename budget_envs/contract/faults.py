"""The checks of a family's faults: their cells, the fault hook, armed turns and replays.

Rules of the section ``rules-faults`` of docs/extending.md.
"""

from __future__ import annotations

import numpy as np

from budget_envs.core import CELLS, FAULT_EFFECTS, GENERIC_KINDS, TextAgentEnv

from .checker import _Checker, _need
from .info_keys import _check_info


def _check_faults(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    kinds = GENERIC_KINDS + tuple(env.fault_kinds())
    with ck.rule("faults.cells"):
        cells = env.fault_cells()
        _need(set(cells) == set(kinds), f"fault_cells() has {sorted(cells)}, the kinds are {kinds}")
        odd = {k: c for k, c in cells.items() if tuple(c) not in CELLS}
        _need(not odd, f"kinds {odd} have no cell of {list(CELLS)} (family_fault_cells)")
    if env.fault_kinds():
        with ck.rule("faults.hook"):
            have = type(env)._fault is not TextAgentEnv._fault
            _need(have, f"fault_kinds() lists {list(env.fault_kinds())} but _fault() is missing")
    if ck.broken("faults."):
        return
    for kind in kinds:
        where = f"after a {kind!r} fault"
        with ck.rule("faults.arm"):
            obs, info = env.reset(seed=seed, options={"task_id": 0})
            env.arm_fault(kind, np.random.default_rng(seed))
            obs, reward, terminated, truncated, info = env.step(env.oracle_actions()[0])
            fault = info.get("fault") or {}
            _need(fault.get("kind") == kind, f"info['fault'] is {fault!r:.120} {where}")
            _need(fault.get("effect") in FAULT_EFFECTS, f"effect {fault.get('effect')!r} {where}")
            _need(fault.get("cell") == list(cells[kind]), f"cell {fault.get('cell')!r} {where}")
            _need(env.observation_space.contains(obs), f"the observation {where} is off the space")
            _check_info(ck, info, where, env.done)
        with ck.rule("faults.replay"):
            snap, at = env.snapshot(), env.state_hash()
            first = env.step(env.oracle_actions()[0])[:4] if not env.done else ()
            env.restore(snap)
            _need(env.state_hash() == at, f"restore() {where} did not bring the state back")
            second = env.step(env.oracle_actions()[0])[:4] if not env.done else ()
            _need(first == second, f"restore() {where}: the next turn differs ({second!r:.160})")
