"""Which ``Host`` and ``Origin`` headers a local server answers: loopback only, unless told.

A server on 127.0.0.1 is still reachable from every web page its user opens: the page's
script can open a WebSocket to it, or send a CORS "simple" request (a ``text/plain`` POST needs
no preflight), and a page on a name that the attacker re-points at 127.0.0.1 (DNS rebinding)
reads the answers as its own origin. Browsers always send the ``Host`` they resolved and, for
WebSockets and cross-site POSTs, the page's ``Origin``; neither can be forged by a script. So
``budgetmix serve`` and ``budgetmix serve-web`` answer only requests whose ``Host`` is a
loopback name (``localhost``, ``127.0.0.0/8``, ``::1``) or one the user allowed, and whose
``Origin`` is absent (a program, not a page) or on a loopback host (the shop's own pages) or
allowed. ``*`` allows any. Plain functions; nothing here imports a web framework.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HostPolicy", "add_host_policy_args", "host_name", "is_loopback_name"]


def is_loopback_name(name: str) -> bool:
    """``localhost`` (and names under it), or a loopback IP address.

    >>> [is_loopback_name(n) for n in ("localhost", "127.0.0.2", "::1", "evil.example", "")]
    [True, True, True, False, False]
    """
    name = name.strip().strip("[]").lower().rstrip(".")
    if not name:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str:
    """The host part of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower-case.

    >>> host_name("LocalHost:8000"), host_name("[::1]:80"), host_name("127.0.0.1")
    ('localhost', '::1', '127.0.0.1')
    """
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end].lower() if end > 0 else ""
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.lower().rstrip(".")


class HostPolicy:
    """The ``Host`` names and ``Origin`` values a server answers (see the module docstring).

    Args:
        allow_hosts: extra host names (no port), or ``*`` for any.
        allow_origins: extra origins (``https://app.example:8443``, scheme and port as the
            browser sends them), or ``*`` for any.
    """

    def __init__(self, allow_hosts: Iterable[str] = (), allow_origins: Iterable[str] = ()) -> None:
        self.allow_hosts = frozenset(h.strip().lower().rstrip(".") for h in allow_hosts if h)
        self.allow_origins = frozenset(o.strip().rstrip("/").lower() for o in allow_origins if o)

    def host_ok(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header is answered (absent: HTTP/1.0, a
        program; answered)."""
        if host is None:
            return True
        if "*" in self.allow_hosts:
            return True
        name = host_name(host)
        return is_loopback_name(name) or name in self.allow_hosts

    def origin_ok(self, origin: str | None) -> bool:
        """Whether a request with this ``Origin`` header is answered (absent: answered;
        ``null``, a sandboxed or file page: refused unless ``*``)."""
        if origin is None:
            return True
        if "*" in self.allow_origins:
            return True
        value = origin.strip().rstrip("/").lower()
        if value in self.allow_origins:
            return True
        try:
            parts = urlsplit(value)
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and is_loopback_name(parts.hostname or "")

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these headers is refused, or None when it is answered."""
        if not self.host_ok(host):
            return (
                f"Host {host!r} is not a loopback name: this server answers only requests "
                "addressed to localhost unless started with --allow-host"
            )
        if not self.origin_ok(origin):
            return (
                f"Origin {origin!r} is not allowed: web pages of other sites may not drive this "
                "server (start it with --allow-origin to allow one)"
            )
        return None


def add_host_policy_args(parser: Any) -> None:
    """``--allow-host`` and ``--allow-origin`` (see :mod:`budget_envs.hostcheck`)."""
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to this host name (repeatable; * for any); by "
        "default only loopback names (localhost, 127.0.0.1, ::1)",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also answer web pages of this origin, e.g. https://app.example (repeatable; * for "
        "any); by default only programs (no Origin) and pages on loopback",
    )
