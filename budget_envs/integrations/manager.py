"""A verl-agent-shaped environment manager over BudgetMix envs (no verl-agent dependency).

verl-agent (GiGPO) has no package: its rollout loop talks to an ``EnvironmentManagerBase``
with ``reset(kwargs) -> ({"text", "image", "anchor"}, infos)`` and ``step(text_actions) ->
(observations, rewards, dones, infos)``, and reads ``won`` and ``is_action_valid`` from the
infos. :class:`BudgetMixEnvManager` is that interface over ``n`` envs of one BudgetMix id, built
as :func:`budget_envs.integrations.common.make_env` builds them, so the ``BudgetWrapper`` is the
one budget authority (set verl-agent's ``max_steps`` to at least the largest T).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from budget_envs.eval.prompts import DEFAULT_PROMPTS, system_prompt
from budget_envs.integrations.common import DEFAULT_BUDGET, make_env
from budget_envs.integrations.trl.dialogue import action_from_reply

__all__ = ["BudgetMixEnvManager"]


class BudgetMixEnvManager:
    """``n`` envs of one id behind verl-agent's manager interface, in groups that share a task.

    The envs sit in ``n // group_n`` consecutive groups of ``group_n`` (verl-agent's layout, so
    GRPO and GiGPO compare the samples of one task). At every :meth:`reset` each group gets a
    task and a seed drawn from the manager's generator (seeded by ``seed``); the envs of a group
    reset on that task with that seed, so they also share the drawn T and the fault schedule.

    Observations (``obs`` of :meth:`reset` and :meth:`step`):

    * ``anchor[i]``: env i's current observation, without history (what the env returned, so
      with the budget line when ``visibility`` shows it; ``infos[i]["state_hash"]`` keys the
      world state alone);
    * ``text[i]``: what the policy is shown: the id's system prompt, the goal, the last
      ``history_length`` (observation, action) pairs, then the current observation (and, with
      ``show_actions``, up to 20 of ``info["candidate_actions"]``);
    * ``image``: None.

    :meth:`step` takes one reply per env; ``parse`` (default: reasoning removed, then the first
    line, or all of a JSON reply) turns it into the action. An env that is done stays done
    until the next :meth:`reset`: its action is ignored (nothing is played), its reward is 0,
    ``dones[i]`` stays True and its observation and info are those of its last turn, with
    ``info["ignored"] = True``.

    Each info holds ``won``, ``is_action_valid`` (the env did not reject the action),
    ``state_hash``, ``stop_reason`` (``""`` until the end), ``task_id``, ``group``, ``turn``,
    ``budget``, ``action`` (as sent), ``ignored``, ``candidate_actions`` (actions sendable as
    they are; empty once over), and ``fault`` on a faulty turn.

    Example:
        >>> from budget_envs.integrations.manager import BudgetMixEnvManager
        >>> m = BudgetMixEnvManager("BudgetMix/ToolUse-v0", 4, group_n=2, budget=5, seed=0)
        >>> obs, infos = m.reset()
        >>> [i["task_id"] for i in infos] == [infos[0]["task_id"]] * 2 + [infos[2]["task_id"]] * 2
        True
        >>> obs, rewards, dones, infos = m.step(["", "", "", ""])
        >>> rewards.tolist(), dones.tolist(), [i["is_action_valid"] for i in infos]
        ([0.0, 0.0, 0.0, 0.0], [False, False, False, False], [False, False, False, False])
        >>> m.close()
    """

    def __init__(
        self,
        env_id: str,
        n: int,
        *,
        group_n: int = 1,
        budget: Any = DEFAULT_BUDGET,
        visibility: str = "hidden",
        faults: Any = None,
        seed: int | None = 0,
        history_length: int = 2,
        show_actions: bool = False,
        parse: Callable[[str], str] = action_from_reply,
        ray: str | None = None,
        actors: int | None = None,
        num_cpus: float = 0.25,
        **env_kwargs: Any,
    ) -> None:
        """Build ``n`` envs (``env_kwargs``: the env's constructor kwargs, as in make_env).

        ``ray``: None holds the envs in this process; ``"local"``, ``"auto"`` or an address
        holds them in ``actors`` Ray actors (default: one per 64 envs, at least 1) of
        ``num_cpus`` each (fractional is fine: an actor mostly waits), each reset and step of
        the manager one message per actor, the actors working in parallel."""
        for name, value, low in (("n", n, 1), ("group_n", group_n, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if n % group_n:
            raise ValueError(f"n must be a multiple of group_n, got n={n!r}, group_n={group_n!r}")
        if isinstance(history_length, bool) or not isinstance(history_length, int):
            raise TypeError(f"history_length must be an int, got {history_length!r}")
        if history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {history_length!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        if not callable(parse):
            raise TypeError(f"parse must be callable, got {parse!r}")
        if budget is None:
            raise ValueError(
                "the manager needs a budget (budget=None): the env must be the one that ends "
                "episodes"
            )
        self.env_id = env_id
        self.n = n
        self.group_n = group_n
        self.history_length = history_length
        self.show_actions = bool(show_actions)
        self.parse = parse
        self.rng = np.random.default_rng(seed)
        self.envs = []
        self._pool = None
        try:
            if ray is None:
                for _ in range(n):
                    self.envs.append(
                        make_env(
                            env_id,
                            budget=budget,
                            visibility=visibility,
                            faults=faults,
                            **env_kwargs,
                        )
                    )
                self.task_ids: Sequence[str] = self.envs[0].unwrapped.task_ids
            else:
                self._pool = _actor_pool(
                    env_id, n, ray, actors, num_cpus, budget, visibility, faults, env_kwargs
                )
                self.envs = [self._pool.env(i) for i in range(n)]
                self.task_ids = self._pool.get_attr("task_ids", indices=[0])[0]
        except BaseException:
            self.close()
            raise
        self._task_set = frozenset(self.task_ids)
        self._obs = [""] * n
        self._infos: list[dict[str, Any]] = [{} for _ in range(n)]
        self._history: list[list[tuple[str, str]]] = [[] for _ in range(n)]
        self._done = np.zeros(n, dtype=bool)
        self._system = [""] * n
        self._goal = [""] * n
        self._reset_once = False

    @property
    def num_groups(self) -> int:
        """``n // group_n``."""
        return self.n // self.group_n

    def reset(
        self, kwargs: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Start an episode in every env: one task and seed per group (see the class docstring).

        ``kwargs``: None, or one mapping per group (``num_groups`` of them) whose ``task_id``
        and ``seed`` replace the drawn ones.
        """
        groups = self.num_groups
        if kwargs is not None:
            kwargs = list(kwargs)
            if len(kwargs) != groups or not all(isinstance(k, Mapping) for k in kwargs):
                raise ValueError(
                    f"kwargs must be None or {groups} mappings (one per group), got {kwargs!r}"
                )
        # Draw for every group even when kwargs override: a reset's draws never shift the next.
        draws = [
            (
                self.task_ids[int(self.rng.integers(len(self.task_ids)))],
                int(self.rng.integers(2**31 - 1)),
            )
            for _ in range(groups)
        ]
        # Every group's task and seed checked before any env resets: all of them or none.
        plan = [
            self._checked(g, kwargs[g] if kwargs is not None else {}, *draws[g])
            for g in range(groups)
        ]
        seeds = [plan[i // self.group_n][1] for i in range(self.n)]
        options = [{"task_id": plan[i // self.group_n][0]} for i in range(self.n)]
        if self._pool is not None:
            results = self._pool.reset_batch(seeds, options, indices=range(self.n))
        else:
            results = [e.reset(seed=s, options=o) for e, s, o in zip(self.envs, seeds, options)]
        for g in range(groups):
            for i in range(g * self.group_n, (g + 1) * self.group_n):
                obs, info = results[i]
                self._system[i] = system_prompt(self.env_id, info, DEFAULT_PROMPTS)
                self._goal[i] = str(info.get("goal") or "")
                self._history[i] = []
                self._obs[i] = obs
                self._infos[i] = self._info(info, g, "", ignored=False)
        self._done[:] = False
        self._reset_once = True
        return self._observations(), [dict(i) for i in self._infos]

    def _checked(
        self, group: int, given: Mapping[str, Any], task_id: str, seed: int
    ) -> tuple[str, int]:
        """Group ``group``'s task id and seed: the drawn ones, or those ``given`` names (a task
        id or an index of ``task_ids``, as ``reset(options=...)`` takes; an int seed >= 0)."""
        unknown = sorted(set(given) - {"task_id", "seed"})
        if unknown:
            raise ValueError(f"kwargs[{group}]: unknown keys {unknown}; expected task_id, seed")
        if "seed" in given:
            seed = given["seed"]
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise TypeError(f"kwargs[{group}]['seed'] must be an int >= 0, got {seed!r}")
            seed = int(seed)
        if "task_id" in given:
            wanted = given["task_id"]
            if isinstance(wanted, (int, np.integer)) and not isinstance(wanted, bool):
                if not -len(self.task_ids) <= int(wanted) < len(self.task_ids):
                    raise ValueError(
                        f"kwargs[{group}]['task_id'] index {int(wanted)} is out of range: "
                        f"{len(self.task_ids)} tasks"
                    )
                wanted = self.task_ids[int(wanted)]
            elif not isinstance(wanted, str) or wanted not in self._task_set:
                raise ValueError(
                    f"kwargs[{group}]['task_id'] must be one of task_ids or an index, got "
                    f"{wanted!r}"
                )
            task_id = wanted
        return task_id, seed

    def step(
        self, text_actions: Sequence[str]
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Play one turn in every env that is not done (see the class docstring)."""
        if not self._reset_once:
            raise RuntimeError("call reset() before step()")
        if isinstance(text_actions, (str, bytes)) or not isinstance(text_actions, Sequence):
            raise TypeError(
                f"step needs a list of {self.n} strings, one per env, got "
                f"{type(text_actions).__name__} {text_actions!r:.80}"
            )
        text_actions = list(text_actions)
        if len(text_actions) != self.n:
            raise ValueError(f"step needs {self.n} actions, one per env, got {len(text_actions)}")
        bad = [i for i, a in enumerate(text_actions) if not isinstance(a, str)]
        if bad:
            raise TypeError(
                f"step needs a string for every env; env {bad[0]} got "
                f"{type(text_actions[bad[0]]).__name__} ({len(bad)} not strings); nothing was played"
            )
        rewards = np.zeros(self.n, dtype=np.float32)
        live = [i for i in range(self.n) if not self._done[i]]
        actions = {i: self.parse(text_actions[i]) for i in live}
        if self._pool is not None:
            stepped = self._pool.step_batch([actions[i] for i in live], indices=live)
        else:
            stepped = [self.envs[i].step(actions[i]) for i in live]
        results = dict(zip(live, stepped, strict=True))
        for i in range(self.n):
            group = i // self.group_n
            if self._done[i]:
                self._infos[i] = dict(self._infos[i], ignored=True)
                self._infos[i].pop("fault", None)
                continue
            action = actions[i]
            obs, reward, terminated, truncated, info = results[i]
            rewards[i] = float(reward)
            self._done[i] = bool(terminated or truncated)
            self._history[i].append((action, self._obs[i]))
            self._obs[i] = obs
            self._infos[i] = self._info(info, group, action, ignored=False)
        return self._observations(), rewards, self._done.copy(), [dict(i) for i in self._infos]

    @staticmethod
    def _info(info: Mapping[str, Any], group: int, action: str, ignored: bool) -> dict[str, Any]:
        out = {
            "won": bool(info.get("won")),
            "is_action_valid": not info.get("invalid_action", False),
            "state_hash": info["state_hash"],
            "stop_reason": str(info.get("stop_reason") or ""),
            "task_id": info["task_id"],
            "group": group,
            "turn": int(info["turn"]),
            "budget": dict(info["budget"]),
            "action": action,
            "ignored": ignored,
            "candidate_actions": list(info.get("candidate_actions") or []),
        }
        if "fault" in info:
            out["fault"] = info["fault"]
        return out

    def _observations(self) -> dict[str, Any]:
        return {
            "text": [self._text(i) for i in range(self.n)],
            "image": None,
            "anchor": list(self._obs),
        }

    def _text(self, i: int) -> str:
        """The policy's prompt for env i: system prompt, goal, recent turns, the observation."""
        parts = [self._system[i]]
        if self._goal[i]:
            parts.append(f"Goal: {self._goal[i]}")
        history = self._history[i]
        recent = history[-self.history_length :] if self.history_length else []
        if recent:
            first = len(history) - len(recent) + 1
            lines = [f"You have taken {len(history)} turn(s); the last {len(recent)}:"]
            for turn, (action, seen) in enumerate(recent, start=first):
                lines.append(f"[Turn {turn}] Observation:\n{seen}\nAction: {action}")
            parts.append("\n".join(lines))
        parts.append(f"Current observation:\n{self._obs[i]}")
        actions = self._infos[i]["candidate_actions"]
        if self.show_actions and actions:
            parts.append("Actions you can send: " + "; ".join(actions[:20]))
        parts.append("Reply with your next action.")
        return "\n\n".join(parts)

    def close(self) -> None:
        """Close every env (and end the actors holding them)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close()
            return
        for env in self.envs:
            env.close()


def _actor_pool(env_id, n, address, actors, num_cpus, budget, visibility, faults, env_kwargs):
    """An :class:`~budget_envs.service.ray_pool.EnvActorPool` holding the manager's ``n`` envs."""
    from budget_envs.service.ray_pool import EnvActorPool  # noqa: PLC0415 - the ray extra

    if actors is None:
        actors = max(1, -(-n // 64))
    if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
        raise ValueError(f"actors must be a positive int or None, got {actors!r}")
    actors = min(actors, n)
    per = -(-n // actors)
    kwargs = dict(env_kwargs, visibility=visibility, faults=faults)
    if budget is not DEFAULT_BUDGET:
        kwargs["budget"] = budget
    return EnvActorPool(
        env_id, actors, envs_per_actor=per, address=address, num_cpus=num_cpus, **kwargs
    )
