"""BudgetWrapper: a turn limit drawn per episode, with the remaining budget shown or hidden."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from budget_envs.wrappers.budget_spec import BudgetSpec, _turns, parse_budget
from gymnasium.envs.registration import EnvSpec

from budget_envs.core import PRINTABLE
from budget_envs.info import NO_TURN

__all__ = ["BudgetWrapper", "VISIBILITIES"]

#: Visibility modes; any other string containing ``{remaining}`` is a custom template.
VISIBILITIES = ("hidden", "remaining", "final_warning")
DEFAULT_TEMPLATE = "Turns left: {remaining} of {limit}"
_SEED_TAG = 0xB1D6E7  # keeps the budget stream apart from the env's own draws


class BudgetWrapper(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Truncate the episode after T turns, with T drawn at every reset from a budget spec.

    A turn is one ``step`` call, invalid actions included. After the T-th turn, unless the episode
    terminated, ``truncated`` is set; ``terminated`` is never touched, exactly like Gymnasium's
    ``TimeLimit``, so value bootstrapping stays correct. Unlike ``TimeLimit``, T is drawn per
    episode (the "BudgetMix" training regime), from the wrapper's own generator, seeded by
    ``reset(seed=...)`` or ``seed=``, so the draw never disturbs the env's task sampling.

    Visibility is a controlled variable: ``"hidden"`` shows nothing, ``"remaining"`` appends a line
    such as ``Turns left: 9 of 10`` to every observation, ``"final_warning"`` appends it only while
    at most ``warn_within`` turns are left, and any string with ``{remaining}`` (fields
    ``remaining``, ``limit``, ``used``) is shown on every observation as a custom template.

    ``info["budget"]`` holds ``{"limit", "used", "remaining"}`` on every reset and step, with
    every visibility, ``"hidden"`` included: a hand-written loop that passes ``info`` to its model
    shows it the budget. ``budget_info=False`` leaves the key out (the limit is still enforced,
    and the wrapper's ``limit`` / ``used`` attributes still say it). The step
    that ends the episode adds ``info["episode_summary"]`` with the limit, turns used, whether the
    task was won, the first success turn (the turn on which the env terminated with
    ``info["won"]``; the contract says a win always terminates; ``-1`` when not won) and the stop
    reason (``""`` when the env ended the episode without saying why). Every value keeps one
    type in every episode, so Gymnasium's vector envs can batch infos of won and lost episodes. The step
    that truncates sets ``info["stop_reason"] = "budget"`` (the env sets ``"won"`` or ``"lost"``
    on the step that terminates).

    Example:
        >>> import gymnasium as gym
        >>> import budget_envs
        >>> from budget_envs.wrappers import BudgetWrapper
        >>> env = BudgetWrapper(gym.make("BudgetMix/ToolUse-v0", budget=None), budget=(5, 20),
        ...                     visibility="remaining")
        >>> obs, info = env.reset(seed=0)
        >>> info["budget"]
        {'limit': 11, 'used': 0, 'remaining': 11}
        >>> obs.splitlines()[-1]
        'Turns left: 11 of 11'
        >>> obs, reward, terminated, truncated, info = env.step("")  # invalid turns count
        >>> info["invalid_action"], info["budget"]["remaining"]
        (True, 10)
    """

    def __init__(
        self,
        env: gym.Env,
        budget: Any = 30,
        visibility: str = "hidden",
        *,
        template: str = DEFAULT_TEMPLATE,
        warn_within: int = 3,
        seed: int | None = None,
        budget_info: bool = True,
    ) -> None:
        """Wrap ``env``.

        Args:
            env: any ``gymnasium.Env`` with text observations.
            budget: a budget spec (see :func:`budget_envs.wrappers.budget_spec.parse_budget`).
            visibility: ``"hidden"``, ``"remaining"``, ``"final_warning"`` or a custom template.
            template: the line shown by ``"remaining"`` and ``"final_warning"``.
            warn_within: ``"final_warning"`` shows the line while at most this many turns are left.
            seed: seeds the budget draws until the first ``reset(seed=...)``.
            budget_info: put ``info["budget"]`` in every reset and step (False: leave it out).
        """
        spec = parse_budget(budget)
        if not isinstance(visibility, str):
            raise TypeError(f"visibility must be a string, got {visibility!r}")
        if visibility not in VISIBILITIES:
            if "{remaining" not in visibility:
                raise ValueError(
                    f"visibility must be one of {VISIBILITIES} or a template containing "
                    f"'{{remaining}}', got {visibility!r}"
                )
            template = visibility
        if not isinstance(template, str):
            raise TypeError(f"template must be a string, got {template!r}")
        try:
            template.format(remaining=1, limit=2, used=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"budget template {template!r} is not valid: {exc!r}; "
                "use the fields {remaining}, {limit} and {used}"
            ) from None
        if len(template) > 200 or any(c not in PRINTABLE for c in template):
            raise ValueError(
                f"budget template must be at most 200 printable ASCII characters, got {template!r}"
            )
        if isinstance(warn_within, bool) or not isinstance(warn_within, (int, np.integer)):
            raise TypeError(f"warn_within must be an int, got {warn_within!r}")
        if warn_within < 1:
            raise ValueError(f"warn_within must be at least 1, got {warn_within!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        if not isinstance(budget_info, bool):
            raise TypeError(f"budget_info must be true or false, got {budget_info!r}")
        # The canonical JSON form, not the object given: (5, 20) would come back from JSON as the
        # two-item list [5, 20] (a choice), and LogUniform or int-keyed mappings not at all.
        gym.utils.RecordConstructorArgs.__init__(
            self,
            budget=spec.to_json(),
            visibility=visibility,
            template=template,
            warn_within=warn_within,
            seed=seed,
            budget_info=budget_info,
        )
        gym.Wrapper.__init__(self, env)
        self._budget_info = budget_info
        self.budget_spec: BudgetSpec = spec
        self.visibility = visibility
        self.template = template
        self.warn_within = int(warn_within)
        # "always", "warn" or None: decided once, so the hidden step path does no string work.
        if visibility == "hidden":
            self._show = None
        elif visibility == "final_warning":
            self._show = "warn"
        else:
            self._show = "always"
        self.budget_rng = np.random.default_rng(None if seed is None else [int(seed), _SEED_TAG])
        self.episodes = 0
        self._limit = 0
        self._used = 0
        self._first_success: int | None = None
        self._over = False

    @property
    def spec(self) -> EnvSpec | None:
        """The env spec, with a ``budget=`` keyword of ``gymnasium.make`` in canonical JSON form.

        ``gymnasium.make(id, budget=(5, 20))`` stores ``(5, 20)`` in ``env.spec.kwargs``, and
        ``EnvSpec.to_json()`` would turn it into ``[5, 20]``, a choice between 5 and 20. When this
        wrapper is the one that keyword built (the innermost BudgetWrapper, same spec), the
        keyword is rewritten to ``"5..20"``, so ``gymnasium.make(EnvSpec.from_json(
        env.spec.to_json()))`` draws from the same distribution.
        """
        if self._cached_spec is not None:
            return self._cached_spec
        env_spec = super().spec
        if env_spec is None or env_spec.kwargs.get("budget") is None or self._wraps_budget():
            return env_spec
        try:
            built_here = parse_budget(env_spec.kwargs["budget"]) == self.budget_spec
        except (TypeError, ValueError):
            built_here = False
        if built_here:
            env_spec.kwargs["budget"] = self.budget_spec.to_json()
        return env_spec

    def _wraps_budget(self) -> bool:
        env = self.env
        while isinstance(env, gym.Wrapper):
            if isinstance(env, BudgetWrapper):
                return True
            env = env.env
        return False

    @property
    def limit(self) -> int:
        """T of the current episode."""
        return self._limit

    @property
    def used(self) -> int:
        """Turns taken in the current episode."""
        return self._used

    @property
    def remaining(self) -> int:
        """Turns left in the current episode."""
        return max(self._limit - self._used, 0)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw T (or take ``options["budget"]``) and reset the env."""
        if seed is not None:
            self.budget_rng = np.random.default_rng([int(seed), _SEED_TAG])
        override = None
        if options is not None and "budget" in options:
            options = dict(options)
            override = options.pop("budget")
            override = _turns(override, "options['budget']")
        obs, info = self.env.reset(seed=seed, options=options)
        # The draw happens even when overridden, so one override does not shift later episodes.
        drawn = self.budget_spec.sample(self.budget_rng, self.episodes)
        self._limit = int(override) if override is not None else drawn
        self.episodes += 1
        self._used = 0
        self._first_success = None
        self._over = False
        if self._budget_info:
            info["budget"] = {"limit": self._limit, "used": 0, "remaining": self._limit}
        if self._show is not None:
            obs = self._annotate(obs)
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Step the env and truncate after the T-th turn (never touches ``terminated``)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        used = self._used = self._used + 1
        limit = self._limit
        if used < limit and not (terminated or truncated):
            # The common turn: kept lean, since it runs on every step of every rollout.
            if self._budget_info:
                info["budget"] = {"limit": limit, "used": used, "remaining": limit - used}
            if self._show is None:
                return obs, reward, terminated, truncated, info
            return self._annotate(obs), reward, terminated, truncated, info
        if self._first_success is None and terminated and info.get("won"):
            self._first_success = used
        if used >= limit and not terminated:
            truncated = True
            info["stop_reason"] = "budget"
        if self._budget_info:
            info["budget"] = {"limit": limit, "used": used, "remaining": max(limit - used, 0)}
        if not self._over:
            self._over = True
            info["episode_summary"] = {
                "limit": limit,
                "used": used,
                "won": self._first_success is not None,
                # Never None: gymnasium's vector envs batch every info key into one typed array.
                "first_success_turn": NO_TURN
                if self._first_success is None
                else self._first_success,
                "stop_reason": str(info.get("stop_reason") or ""),
            }
        if self._show is not None:
            obs = self._annotate(obs)
        return obs, reward, terminated, truncated, info

    def _annotate(self, obs: str) -> str:
        remaining = max(self._limit - self._used, 0)
        if self._show == "warn" and remaining > self.warn_within:
            return obs
        line = self.template.format(remaining=remaining, limit=self._limit, used=self._used)
        return f"{obs}\n\n{line}" if obs else line
