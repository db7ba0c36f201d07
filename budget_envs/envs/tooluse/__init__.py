"""ToolUse family: OpenAI-style tool calls over a generated SQLite back office (issue 3).

Modules: ``world`` (generated data and template database), ``tasks`` (ticket generator),
``schemas`` (the tool table and its OpenAI schemas), ``calls`` (reading a call's text),
``tools`` (the SQL behind each tool), ``lru`` (a small cache), ``oracle`` (exact cost-to-go),
``candidates`` (the offered calls), ``faults`` (the family's fault kinds), ``env`` (the Gymnasium
env).
"""

from __future__ import annotations

from budget_envs.envs.tooluse.env import ToolUseEnv

__all__ = ["ToolUseEnv"]
