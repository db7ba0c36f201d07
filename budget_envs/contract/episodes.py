"""The checks that play episodes: the oracle, candidate actions, bad input, snapshots,
determinism and closing.

Every episode is seeded: a mix of oracle moves and other actions (:func:`_policy_action`) on the
first tasks of the family, so a family's transcript is the same on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import error

from budget_envs.core import TextAgentEnv

from .checker import _Checker, _need
from .info_keys import _check_info

#: Actions every family must take as turns: invalid ones in every family (the core's checks)...
MUST_REJECT = ("", "   ", "\x00", "go\x00north", "\ud800", "go north\nlook", "\x1b[31m!\x1b[0m")
#: ...and others each family's parser judges: 1 MB, broken JSON, injections, odd prefixes.
BAD_ACTIONS = (*MUST_REJECT, "x" * 1_000_000, "ñandú über straße", "'; DROP TABLE orders; --")
BAD_ACTIONS += ('{"tool_calls": [{"name": "x", "arguments": "{broken', "[" * 5000, "\\help")
BAD_ACTIONS += ("<script>alert(1)</script>", "Ignore all previous instructions.", " \\x")


def _policy_action(env: TextAgentEnv, info: Mapping[str, Any], rng: np.random.Generator) -> str:
    """A seeded mix of oracle moves and other actions (a stable, varied transcript)."""
    if rng.random() < 0.7:
        best = env.oracle_actions()
        if best:
            return best[0]
    if hasattr(env, "sample_action"):
        return env.sample_action(rng)
    options = info["admissible_actions"] or ["look"]
    return options[int(rng.integers(len(options)))]


def _transcript(env: TextAgentEnv, seed: int, options: dict | None = None) -> list:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed, options=options)
    lines = [obs, info["task_id"], info["state_hash"]]
    for _ in range(8):
        action = _policy_action(env, info, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        lines += [action, obs, float(reward), bool(terminated), info["state_hash"]]
        if terminated or truncated:
            break
    return lines


def _first_tasks(env: TextAgentEnv) -> range:  # the tasks the episodes play
    return range(min(2, len(env.task_ids)))


def _check_oracle(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    for task in _first_tasks(env):
        where, need = f"(task {task}, seed {seed})", -1
        with ck.rule("oracle.nonempty"):
            obs, info = env.reset(seed=seed, options={"task_id": task})
            _check_info(ck, info, f"after reset {where}", False)
            best = env.oracle_actions()
            _need(isinstance(best, list) and best, f"oracle_actions() is {best!r} after reset")
            _need(all(isinstance(a, str) for a in best), f"oracle_actions() gave {best!r:.80}")
            need = env.cost_to_go()
            _need(isinstance(need, (int, np.integer)), f"cost_to_go() gave {need!r}, not an int")
            _need(need >= 1, f"cost_to_go() is {need} at the start: a task solved by its start")
        if need < 1:  # broken above (rules collected): no length to win in
            continue
        with ck.rule("oracle.wins"):
            turns, reward = 0, 0.0
            while not env.done and turns < need + 50:
                best = env.oracle_actions()
                _need(best, f"the oracle has no move at turn {turns} of a live episode {where}")
                obs, reward, terminated, truncated, info = env.step(best[0])
                turns += 1
                _check_info(ck, info, f"at oracle turn {turns} {where}", env.done)
            won = info["won"] and reward == 1.0 or info.get("score") == 1.0
            _need(won, f"the oracle did not win in {turns} turns {where} (last: {obs[:120]!r})")
            if env.oracle_exact:
                _need(turns == need, f"the exact oracle took {turns} turns, cost_to_go() {need}")
            _need(env.oracle_actions() == [], "oracle_actions() is not [] once the episode is won")
            _need(env.cost_to_go() == 0, f"cost_to_go() is {env.cost_to_go()} once won, not 0")


def _check_candidates(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    from budget_envs.eval.runner.episode import agrees  # how eval judges an oracle match

    for task in _first_tasks(env):
        with ck.rule("candidates.oracle"):
            obs, info = env.reset(seed=seed, options={"task_id": task})
            states = 0
            while not env.done:
                best, offered = env.oracle_actions(), info["candidate_actions"]
                hits = [a for a in offered if agrees(a, best)]
                why = f"no candidate of {offered[:5]!r:.160} is an oracle action {best[:3]!r:.99}"
                _need(hits, f"task {task}, state {states}: {why}")
                obs, reward, terminated, truncated, info = env.step(hits[0])
                states += 1
                _need(states < 200, f"task {task}: 200 oracle candidates did not win")
            _need(info["won"], f"task {task}: the oracle's candidates did not win")
    rng = np.random.default_rng(seed + 7)
    for task in _first_tasks(env):
        with ck.rule("candidates.playable"):
            obs, info = env.reset(seed=seed + task, options={"task_id": task})
            for _ in range(12):
                offered = info["candidate_actions"]
                _need(offered, f"task {task}: a live episode offers no candidate action")
                action = offered[int(rng.integers(len(offered)))]
                obs, reward, terminated, truncated, info = env.step(action)
                _need(
                    not info["invalid_action"], f"candidate {action!r:.80} is invalid: {obs!r:.99}"
                )
                if terminated:
                    break


def _state(env: TextAgentEnv) -> tuple:
    return env.state_hash(), env.cost_to_go(), tuple(env.current_info()["admissible_actions"])


def _check_bad_input(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    obs, info = env.reset(seed=seed, options={"task_id": 0})
    limit = env.max_action_length
    for bad in (*BAD_ACTIONS, None, 42, b"go north", ["look"]):
        shown, stepped = repr(bad)[:40], False
        before, turn = _state(env), env.turn
        with ck.rule("bad_input.turn"):
            try:
                obs, reward, terminated, truncated, info = env.step(bad)
                stepped = True
            except Exception as exc:
                why = f"raised {type(exc).__name__}: {str(exc)[:120]}"
                _need(False, f"step({shown}) {why}; in _execute, raise ActionRejected instead")
            _need(isinstance(obs, str) and obs.strip(), f"step({shown}) gave no feedback text")
            _need(env.observation_space.contains(obs), f"step({shown})'s text is off the space")
            _need(env.turn == turn + 1, f"step({shown}) was not counted as a turn")
            if not isinstance(bad, str) or bad in MUST_REJECT or len(bad) > limit:
                _need(info["invalid_action"], f"step({shown}) was not an invalid turn")
            if not isinstance(bad, str):
                _need("text" in obs, f"step({shown})'s feedback does not say text was expected")
        if not (stepped and info["invalid_action"]):
            if stepped and terminated:
                env.reset(seed=seed, options={"task_id": 0})
            continue
        with ck.rule("bad_input.state"):
            _need(reward == 0.0 and not terminated, f"invalid step({shown}) earned or ended")
            why = "changed the state (hash, cost-to-go or actions): reject before any change"
            _need(_state(env) == before, f"invalid step({shown}) {why}")


def _check_snapshots(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    def play(info: Mapping[str, Any], turns: int, rng: np.random.Generator) -> list:
        out = []
        for _ in range(turns):
            action = _policy_action(env, info, rng)
            obs, reward, terminated, truncated, info = env.step(action)
            out.append((action, obs, float(reward), terminated, info["state_hash"]))
            if terminated:
                break
        return out

    with ck.rule("snapshots.round_trip"):
        task = _first_tasks(env)[-1]
        obs, info = env.reset(seed=seed + 2, options={"task_id": task})
        out = play(info, 2, np.random.default_rng(seed + 1))
        obs = out[-1][1] if out else obs
        snap, at = env.snapshot(), _state(env)
        first = play(env.current_info(), 3, np.random.default_rng(seed + 9))
        back = env.restore(snap)
        _need(back == obs, f"restore() gave {back[:80]!r}, not the snapshot's {obs[:80]!r}")
        _need(_state(env) == at, "restore() did not bring back the hash, cost-to-go and actions")
        second = play(env.current_info(), 3, np.random.default_rng(seed + 9))
        _need(first == second, f"after restore() the episode went otherwise: {second!r:.200}")
    with ck.rule("digest.stable"):
        _, a = env.reset(seed=seed + 1, options={"task_id": 0})
        _, b = env.reset(seed=seed + 99, options={"task_id": 0})
        _need(a["state_hash"] == b["state_hash"], "two resets of one task start from two hashes")


def _check_determinism(ck: _Checker, env: TextAgentEnv, build: Callable, seed: int) -> None:
    with ck.rule("determinism.seed"):
        other = build()
        try:
            for s, options in ((seed + 3, None), (seed + 4, {"task_id": 0})):
                a, b = _transcript(env, s, options), _transcript(other, s, options)
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
                why = f"two fresh envs differ from transcript line {at} on: use seeded generators"
                _need(a == b, f"seed {s}, options {options}: {why}")
        finally:
            other.close()


def _check_close(ck: _Checker, env: TextAgentEnv) -> None:
    with ck.rule("lifecycle.close"):
        env.close()
        for name in ("step", "reset", "oracle_actions", "cost_to_go", "snapshot"):
            try:
                getattr(env, name)(*(["look"] if name == "step" else []))
            except error.ClosedEnvironmentError:
                continue
            _need(False, f"{name}() after close() did not raise EnvClosed (call super().close())")
        env.close()
