"""Soak: 100,000 steps per family in one process (``benchmarks/soak.py``), resources bounded.

Marked ``soak``: left out of ``make test`` by the default ``-m "not soak"`` and run by
``make test-all`` (minutes per family; TextWorld is the slowest). ``test_soak_script_short_run`` runs the same
script for a few thousand steps in the default run, so the script itself cannot rot.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from budget_envs.registry import entry_for, registered_ids

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "soak.py"
#: One id per family: the first registered row of each.
FAMILY_IDS = sorted(
    {entry_for(i).family: i for i in reversed(registered_ids(include_extra=False))}.values()
)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")


def _soak(env_id: str, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), env_id, "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _check(result: dict) -> None:
    assert result["episodes"] > 0 and 0 < result["invalid_actions"] < result["steps"]
    assert result["max_observation_chars"] <= result["observation_limit"]
    assert result["rss_growth_mb"] < 50, result["samples"]
    for key in ("open_fds_growth", "threads_growth", "children_growth", "temp_files_growth"):
        assert result[key] <= 0, (key, result["samples"])
    assert result["after_close"]["temp_files"] == 0
    assert result["after_close"]["children"] == 0


def test_one_id_per_family():
    assert len(FAMILY_IDS) == len({entry_for(i).family for i in registered_ids(False)}) >= 4


@linux_only
@pytest.mark.parametrize("env_id", FAMILY_IDS)
def test_soak_script_short_run(env_id, tmp_path):
    result = _soak(env_id, tmp_path, "--steps", "2000", "--every", "500", "--warm", "1000")
    assert [s["step"] for s in result["samples"]] == [0, 500, 1000, 1500, 2000]
    _check(result)


@pytest.mark.soak
@linux_only
@pytest.mark.parametrize("env_id", FAMILY_IDS)
def test_soak_100k_steps_per_family(env_id, tmp_path):
    result = _soak(env_id, tmp_path, "--steps", "100000")
    assert result["warm_step"] == 20_000 and result["steps"] == 100_000
    _check(result)
