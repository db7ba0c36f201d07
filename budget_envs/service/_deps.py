"""The optional ``openenv`` dependency, imported with an install hint."""

from __future__ import annotations

from gymnasium.error import DependencyNotInstalled

HINT = 'the service needs the openenv extra: pip install "budget-envs[openenv]"'


def require_openenv() -> None:
    """Raise :class:`DependencyNotInstalled` with the install hint when openenv is missing."""
    try:
        import openenv.core.env_server  # noqa: F401
    except ImportError as exc:
        raise DependencyNotInstalled(f"{HINT} ({exc})") from exc
