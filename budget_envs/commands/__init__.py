"""The work of each ``budgetmix`` command, one module per command (the cli layer).

:mod:`budget_envs.cli` parses the arguments and calls ``cmd_<name>(args, out)`` of one of these
modules, which calls the library and prints; a :class:`~budget_envs.errors.UsageError` it raises
becomes one line on stderr and exit code 2.

* :mod:`.common`: what several commands share (id checks, progress bars, install hints);
* :mod:`.listing`: ``list``; :mod:`.eval`: ``eval``; :mod:`.report`: ``report``, ``compare``;
* :mod:`.play`: ``play``; :mod:`.prepare`: ``prepare``; :mod:`.serve`: ``serve`` and the family
  dispatchers ``serve-web``, ``export-webshop``;
* :mod:`.train`: ``train``; :mod:`.study`: ``study``; :mod:`.demo`: ``demo`` (what the demo
  computes is :mod:`budget_envs.demo`).

Importing these modules imports no heavy package: each command loads what it needs when it runs.
"""
