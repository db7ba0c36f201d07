"""The ``environment_factory`` adapter: :class:`BudgetMixToolEnv` offers the env's actions as
tools, and TRL's own generation loop calls them."""

from __future__ import annotations

import itertools
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from budget_envs._util import tool_call_action
from budget_envs.errors import BudgetExhausted, EpisodeOver
from budget_envs.integrations.common import make_env
from budget_envs.integrations.trl.base import _check_draw_options, _seed
from budget_envs.integrations.trl.dialogue import _stop_reason, _user_text


class BudgetMixToolEnv:
    """An ``environment_factory`` class for ``GRPOTrainer``: the env's actions as tools.

    TRL builds instances as it needs them and pools them across batches, calling
    ``reset(**row)`` with the dataset row (each row repeated ``num_generations`` times). The
    generations of one row play one task: the row's ``task_id`` when it has one, else a task
    drawn from the row's content and the seed. Budgets are drawn per episode (a seed per
    instance, from an instance counter and the rank, and per reset), or one per row with
    ``budget_per="group"``. :meth:`act` is the tool (for an env with an OpenAI tools schema,
    one method per tool instead, see :meth:`factory`).

    One tool call is one turn of the budget, the same definition as in evaluation (where the
    tool-use env takes exactly one tool call per message). The call that uses the last turn, and
    any call after it, raises :class:`BudgetExhausted` with the observation, so the model learns
    the budget ran out. :meth:`get_reward` gives the episode's summed reward; ``turns`` (turns
    played), :attr:`stop_reason`, ``task_id`` and ``budget`` (its T) serve reward functions,
    which TRL hands the batch's instances as ``environments=``. :func:`make_tool_dataset` makes
    the conversational prompt dataset this path needs.

    Use :meth:`factory`::

        GRPOTrainer(..., environment_factory=BudgetMixToolEnv.factory(
            "BudgetMix/WebShop-v0", budget=(5, 20), visibility="remaining"))
    """

    env_id: str = ""
    env_options: dict[str, Any] = {}
    seed: int = 0
    rank: int | None = None
    budget_per: str = "episode"
    _counter: Iterator[int] = itertools.count()

    def __init__(self) -> None:
        if not self.env_id:
            raise TypeError(
                "BudgetMixToolEnv needs an env id: use BudgetMixToolEnv.factory(env_id, ...)"
            )
        rank = self.rank if self.rank is not None else int(os.environ.get("RANK", "0") or 0)
        self.instance = next(type(self)._counter)
        self._seed = _seed(self.seed, rank, self.instance, 4)
        self.env = make_env(self.env_id, **self.env_options)
        self.reward = 0.0
        self.over: str | None = None
        self.turns = 0
        self.resets = 0
        self.task_id: str | None = None
        self.budget = 0

    @classmethod
    def factory(
        cls,
        env_id: str,
        *,
        seed: int = 0,
        rank: int | None = None,
        budget_per: str = "episode",
        **options: Any,
    ) -> Callable[[], BudgetMixToolEnv]:
        """A zero-argument callable building instances for ``env_id`` (options as in make_env).

        ``seed`` and the rank (default: the ``RANK`` environment variable that torchrun and
        accelerate set, else 0) seed the task and budget draws with an instance counter.
        When the env publishes an OpenAI tools schema (``info["tools"]``, the tool-use family),
        every tool becomes a method of its own (its call is sent as the env's JSON tool call)
        instead of the generic :meth:`act`.
        """
        if not isinstance(env_id, str) or not env_id:
            raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
        _check_draw_options(budget_per, seed)
        name = "BudgetMixToolEnv_" + re.sub(r"\W", "_", env_id)
        attrs: dict[str, Any] = {
            "env_id": env_id,
            "env_options": dict(options),
            "seed": seed,
            "rank": rank,
            "budget_per": budget_per,
            "_counter": itertools.count(),
        }
        probe = make_env(env_id, **options)
        try:
            _, info = probe.reset(seed=seed)
        finally:
            probe.close()
        schemas = info.get("tools") or []
        if schemas:
            attrs["act"] = None  # the env's own tools replace the generic text channel
            for schema in schemas:
                fn = schema.get("function", schema)
                if fn["name"] in ("reset", "get_reward") or fn["name"].startswith("_"):
                    raise ValueError(
                        f"{env_id} has a tool named {fn['name']!r}, which TRL reserves"
                    )
                attrs[fn["name"]] = _schema_method(fn)
        return type(name, (cls,), attrs)

    @staticmethod
    def _row_key(row: dict[str, Any]) -> int:
        """A stable hash of a dataset row (the same in every process)."""
        text = json.dumps(row, sort_keys=True, default=str)
        return zlib.crc32(text.encode("utf-8"))

    def reset(self, **row: Any) -> str:
        """Start an episode on the row's task; returns the first observation."""
        key = self._row_key(row)
        if row.get("task_id") is not None:
            task_id = str(row["task_id"])
        else:
            ids = self.env.unwrapped.task_ids
            task_id = ids[int(np.random.default_rng([self.seed, key]).integers(len(ids)))]
        options: dict[str, Any] = {"task_id": task_id}
        if self.budget_per == "group":
            # The row's repeats sit on instances with the same reset count in one batch.
            spec = self.env.get_wrapper_attr("budget_spec")
            rng = np.random.default_rng([self.seed, key, self.resets])
            options["budget"] = int(spec.sample(rng, self.resets))
        obs, info = self.env.reset(seed=_seed(self._seed, self.resets), options=options)
        self.resets += 1
        self.task_id = task_id
        self.budget = int(info.get("budget", {}).get("limit", 0))
        self.reward = 0.0
        self.over = None
        self.turns = 0
        return "\n" + _user_text(obs, info, True)

    def act(self, command: str) -> str:
        """Send one command to the environment; each call uses one turn of the budget.

        Args:
            command: The action to take, as text (for example "go east" or "search[red shoes]").

        Returns:
            What the environment answers.
        """
        return self._run(str(command))

    def _run(self, action: str) -> str:
        """Play one turn; raise at the end of the budget (see the class docstring)."""
        if self.over == "budget":
            raise BudgetExhausted(
                "Budget exhausted: no turns are left in this episode; no action can run."
            )
        if self.over is not None:
            raise EpisodeOver(f"The episode is over ({self.over}); no action can run.")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self.reward += float(reward)
        if terminated:
            self.over = _stop_reason(info, terminated=True)
            return obs
        if truncated:
            self.over = "budget"
            limit = info.get("budget", {}).get("limit", "?")
            raise BudgetExhausted(
                f"Budget exhausted: that was turn {limit} of {limit}, the last one; "
                f"the episode ends unsolved. Last observation: {obs}"
            )
        return _user_text(obs, info, True)

    @property
    def stop_reason(self) -> str | None:
        """``won``, ``lost`` or ``budget`` once the episode is over, else None."""
        return self.over

    def get_reward(self) -> float:
        """The episode's summed reward (with ProcessReward when configured)."""
        return self.reward


def _schema_method(fn: dict[str, Any]) -> Callable[..., str]:
    """A method for one OpenAI tool schema, typed and documented so TRL can render its schema."""
    import inspect

    tool_name = fn["name"]
    params = fn.get("parameters", {}) or {}
    props = params.get("properties", {}) or {}
    required = set(params.get("required", []) or [])
    kinds = {"string": str, "integer": int, "number": float, "boolean": bool}

    def method(self: BudgetMixToolEnv, **kwargs: Any) -> str:
        return self._run(tool_call_action(tool_name, kwargs))

    sig = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    for pname, spec in props.items():
        kind = kinds.get(spec.get("type"), str)
        if pname in required:
            sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, annotation=kind))
            annotations[pname] = kind
        else:
            sig.append(
                inspect.Parameter(
                    pname, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind | None
                )
            )
            annotations[pname] = kind | None
        doc_args.append(f"    {pname}: {' '.join(str(spec.get('description', pname)).split())}")
    annotations["return"] = str
    method.__signature__ = inspect.Signature(sig, return_annotation=str)
    method.__annotations__ = annotations
    method.__name__ = method.__qualname__ = tool_name
    description = " ".join(str(fn.get("description", tool_name)).split())
    method.__doc__ = (
        description
        + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "")
        + "\n\nReturns:\n    The tool's JSON result."
    )
    return method
