"""The chat agent's HTTP transport: one pooled ``aiohttp`` client per event loop, retries.

The HTTP client is ``aiohttp``: of the async clients it spends the least CPU per request (see
``docs/llm-agents.md``), which is what bounds a driver that keeps a batching server busy. A
failed request (connection error, timeout, HTTP 429 or 5xx, a malformed body) is retried after
a backoff with jitter, or after the server's ``Retry-After``, waited on the agent's ``clock``
(:class:`~budget_envs.eval.chat.Clock`, which tests replace).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
from collections.abc import Awaitable
from typing import Any

from budget_envs._util import require
from budget_envs.errors import AgentError, PreflightError
from budget_envs.eval.chat_reply import _message_problem, _Reply

__all__ = ["ChatTransport"]

logger = logging.getLogger(__name__)


def _retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


class ChatTransport:
    """The HTTP side of :class:`~budget_envs.eval.chat.ChatAgent` (mixed into it): requests with
    retries, the preflight, and the clients and event loop it owns (``_sessions``, ``_loop``);
    reads the agent's ``base_url``, ``timeout``, ``retries``, backoff, ``clock`` and ``_jitter``."""

    def _session(self) -> Any:
        """The pooled client of the running event loop (one per loop, built on first use)."""
        require("aiohttp", extra="chat", what="the chat agent")
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(id(loop))
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                json_serialize=json.dumps,
            )
            self._sessions[id(loop)] = session
        return session

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        base = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
        return base / 2 + self._jitter.uniform(0, base / 2)

    async def complete(self, body: dict[str, Any]) -> _Reply:
        """POST ``body`` to ``/chat/completions``, with retries; the first choice's message."""
        import aiohttp

        session = self._session()
        url = f"{self.base_url}/chat/completions"
        headers = self._headers()
        last = "no attempt"
        wait: float | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self.clock.sleep(self._delay(attempt, wait))
            wait = None
            try:
                async with session.post(url, json=body, headers=headers) as resp:
                    status = resp.status
                    raw = await resp.read()
                    if status == 429 or status >= 500:
                        wait = _retry_after(resp.headers.get("Retry-After"), self.clock.time())
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                logger.warning("chat request failed (attempt %d): %s", attempt + 1, last)
                continue
            text = raw.decode("utf-8", "replace")
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {text[:200]}"
                logger.warning("chat request failed (attempt %d): %s", attempt + 1, last)
                continue
            if status >= 400:
                raise AgentError(f"{url} rejected the request: HTTP {status}: {text[:500]}")
            try:
                data = json.loads(text)
                choice = data["choices"][0]
                message = choice["message"]
            except (ValueError, KeyError, IndexError, TypeError):
                last = f"malformed chat completion: {text[:200]!r}"
                continue
            problem = _message_problem(message)
            if problem is not None:
                last = f"malformed chat completion ({problem}): {text[:200]!r}"
                continue
            return _Reply(
                message=message,
                finish_reason=choice.get("finish_reason"),
                usage=data.get("usage") or {},
                retries=attempt,
            )
        raise AgentError(f"{url} failed after {self.retries + 1} attempts; last error: {last}")

    # ------------------------------------------------------------------ preflight
    async def apreflight(self) -> list[str]:
        """``GET {base_url}/models``: the server answers, takes the key and serves the model.

        Returns the served model ids; raises :class:`PreflightError` with a one-line message.
        """
        import aiohttp

        session = self._session()
        url = f"{self.base_url}/models"
        try:
            async with session.get(url, headers=self._headers()) as resp:
                status = resp.status
                text = (await resp.read()).decode("utf-8", "replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise PreflightError(
                f"{self.name}: no OpenAI-compatible server answers at {self.base_url} ({reason})"
            ) from None
        if status in (401, 403):
            where = f"${self.api_key_env}" if self.api_key_env else "no key (api_key_env is empty)"
            raise PreflightError(
                f"{self.name}: {url} refused the API key from {where} (HTTP {status})"
            )
        if status >= 400:
            raise PreflightError(
                f"{self.name}: {url} answered HTTP {status}: {' '.join(text.split())[:200]}"
            )
        try:
            served = [str(m["id"]) for m in json.loads(text)["data"]]
        except (ValueError, KeyError, TypeError):
            raise PreflightError(
                f"{self.name}: {url} is not an OpenAI-compatible model list: "
                f"{' '.join(text.split())[:200]!r}"
            ) from None
        if self.model not in served:
            raise PreflightError(
                f"{self.name}: model {self.model!r} is not served at {self.base_url}; it serves "
                + (", ".join(repr(m) for m in served[:10]) or "no model")
            )
        return served

    def preflight(self) -> list[str]:
        """:meth:`apreflight` from synchronous code."""
        return self._run(self.apreflight())

    async def aclose(self) -> None:
        """Close the client of the running loop."""
        session = self._sessions.pop(id(asyncio.get_running_loop()), None)
        if session is not None:
            await session.close()

    def close(self) -> None:
        """Close the synchronous path's client and loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.aclose())
            self._loop.close()
        self._loop = None

    def _run(self, coro: Awaitable[Any]) -> Any:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)
