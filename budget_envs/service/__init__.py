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

_WHERE = {
    "BudgetAction": "models",
    "BudgetObservation": "models",
    "BudgetState": "models",
    "BudgetEnvClient": "client",
    "RemoteEnv": "client",
    "EnvActorPool": "ray_pool",
    "create_app": "server",
    "serve": "server",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
