"""Generate and compile one TextWorld game; run as a subprocess by :mod:`.generate`.

Usage: ``python _worker.py '{"family": ..., "settings": {...}, "seed": 0, "out": "dir/name",
"oracle_max_states": 3000}'``. Besides ``name.z8`` and ``name.json`` it writes ``name.oracle.json``:
how large the game's state graph is (whether the exact oracle fits), measured once here.
Run in a child process so a timeout can stop it, PYTHONHASHSEED can be pinned (tw-cooking iterates
over sets) and the Inform compilers' scratch files stay out of the caller's working directory.
This file imports nothing from budget_envs so the child starts fast.
"""

from __future__ import annotations

import json
import os
import sys


def _options(seed: int, path: str):
    import textworld

    options = textworld.GameOptions()
    options.seeds = seed
    options.path = path
    options.file_ext = ".z8"
    options.force_recompile = True
    return options


def make(family: str, settings: dict, seed: int, out: str) -> str:
    """Build the game of ``family`` with ``settings`` from ``seed`` and compile it to ``out``.z8."""
    import textworld
    from textworld.generator import compile_game

    options = _options(seed, out + ".z8")
    if family == "custom":
        options.nb_rooms = int(settings["nb_rooms"])
        options.nb_objects = int(settings["nb_objects"])
        options.quest_length = int(settings["quest_length"])
        options.quest_breadth = int(settings.get("quest_breadth", 1))
        game = textworld.generator.make_game(options)
    else:
        from textworld.challenges import CHALLENGES

        _, make_fn, _ = CHALLENGES["tw-" + family]
        game = make_fn(dict(settings), options)
    return compile_game(game, options)


def measure_oracle(path: str, max_states: int) -> dict:
    """The game's state-graph size, up to ``max_states`` (decides whether the oracle is exact)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from oracle import StateGraph  # this package's oracle, loaded by path (no budget_envs import)
    from textworld.generator.game import Game

    game = Game.load(os.path.splitext(path)[0] + ".json")
    graph = StateGraph(game, max_states)
    complete = graph.explore_start()
    states = len(graph) if complete else None
    return {"max_states": max_states, "complete": complete, "states": states}


def main(argv: list[str]) -> int:
    request = json.loads(argv[1])
    path = make(request["family"], request["settings"], int(request["seed"]), request["out"])
    max_states = int(request.get("oracle_max_states", 0))
    if max_states > 0:
        verdict = measure_oracle(path, max_states)
        with open(os.path.splitext(path)[0] + ".oracle.json", "w") as fh:
            json.dump(verdict, fh)
    sys.stdout.write(json.dumps({"path": os.path.abspath(path)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
