"""WebShop-style shopping env family: generated catalogue, FTS5 search, WSGI app, HTTP server.

``WebShopEnv`` is imported lazily so that importing the registry never builds anything.
"""

from __future__ import annotations

__all__ = ["WebShopEnv", "WebShopServerError"]


def __getattr__(name: str):
    if name in __all__:
        from budget_envs.envs.webshop import env

        return getattr(env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
