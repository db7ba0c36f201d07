"""What a chat request carries: the JSON body and the headers :class:`ChatRequests` builds.

The body holds the model, the messages and the tools, and only the fields the user set; for
OpenAI's reasoning models (``o1``, ``o3``, ``o4-mini``, ``gpt-5``...) the sampling fields are
left out and ``max_tokens`` is sent as ``max_completion_tokens``.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

__all__ = ["ChatRequests"]

logger = logging.getLogger(__name__)

#: OpenAI's reasoning models (o1, o3, o4-mini, gpt-5...): ``max_completion_tokens``, no sampling.
_REASONING_MODEL = re.compile(r"^(?:.*/)?(?:o\d(?:[-.].*)?|gpt-5.*)$")
#: Sampling fields a reasoning model rejects.
_SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty")


class ChatRequests:
    """The request building of :class:`~budget_envs.eval.chat.ChatAgent` (mixed into it): reads
    the agent's settings (``model``, the sampling fields, the token limits, ``stop``,
    ``reasoning_effort``, ``seed``, ``extra_body``, ``api_key_env``)."""

    def payload(
        self, messages: list[dict[str, Any]], tools: Any, episode_seed: int
    ) -> dict[str, Any]:
        """The request body: the model, the messages, the tools, and only the fields set."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = list(tools)
        sampling = {k: getattr(self, k) for k in _SAMPLING if getattr(self, k) is not None}
        if self.reasoning_model:
            if sampling and not self._warned_sampling:
                self._warned_sampling = True
                logger.warning(
                    "%s is a reasoning model: not sending %s", self.model, ", ".join(sampling)
                )
            limit = self.max_completion_tokens or self.max_tokens
            if limit is not None:
                body["max_completion_tokens"] = limit
        else:
            body.update(sampling)
            if self.max_tokens is not None:
                body["max_tokens"] = self.max_tokens
            if self.max_completion_tokens is not None:
                body["max_completion_tokens"] = self.max_completion_tokens
        if self.stop is not None:
            body["stop"] = self.stop
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if self.seed is not None:
            body["seed"] = (self.seed * 1_000_003 + int(episode_seed)) % (2**31)
        body.update(self.extra_body)
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers
