"""ToolUse family: OpenAI-style tool calls over a generated SQLite back office (issue 3).

Modules: ``world`` (generated data and template database), ``tasks`` (ticket generator),
``tools`` (schemas, parser, SQL), ``oracle`` (exact cost-to-go), ``env`` (the Gymnasium env).
"""

from __future__ import annotations

from budget_envs.envs.tooluse.env import ToolUseEnv

__all__ = ["ToolUseEnv"]
