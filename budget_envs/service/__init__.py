"""The envs as a service: any registered id served over OpenEnv's HTTP/WebSocket protocol.

``budgetmix serve ID`` (or :func:`~budget_envs.service.server.serve`) runs one server with many
independent sessions; :class:`~budget_envs.service.client.BudgetEnvClient` (an OpenEnv
``EnvClient``) and :class:`~budget_envs.service.client.RemoteEnv` (a Gymnasium env) reach it.
Needs the ``openenv`` extra: ``pip install "budget-envs[openenv]"``; ``EnvActorPool`` (envs in
Ray actors, stepped in batches, :mod:`budget_envs.service.ray_pool`) needs the ``ray`` extra. Nothing here is imported by
``import budget_envs``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetAction",
    "BudgetEnvClient",
    "BudgetObservation",
    "BudgetState",
    "EnvActorPool",
    "RemoteEnv",
    "create_app",
    "serve",
]


def __getattr__(name: str) -> Any:
    # Each name loads its module on first use (the extras they need stay unimported until then).
    if name in ("BudgetAction", "BudgetObservation", "BudgetState"):
        from budget_envs.service import models as module
    elif name in ("BudgetEnvClient", "RemoteEnv"):
        from budget_envs.service import client as module
    elif name == "EnvActorPool":
        from budget_envs.service import ray_pool as module
    elif name in ("create_app", "serve"):
        from budget_envs.service import server as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
