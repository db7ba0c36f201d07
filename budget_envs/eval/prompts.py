"""The chat agents' system prompts: a family's own prompt from its registry row, overridable.

A family's prompt is on its registry row (``EnvEntry.prompt``); ``ChatAgent(prompts=...)``
overrides it per family or per id, and :data:`DEFAULT_PROMPTS` covers an env whose row has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_PROMPTS", "system_prompt"]

#: The system prompt of an env whose registry row has none. A family's own prompt is on its
#: registry row (``EnvEntry.prompt``); ``ChatAgent(prompts=...)`` overrides both per family.
DEFAULT_PROMPTS: dict[str, str] = {
    "default": (
        "You are an agent in a text environment. Each message is what you observe. Reply with "
        "exactly one action as plain text, nothing else."
    ),
}


def system_prompt(env_id: str, info: Mapping[str, Any], prompts: Mapping[str, str]) -> str:
    """The system prompt for an episode of ``env_id`` starting with ``info``.

    In order: ``prompts[<the row's family>]``, ``prompts[env_id]``, the registry row's own
    prompt, ``prompts["default"]``. An id that is not registered gets the default prompt.
    """
    from gymnasium.error import NameNotFound

    from budget_envs.registry import entry_for

    default = prompts.get("default", DEFAULT_PROMPTS["default"])
    try:
        entry = entry_for(env_id)
    except NameNotFound:  # an env that is not a registry row (a user's own id)
        return prompts.get(env_id, default)
    for key in (entry.family, env_id):
        if key in prompts:
            return prompts[key]
    return entry.chat_prompt(info) or default
