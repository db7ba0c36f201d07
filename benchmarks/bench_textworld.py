"""TextWorld speed: the env's step against raw ``textworld.start``, and forking.

Run:
``.venv/bin/python -m pytest benchmarks/bench_textworld.py --benchmark-only -p no:cacheprovider``

* Per step: :class:`TextWorldEnv` ``step`` against ``textworld.start(game, same EnvInfos)``
  ``step`` with the same commands, on a small custom game and a 6-room cooking game (goal: at
  most 10% more per step).
* Forking: ``snapshot()`` + ``restore()`` against TextWorld's ``env.copy()`` (goal: at least 20x
  faster).

Games come from the default cache (generated on the first run).
"""

from __future__ import annotations

import warnings

import pytest

from budget_envs.envs.textworld import CookingEnv, TextWorldEnv
from budget_envs.envs.textworld.env import INTERPRETER_SEED

STEPS = 40
GAMES = {"small": (TextWorldEnv, 2), "cooking6": (CookingEnv, 3)}
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def _infos():
    import textworld

    # the same infos the env requests
    return textworld.EnvInfos(
        admissible_commands=True,
        policy_commands=True,
        objective=True,
        max_score=True,
        score=True,
        won=True,
        lost=True,
    )


def _cycle(env) -> list[str]:
    """Commands that never end the game and return to the start: look, inventory, go and back."""
    admissible = env.current_info()["admissible_actions"]
    goes = [c for c in admissible if c.startswith("go ") and c.split()[-1] in OPPOSITE]
    out = ["look", "inventory"]
    if goes:
        out += [goes[0], "go " + OPPOSITE[goes[0].split()[-1]]]
    return (out * STEPS)[:STEPS]


@pytest.fixture(scope="module", params=sorted(GAMES))
def game(request):
    cls, level = GAMES[request.param]
    env = cls(level=level, seeds=[0])
    env.reset(seed=0)
    path = str(env.game_path(env.task_id))
    return request.param, env, path, _cycle(env)


def test_step_env(benchmark, game):
    name, env, _, commands = game

    def run():
        for command in commands:
            env.step(command)

    benchmark.extra_info.update(
        compare=f"textworld step {name}", role="ours", calls=STEPS, goal="<= 1.10"
    )

    def setup():
        env.reset(seed=0)

    benchmark.pedantic(run, setup=setup, rounds=15, iterations=1)


def test_step_raw_textworld(benchmark, game):
    import textworld

    name, _, path, commands = game
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = textworld.start(path, _infos())
    raw.seed(INTERPRETER_SEED)

    def run():
        for command in commands:
            raw.step(command)

    benchmark.extra_info.update(compare=f"textworld step {name}", role="baseline", calls=STEPS)

    def setup():
        raw.reset()

    benchmark.pedantic(run, setup=setup, rounds=15, iterations=1)
    raw.close()


def test_fork_snapshot_restore(benchmark, game):
    name, env, _, commands = game
    env.reset(seed=0)
    for command in commands[:3]:
        env.step(command)

    def fork():
        env.restore(env.snapshot())

    benchmark.extra_info.update(compare=f"textworld fork {name}", role="ours", goal="<= 0.05")
    benchmark.pedantic(fork, rounds=30, iterations=1)


def test_fork_textworld_copy(benchmark, game):
    import textworld

    name, _, path, commands = game
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = textworld.start(path, _infos())
        raw.seed(INTERPRETER_SEED)
        raw.reset()
        for command in commands[:3]:
            raw.step(command)

        def fork():
            raw.copy().close()

        benchmark.extra_info.update(compare=f"textworld fork {name}", role="baseline")
        benchmark.pedantic(fork, rounds=8, iterations=1)
    raw.close()
