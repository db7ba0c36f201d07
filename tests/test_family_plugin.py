"""A family plugs in with one registry row: list, prepare and the chat prompts follow.

The toy corridor (tests/toy_env.py) is registered here as a family of its own, with its own
system prompt and prepare hook; no shared module is edited for it.
"""

from __future__ import annotations

import inspect
import io
import re
from pathlib import Path

import pytest
from budget_envs.registry import (
    EnvEntry,
    PrepareResult,
    entry_for,
    families,
    register_env,
    registered_ids,
    unregister_env,
)
from toy_env import ToyEnv

from budget_envs import cli
from budget_envs.eval import agents
from budget_envs.eval.agents import ChatAgent, system_prompt

CORRIDOR_ID = "BudgetMixPlugin/Corridor-v0"
CORRIDOR_PROMPT = "You walk a corridor of rooms. Reply with one command such as 'go east'."


def corridor_prepare(
    *, progress=None, rooms: int = 2, cache_dir: str | None = None, loud: bool = False
) -> PrepareResult:
    """Write one layout file per room (the corridor family's prepare hook).

    Args:
        rooms: how many layout files to write.
        cache_dir: where to write them.
        loud: shout in every file.
    """
    root = Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(rooms):
        text = f"room {i}"
        (root / f"room{i}.txt").write_text(text.upper() if loud else text)
        if progress is not None:
            progress(i + 1, rooms, f"room {i}")
    return PrepareResult(ready=rooms, total=rooms, location=str(root))


@pytest.fixture
def corridor():
    entry = EnvEntry(
        id=CORRIDOR_ID,
        entry_point=ToyEnv,
        default_budget=9,
        description="A corridor family registered from a test",
        family="Corridor",
        prompt=CORRIDOR_PROMPT,
        prepare=corridor_prepare,
    )
    register_env(entry)
    yield entry
    unregister_env(CORRIDOR_ID)


def _run(argv):
    out = io.StringIO()
    return cli.main(argv, stdout=out), out.getvalue()


def test_the_row_carries_the_family_metadata(corridor):
    assert CORRIDOR_ID in registered_ids()
    assert entry_for(CORRIDOR_ID).family == "Corridor"
    assert families()["Corridor"] == [corridor]
    assert corridor.prepare_hook() is corridor_prepare


def test_a_row_without_a_family_is_its_own_family():
    entry = EnvEntry(id="X/Y-v0", entry_point=ToyEnv, default_budget=3, description="d")
    assert entry.family == "X/Y-v0" and entry.prompt is None and entry.prepare is None
    with pytest.raises(TypeError, match="prepare must be"):
        EnvEntry(id="X/Y-v0", entry_point=ToyEnv, default_budget=3, description="d", prepare=3)


def test_budgetmix_list_shows_the_family(corridor):
    rc, text = _run(["list"])
    assert rc == 0
    line = next(line for line in text.splitlines() if line.startswith(CORRIDOR_ID))
    assert "Corridor" in line and "T=9" in line
    prepared = text.split("Families with files to prepare ahead")[1]
    assert "Corridor" in prepared and "TextWorld" in prepared and "WebShop" not in prepared


def test_budgetmix_prepare_runs_the_family_hook(corridor, tmp_path, capsys):
    rc, text = _run(["prepare", "corridor", "--rooms", "3", "--cache-dir", str(tmp_path), "--loud"])
    assert rc == 0, text
    assert f"3 of 3 files ready in {tmp_path}" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["room0.txt", "room1.txt", "room2.txt"]
    assert (tmp_path / "room2.txt").read_text() == "ROOM 2"
    # the family name matches case-insensitively, and the id works too
    rc, _ = _run(["prepare", CORRIDOR_ID, "--rooms", "1", "--cache-dir", str(tmp_path / "b")])
    assert rc == 0 and (tmp_path / "b" / "room0.txt").read_text() == "room 0"


def test_prepare_help_comes_from_the_hook(corridor, capsys):
    with pytest.raises(SystemExit) as exc:
        _run(["prepare", "Corridor", "--help"])
    help_text = capsys.readouterr().out
    assert exc.value.code == 0
    assert "budgetmix prepare Corridor" in help_text
    assert re.search(r"--rooms ROOMS\s+how many layout files to write\. \(default: 2\)", help_text)
    assert "--loud" in help_text and "--no-loud" in help_text


def test_prepare_refuses_a_bad_option_value(corridor, capsys):
    with pytest.raises(SystemExit) as exc:
        _run(["prepare", "corridor", "--rooms", "many"])
    assert exc.value.code == 2 and "invalid int value" in capsys.readouterr().err


def test_prepare_unknown_family_names_the_known_ones(corridor, capsys):
    rc, _ = _run(["prepare", "nethack"])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown family 'nethack'" in err and "Corridor" in err


def test_chat_agent_uses_the_row_prompt(corridor):
    agent = ChatAgent(base_url="http://127.0.0.1:9/v1", model="m")
    agent.reset(env_id=CORRIDOR_ID, observation="Room 1 of 4.", info={"goal": ""}, seed=0)
    assert agent.messages[0] == {"role": "system", "content": CORRIDOR_PROMPT}
    # an override by family name wins over the row's prompt
    agent = ChatAgent(base_url="http://127.0.0.1:9/v1", model="m", prompts={"Corridor": "mine"})
    agent.reset(env_id=CORRIDOR_ID, observation="Room 1 of 4.", info={}, seed=0)
    assert agent.messages[0]["content"] == "mine"


def test_a_callable_prompt_sees_the_first_info():
    entry = EnvEntry(
        id="BudgetMixPlugin/Lazy-v0",
        entry_point=ToyEnv,
        default_budget=5,
        description="callable prompt",
        family="Lazy",
        prompt=lambda info: f"Reach the goal: {info['goal']}",
    )
    register_env(entry)
    try:
        text = system_prompt(entry.id, {"goal": "open the door"}, {})
        assert text == "Reach the goal: open the door"
    finally:
        unregister_env(entry.id)


def test_product_families_keep_their_prompts_and_unknown_ids_get_the_default():
    for env_id, word in (
        ("BudgetMix/ToolUse-v0", "tools"),
        ("BudgetMix/WebShop-v0", "search[query]"),
        ("BudgetMix/TextWorld-Cooking-v0", "text adventure"),
        ("BudgetMix/ALFWorld-v0", "household robot"),
    ):
        assert word in system_prompt(env_id, {}, {})
    assert system_prompt("Someone/Else-v0", {}, {}) == agents.DEFAULT_PROMPTS["default"]


def test_shared_modules_name_no_family_and_parse_no_id():
    sources = {
        "eval/agents.py": inspect.getsource(agents),
        "cli list/prepare": "".join(
            inspect.getsource(f) for f in (cli.cmd_list, cli.cmd_prepare, cli._hook_parser)
        ),
    }
    assert all(sources.values())
    for where, text in sources.items():
        for name in ("TextWorld", "ALFWorld", "WebShop", "textworld", "alfworld"):
            assert name not in text, (where, name)
        assert 'split("/")' not in text and ".split('/')" not in text, where
