"""TextWorld family: generation and cache, clean text, meta-commands, oracle, snapshots, faults.

A handful of small games is generated once per session into a temporary cache (about 20 s);
every test plays those.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from budget_envs.core import UNREACHABLE
from budget_envs.envs.textworld import CoinCollectorEnv, CookingEnv, TextWorldEnv, TreasureHunterEnv
from budget_envs.envs.textworld import env as tw_env
from budget_envs.envs.textworld import generate as gen
from budget_envs.envs.textworld.env import clean_intro, clean_text, meta_verb
from budget_envs.envs.textworld.prepare import prepare

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (class, level): small games of every variant, plus a custom game too big for the exact oracle.
GAMES = [
    (TextWorldEnv, 1),
    (TextWorldEnv, 2),
    (TextWorldEnv, 3),
    (CoinCollectorEnv, 5),
    (TreasureHunterEnv, 3),
    (CookingEnv, 1),
]
#: Whether seed 0 of each game above gets the exact oracle (the docs' table of exact levels).
EXACT = {
    (TextWorldEnv, 1): True,
    (TextWorldEnv, 2): True,
    (TextWorldEnv, 3): False,
    (CoinCollectorEnv, 5): True,
    (TreasureHunterEnv, 3): True,
    (CookingEnv, 1): False,
}
VARIANTS = [TextWorldEnv, CoinCollectorEnv, TreasureHunterEnv, CookingEnv]
SMALL_LEVEL = {TextWorldEnv: 2, CoinCollectorEnv: 5, TreasureHunterEnv: 3, CookingEnv: 1}


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("twcache")
    specs = [gen.GameSpec(cls.family, level, 0) for cls, level in GAMES]
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda spec: gen.ensure_game(spec, root), specs))
    return root


def make(cls, cache, level=None, **kwargs):
    level = SMALL_LEVEL[cls] if level is None else level
    return cls(level=level, seeds=[0], cache_dir=cache, **kwargs)


def oracle_run(env, limit=200):
    turns = 0
    info = env.current_info()
    while not env.done and turns < limit:
        actions = env.oracle_actions()
        assert actions, "the oracle has no move in a live episode"
        _, reward, terminated, _, info = env.step(actions[0])
        turns += 1
    return turns, info, reward


# ---------------------------------------------------------------- contract on every variant
@pytest.mark.parametrize("cls", VARIANTS, ids=lambda c: c.__name__)
def test_check_env_every_variant(cls, cache):
    env = make(cls, cache, render_mode="ansi")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    env.close()


@pytest.mark.parametrize("cls,level", GAMES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_oracle_solves_sampled_games(cls, level, cache):
    env = make(cls, cache, level)
    env.reset(seed=0)
    assert env.oracle_exact is EXACT[(cls, level)]
    need = env.cost_to_go()
    assert 1 <= need < UNREACHABLE
    if env.oracle_exact:
        # every optimal first move really is optimal
        for action in env.oracle_actions():
            snap = env.snapshot()
            env.step(action)
            assert env.cost_to_go() == need - 1, action
            env.restore(snap)
    turns, info, reward = oracle_run(env)
    assert info["won"] and reward == 1.0 and info["score"] == 1.0
    if env.oracle_exact:
        assert turns == need
    assert env.oracle_actions() == [] and env.cost_to_go() == 0
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("cls", VARIANTS, ids=lambda c: c.__name__)
def test_oracle_solves_every_default_level(cls):
    """Seed 0 of every default level, from the user cache (slow on the first run: ~25 games)."""
    env = cls(seeds=[0])
    lengths = []
    assert env.task_ids
    for task in env.task_ids:
        env.reset(options={"task_id": task})
        need = env.cost_to_go()
        turns, info, _ = oracle_run(env, limit=need + 50)
        assert info["won"], task
        if env.oracle_exact:
            assert turns == need, task
        lengths.append(turns)
    assert min(lengths) >= 3 and lengths[-1] > lengths[0]
    env.close()


def test_oracle_exactness_is_per_game(cache):
    exact = make(TextWorldEnv, cache, 1)
    exact.reset(seed=0)
    big = make(TextWorldEnv, cache, 3)
    big.reset(seed=0)
    assert exact.oracle_exact is True and big.oracle_exact is False
    assert "oracle_exact" in vars(exact)


def test_levels_are_graded(cache):
    costs = []
    for level in (1, 2, 3):
        env = make(TextWorldEnv, cache, level)
        env.reset(seed=0)
        costs.append(env.cost_to_go())
    assert costs == sorted(costs) and costs[0] >= 3 and costs[-1] > costs[0]


# ---------------------------------------------------------------- determinism
def _transcript(cls_name, level, cache, seed, turns=8):
    import budget_envs.envs.textworld as tw

    env = getattr(tw, cls_name)(level=level, seeds=[0], cache_dir=cache)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out = [obs, info["admissible_actions"]]
    for _ in range(turns):
        best = env.oracle_actions()
        action = best[0] if best and rng.random() < 0.6 else env.sample_action(rng)
        obs, reward, terminated, _, info = env.step(action)
        out.append([action, obs, reward, terminated, info["admissible_actions"]])
        if terminated:
            break
    return out


@pytest.mark.parametrize("cls_name,level", [("TextWorldEnv", 2), ("CookingEnv", 1)])
def test_same_transcript_in_a_fresh_process(cls_name, level, cache):
    here = _transcript(cls_name, level, str(cache), 5)
    code = (
        f"import json, sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from test_textworld import _transcript\n"
        f"print(json.dumps(_transcript({cls_name!r}, {level}, {str(cache)!r}, 5)))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="4321")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == json.loads(json.dumps(here))


def test_generation_is_identical_across_processes(cache, tmp_path):
    """tw-cooking iterates over sets; the worker pins PYTHONHASHSEED so bytes still match."""
    spec = gen.GameSpec("cooking", 1, 0)
    again = gen.ensure_game(spec, tmp_path)
    first = spec.path(cache)
    assert again.read_bytes() == first.read_bytes()
    assert again.with_suffix(".json").read_bytes() == first.with_suffix(".json").read_bytes()


# ---------------------------------------------------------------- input safety and meta-commands
BAD = [
    "x" * 1_000_000,
    "\x00",
    "go\x00north",
    "ñandú über straße",
    "take caf\u00e9",
    "y" * 300,
    "   ",
]


def test_bad_actions_are_safe_turns(cache):
    env = make(TextWorldEnv, cache)
    env.reset(seed=0)
    cost, adm = env.cost_to_go(), env.current_info()["admissible_actions"]
    for bad in BAD:
        obs, reward, terminated, truncated, info = env.step(bad)
        assert info["invalid_action"] and obs.strip() and not terminated and reward == 0.0
        assert env.observation_space.contains(obs)
        assert env.cost_to_go() == cost and info["admissible_actions"] == adm
    assert oracle_run(env)[1]["won"]


META = [
    "save",
    "script",
    "transcript",
    "save game. look",
    "look then quit",
    "q",
    "restart",
    "undo",
    "restore",
    "tw-trace-actions",
    "test quest0_0",
    "gonear cellar",
    "SAVE",
]


def test_meta_commands_are_refused_and_write_no_file(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = make(TextWorldEnv, cache)
    env.reset(seed=0)
    cost = env.cost_to_go()
    for command in META:
        obs, reward, terminated, _, info = env.step(command)
        assert info["invalid_action"], command
        assert "game-system command" in obs
    assert list(tmp_path.iterdir()) == []
    assert env.cost_to_go() == cost
    turns, info, _ = oracle_run(env)
    assert info["won"] and turns == cost


#: Game-system commands smuggled after a line break: the interpreter reads each line as a command.
SMUGGLED = [
    "look\nquit",
    "look\nsave",
    "look\rsave",
    "look\r\nquit",
    "inventory\n\nsave",
    "take key\nrestart\nyes",
    "\nrestart",
]


def test_commands_smuggled_after_a_line_break_are_invalid_turns(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = make(TextWorldEnv, cache)
    env.reset(seed=0)
    cost = env.cost_to_go()
    for turn, command in enumerate(SMUGGLED, start=1):
        obs, reward, terminated, _, info = env.step(command)
        assert info["invalid_action"] and reward == 0.0 and not terminated, command
        assert "line break" in obs and info["turn"] == turn, command
        assert env.cost_to_go() == cost, command
    assert list(tmp_path.iterdir()) == []  # no .qzl save file, no transcript
    # The game still answers (no "Please answer yes or no." prompt eats the next command).
    turns, info, _ = oracle_run(env)
    assert info["won"] and turns == cost


def test_meta_verb_parser():
    assert meta_verb("look\nsave") == "save"
    assert meta_verb("look\r\nquit") == "quit"
    assert meta_verb("take key\x0brestart") == "restart"
    assert meta_verb("take key. save") == "save"
    assert meta_verb("open door, then Restart") == "restart"
    assert meta_verb("take the saved key") is None
    assert meta_verb("go north") is None


def test_the_end_is_remembered(cache):
    env = make(TextWorldEnv, cache, 1)
    env.reset(seed=0)
    oracle_run(env)
    assert env.won and env.done
    for _ in range(2):
        obs, reward, terminated, _, info = env.step("look")
        assert terminated and info["won"] and info["invalid_action"] and reward == 0.0
        assert "episode is over" in obs
    assert env.current_info()["admissible_actions"] == []


@pytest.mark.parametrize("cls", VARIANTS, ids=lambda c: c.__name__)
def test_observations_are_clean(cls, cache):
    env = make(cls, cache)
    obs, info = env.reset(seed=0)
    texts = [obs]
    turns = 0
    while not env.done and turns < 60:
        texts.append(env.step(env.oracle_actions()[0])[0])
        turns += 1
    texts.append(env.step("xyzzy")[0])
    assert obs.startswith(info["goal"][:30])
    for text in texts:
        assert "$$" not in text and "\n\n\n" not in text and text == text.strip()
        assert not any(line.startswith(">") for line in text.splitlines())
        assert "=-0/" not in text and "=-1/" not in text
        assert "Would you like to RESTART" not in text
    assert "*** The End ***" in texts[-2]


def test_clean_helpers():
    raw = "\nYou take it.\n\n\n\n>      -= Kitchen =-1/8"
    assert clean_text(raw) == "You take it."
    assert clean_text("\n\n>  ") == "(The game prints nothing.)"
    intro = clean_intro(" $$$$ |  $$\n\nGo east.\n\n-= Hall =-", "Go east.")
    assert intro == "Go east.\n\n-= Hall =-"


# ---------------------------------------------------------------- snapshots
def test_snapshot_restore_equals_fresh_replay(cache):
    env = make(CookingEnv, cache)
    env.reset(seed=0)
    rng = np.random.default_rng(2)
    prefix = []
    for _ in range(4):
        action = env.oracle_actions()[0] if rng.random() < 0.5 else env.sample_action(rng)
        prefix.append(action)
        env.step(action)
    snap = env.snapshot()
    probe = ["look", "inventory"] + env.oracle_actions()[:1] + ["examine cookbook"]
    first = [env.step(a)[:4] for a in probe]
    env.reset(seed=1, options={"task_id": 0})  # leave and come back
    assert env.restore(snap) == snap.observation
    second = [env.step(a)[:4] for a in probe]
    fresh = make(CookingEnv, cache)
    fresh.reset(seed=0)
    for action in prefix:
        fresh.step(action)
    third = [fresh.step(a)[:4] for a in probe]
    assert first == second == third
    # restoring twice from the same snapshot gives the same again
    env.restore(snap)
    assert [env.step(a)[:4] for a in probe] == first


def test_restore_across_games(cache):
    env = TextWorldEnv(level=[1, 2], seeds=[0], cache_dir=cache)
    env.reset(options={"task_id": "custom-L2-s0"})
    env.step(env.oracle_actions()[0])
    snap, cost = env.snapshot(), env.cost_to_go()
    env.reset(options={"task_id": "custom-L1-s0"})
    env.restore(snap)
    assert env.task_id == "custom-L2-s0" and env.cost_to_go() == cost
    turns, info, _ = oracle_run(env)
    assert info["won"] and turns == cost


# ---------------------------------------------------------------- faults
def test_perturb_moves_the_player_and_drops_an_object(cache):
    env = make(TextWorldEnv, cache, 2)
    env.reset(seed=0)
    env.step(env.oracle_actions()[0])  # picks up the key
    before = env.cost_to_go()
    env.arm_fault("perturb", np.random.default_rng(0))
    obs, _, _, _, info = env.step("look")
    assert info["fault"]["executed"] == "look" and info["fault"]["effect"] == "world"
    assert "You drop" in obs and "stumble" in obs
    assert env.cost_to_go() > before
    snap = env.snapshot()
    replay = make(TextWorldEnv, cache, 2)
    replay.reset(seed=0)
    replay.restore(type(snap)(**{**snap.__dict__, "payload": None}))  # by trace replay
    assert replay.cost_to_go() == env.cost_to_go()
    assert replay.current_info()["admissible_actions"] == env.current_info()["admissible_actions"]
    turns, info, _ = oracle_run(env)
    assert info["won"]


def test_error_injection_with_every_kind(cache):
    from budget_envs.wrappers import ErrorInjection

    kinds = {"slip": 1.0, "drop": 1.0, "garble": 1.0, "perturb": 3.0}
    env = ErrorInjection(make(TextWorldEnv, cache, 2), kinds=kinds, rate=1.0, seed=0)
    seen = set()
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        for _ in range(8):
            obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
            assert env.observation_space.contains(obs)
            assert info["fault"]["cost_after"] is not None
            seen.add(info["fault"]["kind"])
            if terminated:
                break
    assert seen == set(kinds)


# ---------------------------------------------------------------- options, cache, prepare
def test_game_files_plays_a_users_game(cache, tmp_path):
    path = gen.GameSpec("custom", 1, 0).path(cache)
    env = TextWorldEnv(game_files=[str(path)])
    assert env.task_ids == [f"file0-{path.stem}"]
    env.reset(seed=0)
    assert env.oracle_exact
    assert oracle_run(env)[1]["won"]
    with pytest.raises(FileNotFoundError):
        TextWorldEnv(game_files=[str(tmp_path / "missing.z8")])
    lone = tmp_path / "lone.z8"
    lone.write_bytes(path.read_bytes())
    with pytest.raises(FileNotFoundError, match="json"):
        TextWorldEnv(game_files=[str(lone)])


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        ({"level": 0}, ValueError),
        ({"level": "2"}, ValueError),
        ({"seeds": 0}, ValueError),
        ({"seeds": [-1]}, ValueError),
        ({"generation_timeout": 0}, ValueError),
        ({"oracle_max_states": 0}, ValueError),
        ({"game_files": "a.z8"}, TypeError),
        ({"game_files": ["a.z8"], "level": 1}, ValueError),
        ({"cache_dir": 3}, TypeError),
    ],
)
def test_arguments_are_checked(kwargs, exc):
    with pytest.raises(exc):
        TextWorldEnv(**kwargs)


def test_task_ids_are_fixed_and_nothing_is_made_until_played(tmp_path):
    root = tmp_path / "cache"
    env = CookingEnv(tasks_per_level=3, cache_dir=root)
    expected = [f"cooking-L{lv}-s{s}" for lv in (1, 2, 3, 4, 5, 6) for s in range(3)]
    assert list(env.task_ids) == expected
    assert not root.exists()


def test_cache_root_follows_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("BUDGET_ENVS_CACHE", str(tmp_path))
    assert gen.cache_root() == tmp_path / "textworld"
    assert gen.cache_root(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("BUDGET_ENVS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gen.cache_root() == tmp_path / "xdg" / "budget-envs" / "textworld"


def test_generation_timeout(tmp_path):
    with pytest.raises(gen.GenerationTimeout):
        gen.ensure_game(gen.GameSpec("custom", 5, 12345), tmp_path, timeout=0.5)
    assert not list(tmp_path.rglob("*.z8"))


def test_prepare_reports_progress(cache):
    calls = []
    records = prepare("TextWorld", [1, 2], 1, cache, lambda d, t, r: calls.append((d, t, r.cached)))
    assert calls == [(1, 2, True), (2, 2, True)]
    assert all(r.path is not None and r.path.is_file() for r in records)
    with pytest.raises(ValueError):
        prepare("zork", [1], 1, cache)


# ---------------------------------------------------------------------- first use and prepare=True
LAZY_LOGGER = "budget_envs.envs.textworld.env"


def lazy_warnings(caplog):
    return [
        r
        for r in caplog.records
        if r.name == LAZY_LOGGER
        and r.levelno == logging.WARNING
        and "generated on first use" in r.getMessage()
    ]


@pytest.fixture
def fresh_process_warning(monkeypatch):
    """As in a new process: the once-per-process warning has not been given yet."""
    monkeypatch.setattr(tw_env, "_warned_lazy_generation", False)


def test_first_lazy_generation_warns_once_and_names_prepare(
    tmp_path, caplog, fresh_process_warning
):
    env = TextWorldEnv(level=1, tasks_per_level=2, cache_dir=tmp_path)
    specs = [gen.GameSpec("custom", 1, s) for s in (0, 1)]
    assert not any(gen.is_cached(spec, tmp_path) for spec in specs)
    caplog.set_level(logging.WARNING, logger=LAZY_LOGGER)
    for task_id in env.task_ids:  # two games generated, one warning
        env.reset(options={"task_id": task_id})
    env.close()
    assert all(gen.is_cached(spec, tmp_path) for spec in specs)
    (record,) = lazy_warnings(caplog)
    message = record.getMessage()
    assert "2-10 s each" in message and "prepare=True" in message
    command = (
        "budgetmix prepare textworld --family custom --levels 1 --tasks-per-level 2 "
        f"--cache-dir {tmp_path}"
    )
    assert command in message
    # The command it names makes exactly this env's games: here, both are already there.
    cli = pathlib.Path(sys.executable).with_name("budgetmix")
    out = subprocess.run(
        [str(cli), *command.split()[1:]], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    assert "2 of 2 files ready" in out.stdout


def test_cached_games_do_not_warn(cache, caplog, fresh_process_warning):
    caplog.set_level(logging.WARNING, logger=LAZY_LOGGER)
    env = make(TextWorldEnv, cache, level=1)
    env.reset(seed=0)
    env.close()
    assert lazy_warnings(caplog) == []


def test_prepare_generates_every_task_before_reset(tmp_path, caplog, fresh_process_warning):
    env = gym.make(
        "BudgetMix/TextWorld-v0", level=1, tasks_per_level=2, prepare=True, cache_dir=tmp_path
    )
    assert env.spec.kwargs["prepare"] is True
    expected = {gen.GameSpec("custom", 1, s).path(tmp_path) for s in (0, 1)}
    assert set(tmp_path.rglob("*.z8")) == expected
    assert all(path.with_suffix(".json").is_file() for path in expected)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="budget_envs.envs.textworld")
    for task_id in env.unwrapped.task_ids:
        obs, info = env.reset(options={"task_id": task_id})
        assert info["task_id"] == task_id
    env.close()
    assert lazy_warnings(caplog) == []
    assert not [r for r in caplog.records if r.getMessage().startswith("generating ")]


def test_prepare_lets_a_vector_env_reset_without_generating(
    tmp_path, caplog, fresh_process_warning
):
    kwargs = {"level": 1, "tasks_per_level": 2, "prepare": True, "cache_dir": tmp_path}
    venv = gym.vector.SyncVectorEnv(
        [lambda: gym.make("BudgetMix/TextWorld-v0", budget=2, **kwargs)] * 2,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert len(list(tmp_path.rglob("*.z8"))) == 2
    caplog.clear()
    caplog.set_level(logging.INFO, logger="budget_envs.envs.textworld")
    venv.reset(seed=0)
    ended = np.zeros(2, dtype=int)
    for _ in range(5):  # budget 2: every sub-env ends (and autoresets) at least twice
        _, _, terminated, truncated, _ = venv.step(["look", "look"])
        ended += terminated | truncated
    venv.close()
    assert ended.min() >= 2, ended
    assert lazy_warnings(caplog) == []
    assert not [r for r in caplog.records if r.getMessage().startswith("generating ")]


def test_prepare_keeps_cached_games_and_checks_its_argument(cache):
    before = {p: p.stat().st_mtime_ns for p in cache.rglob("*.z8")}
    env = TextWorldEnv(level=[1, 2], seeds=[0], cache_dir=cache, prepare=True)
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*.z8")} == before
    assert {env.game_path(t) for t in env.task_ids} <= set(before)
    with pytest.raises(TypeError, match="prepare must be a bool, got 'yes'"):
        TextWorldEnv(level=1, cache_dir=cache, prepare="yes")


@pytest.mark.parametrize("action", ["\\help", " \\x", "\\", "take \\coin"])
def test_backslash_commands_are_refused_not_run(action):
    """dumb-frotz takes a line starting with a backslash as its own command (\\help prints to the
    process's stdout, others hang waiting for input): the env refuses any backslash."""
    env = gym.make("BudgetMix/TextWorld-v0", level=1, tasks_per_level=2, budget=None)
    env.reset(seed=0, options={"task_id": 0})
    before, *_ = env.step("look")
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["invalid_action"] and "backslash" in obs
    after, *_ = env.step("look")
    assert after == before  # the interpreter still answers, in the same state
    env.close()


def test_prepare_reset_generates_the_game_reset_will_play(tmp_path):
    env = TextWorldEnv(level=1, tasks_per_level=4, cache_dir=tmp_path)
    for seed, options in ((3, None), (None, None), (0, {"task_id": 2}), (9, {"task_id": None})):
        state = env.np_random.bit_generator.state if seed is None else None
        env.prepare_reset(seed, options)
        if state is not None:
            assert env.np_random.bit_generator.state == state  # no draw from the env's generator
        before = {p.name for p in tmp_path.rglob("*.z8")}
        env.reset(seed=seed, options=options)
        assert {p.name for p in tmp_path.rglob("*.z8")} == before  # reset generated nothing
    env.close()
