"""Ids that need a pip extra: ``gymnasium.make`` names the extra when it is missing, and does
not pay for importing it when it is installed.

Each case runs in a fresh interpreter (the test process has every extra imported already). A
missing extra is simulated by ``sys.modules[name] = None`` set before ``budget_envs`` is imported,
so every ``import name`` fails as it would without the package.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest
from budget_envs.registry import entry_for, registered_ids

from budget_envs._util import missing_dependency

#: Every id whose family needs an extra; each extra is named after the module it brings.
NEEDS_EXTRA = [i for i in registered_ids(include_extra=False) if entry_for(i).requires]

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    env_id, blocked = sys.argv[1], json.loads(sys.argv[2])
    for name in blocked:
        sys.modules[name] = None
    import gymnasium as gym
    import budget_envs  # noqa: F401
    try:
        env = gym.make(env_id)
    except Exception as exc:
        outcome = {"raised": type(exc).__module__ + "." + type(exc).__name__, "message": str(exc)}
    else:
        env.close()
        outcome = {"raised": None, "message": ""}
    outcome["imported"] = sorted(
        {m.split(".")[0] for m, mod in sys.modules.items() if mod is not None}
    )
    print(json.dumps(outcome))
    """
)


def _make_in_fresh_process(env_id: str, blocked: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, env_id, json.dumps(blocked)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _install_hint(extra: str) -> list[str]:
    """The parts of the suite's install hint for ``extra`` that do not depend on what needed it
    or why the import failed (so this test follows the hint's wording)."""
    what, cause = "\x00what\x00", "\x00cause\x00"
    text = str(missing_dependency(what, extra, cause))
    parts = [p.strip() for p in text.replace(what, cause).split(cause)]
    return [p for p in parts if len(p) > 2]


def test_some_ids_need_an_extra():
    assert "BudgetMix/TextWorld-v0" in NEEDS_EXTRA
    assert "BudgetMix/ALFWorld-v0" in NEEDS_EXTRA


@pytest.mark.parametrize("env_id", NEEDS_EXTRA)
def test_make_without_the_extra_raises_dependency_not_installed(env_id):
    extra = entry_for(env_id).requires
    outcome = _make_in_fresh_process(env_id, [extra])
    assert outcome["raised"] == "gymnasium.error.DependencyNotInstalled", outcome
    hint = _install_hint(extra)
    assert hint and any(extra in part for part in hint), hint
    assert all(part in outcome["message"] for part in hint), (hint, outcome)
    assert extra not in outcome["imported"]


def test_alfworld_without_textworld_raises_dependency_not_installed():
    outcome = _make_in_fresh_process("BudgetMix/ALFWorld-v0", ["textworld"])
    assert outcome["raised"] == "gymnasium.error.DependencyNotInstalled", outcome
    assert all(part in outcome["message"] for part in _install_hint("alfworld")), outcome


@pytest.mark.parametrize("env_id", NEEDS_EXTRA)
def test_make_with_the_extra_does_not_import_it(env_id):
    extra = entry_for(env_id).requires
    assert importlib.util.find_spec(extra) is not None, f"the {extra} extra is not installed"
    outcome = _make_in_fresh_process(env_id, [])
    assert outcome["raised"] is None, outcome
    assert extra not in outcome["imported"], outcome
