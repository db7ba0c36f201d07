"""Evaluation: Pass@(K,T) surfaces, single-step and recovery probes, agents, runner, reports.

* :mod:`budget_envs.eval.metrics` - ``pass_at_kt``, bootstrap intervals, the budget-hidden
  derivation, single-step accuracy and recovery tables;
* :mod:`budget_envs.eval.agents` - the ``Agent`` protocol, random, oracle-with-epsilon and an
  OpenAI-compatible chat agent;
* :mod:`budget_envs.eval.runner` - plans, episodes, JSONL records, processes and Ray;
* :mod:`budget_envs.eval.report` - markdown/CSV tables, figures, run comparison.

Submodules load on first use, so ``import budget_envs`` stays light.
"""

from __future__ import annotations
