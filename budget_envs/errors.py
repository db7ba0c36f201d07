"""Every exception budget-envs raises, in one hierarchy rooted at :class:`gymnasium.error.Error`.

``except budget_envs.errors.BudgetEnvsError`` catches anything the suite raises on purpose, and
``except gymnasium.error.Error`` catches it together with Gymnasium's own errors. A class also
derives from the builtin its callers have always caught (``ValueError``, ``RuntimeError``,
``TimeoutError``), so existing ``except`` clauses keep working. No name here repeats a name of
:mod:`gymnasium.error`.

Example:
    >>> import gymnasium
    >>> from budget_envs.errors import ActionRejected, BudgetEnvsError
    >>> issubclass(ActionRejected, BudgetEnvsError) and issubclass(BudgetEnvsError, gymnasium.error.Error)
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from gymnasium import error as _gym_error

__all__ = [
    "SessionRefused",
    "SessionClosed",
    "MessageError",
    "CapacityError",
    "ActionRejected",
    "ContractViolation",
    "AgentError",
    "BudgetEnvsError",
    "BudgetExhausted",
    "DerivationError",
    "EnvClosed",
    "EpisodeOver",
    "ExpertError",
    "GameFileError",
    "GenerationError",
    "GenerationTimeout",
    "ModelPrepareError",
    "OutDirError",
    "PlanMismatch",
    "PreflightError",
    "RayUnavailable",
    "RecordsWriteError",
    "RunInUse",
    "ShopHTTPError",
    "SnapshotMismatch",
    "TaskGenerationError",
    "ToolError",
    "TooManyActions",
    "UnknownAgent",
    "UnknownFaultKind",
    "UnknownSplit",
    "UntrustedPolicy",
    "UsageError",
    "WebShopServerError",
]


class BudgetEnvsError(_gym_error.Error):
    """Root of every exception budget-envs raises on purpose."""


# ---------------------------------------------------------------------- turns and faults
class ActionRejected(BudgetEnvsError):
    """A family's ``_execute`` rejects an action; the message is the feedback the agent sees.

    Raised *before* any state changes, so the turn leaves the state untouched. The core turns it
    into an ordinary turn with ``info["invalid_action"] = True``; it never reaches the caller of
    ``step``.
    """


class ToolError(BudgetEnvsError):
    """A well-formed tool call the tool refuses (unknown id, wrong state); nothing was changed."""


class UnknownFaultKind(BudgetEnvsError, ValueError):
    """A fault kind the env does not offer (neither generic nor one of its ``fault_kinds()``)."""


class UnknownSplit(BudgetEnvsError, ValueError):
    """A ``split=`` the family does not have; the message names the splits it has."""


# ---------------------------------------------------------------------- the family contract
class ContractViolation(BudgetEnvsError, AssertionError):
    """A family breaks a rule of the family contract (:func:`budget_envs.contract.check_family`).

    ``rule`` is the rule's id (``"oracle.wins"``, ``"hooks.goal"``...); the message names it,
    what is wrong or missing, and the section of docs/extending.md that describes the rule. An
    ``AssertionError`` too, as Gymnasium's ``check_env`` raises.
    """

    def __init__(self, message: str, rule: str = "") -> None:
        super().__init__(message)
        self.rule = rule


# ---------------------------------------------------------------------- env lifecycle
class EnvClosed(BudgetEnvsError, _gym_error.ClosedEnvironmentError):
    """``step``, ``reset``, the oracle, ``snapshot`` or ``restore`` on an env after ``close()``.

    The same in every family; make a new env instead (``close()`` itself may be called again).
    ``except gymnasium.error.ClosedEnvironmentError`` catches it.
    """


class SnapshotMismatch(BudgetEnvsError, ValueError):
    """``restore(snap)`` of a snapshot this env cannot play: taken in another family or env
    configuration (another world or catalogue), or of a task this env does not have.

    Raised before anything changes; the message names the snapshot's env and task and this env.
    """


# ---------------------------------------------------------------------- web shop
class WebShopServerError(BudgetEnvsError, RuntimeError):
    """The shop server did not answer as expected (dead, restarted, or failing)."""


class ShopHTTPError(BudgetEnvsError):
    """Inside the shop server: a request gets an error answer (status code and message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ---------------------------------------------------------------------- tasks and games
class TaskGenerationError(BudgetEnvsError, RuntimeError):
    """No task meeting the level's constraints was found."""


class GenerationError(BudgetEnvsError, RuntimeError):
    """TextWorld could not make or compile the requested game."""


class GenerationTimeout(GenerationError, TimeoutError):
    """Making a game took longer than the allowed time."""


class GameFileError(BudgetEnvsError, ValueError):
    """A game file that cannot be played: the message names the file and the cause."""


class ExpertError(BudgetEnvsError, RuntimeError):
    """The oracle cannot produce an action (expert timeout, failure, or no plan)."""


# ---------------------------------------------------------------------- training and evaluation
class BudgetExhausted(BudgetEnvsError, RuntimeError):
    """A tool call after the turn budget ran out (TRL shows the message as a tool error)."""


class EpisodeOver(BudgetEnvsError, RuntimeError):
    """A tool call after the episode ended (won or lost)."""


class AgentError(BudgetEnvsError, RuntimeError):
    """The agent could not produce an action (e.g. its endpoint kept failing after retries).

    The runner records the episode as an error, never as a failure of the task.
    """


class PreflightError(AgentError, ConnectionError):
    """An agent's endpoint is unusable before any episode: no server, a bad key, no such model.

    :func:`~budget_envs.eval.runner.run_plan` raises it before writing anything; the CLI prints
    its one-line message and exits with 2.
    """


class DerivationError(BudgetEnvsError, ValueError):
    """A Pass@(K,T) value was asked for that the recorded runs cannot support.

    Raised when a smaller T would have to be derived from budget-visible runs (the agent saw the
    budget, so a run at T_max says nothing about a run at T), or when no run covers T.
    """


class RayUnavailable(BudgetEnvsError, ConnectionError):
    """The Ray back end cannot reach the cluster it was pointed at."""


class ModelPrepareError(BudgetEnvsError, RuntimeError):
    """A language model could not be prepared (no index, a changed file, a failed conversion,
    a name not prepared yet); the message is one line a user can act on."""


class UntrustedPolicy(BudgetEnvsError, ValueError):
    """A policy folder that could only load by unpickling (which can run any code), and the
    caller did not pass ``--trust-policy`` / ``trust=True``; the message says which file."""


class UsageError(BudgetEnvsError, ValueError):
    """A mistake on the command line: ``budgetmix`` prints it as one line and exits with 2."""


class TooManyActions(BudgetEnvsError, ValueError):
    """A state offers more actions than a finite-action policy has slots (``max_actions``)."""


class RecordsWriteError(BudgetEnvsError, OSError):
    """The run's records file cannot grow (a full disk, a file-size limit, a lost mount).

    The torn part of the line being written has been cut off, so every record in the file is
    whole; the message says how many this run wrote and how to finish it (``--resume``).
    """


class OutDirError(BudgetEnvsError, OSError):
    """An output folder (a run's ``--out``, a report's or a comparison's) cannot be used: it is
    read-only, not a directory, or the disk is full.

    Raised before anything half-written is left behind (a config is written atomically); the
    one-line message names the folder or file, the cause and its ``errno`` name. ``errno`` is
    the operating system's and ``path`` the folder or file.
    """


class RunInUse(BudgetEnvsError, RuntimeError):
    """Another process is writing the run folder (it holds the folder's ``.lock``).

    One writer per folder: two evals into one ``--out`` would record every episode twice.
    ``path`` is the folder and ``pid`` the holder's process id (None when it could not be read).
    """

    def __init__(self, message: str, *, path: str = "", pid: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.pid = pid


class PlanMismatch(BudgetEnvsError, ValueError):
    """``--resume`` with a plan other than the one the run's records were made with.

    ``differences`` lists ``(field, recorded, given)``; it is empty when the recorded plan cannot
    be read (a torn ``config.json``) and the records themselves do not belong to the plan given.
    """

    def __init__(
        self, message: str, *, differences: Sequence[tuple[str, object, object]] = ()
    ) -> None:
        super().__init__(message)
        self.differences = list(differences)


class UnknownAgent(BudgetEnvsError, ValueError):
    """An agent name that the run does not hold; the message lists the agents it has
    (``agents``)."""

    def __init__(self, message: str, *, agent: str = "", agents: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.agent = agent
        self.agents = list(agents)


class MessageError(BudgetEnvsError, ValueError):
    """A served env's message has wrong fields (the service answers ``VALIDATION_ERROR``);
    nothing ran and the session is as it was."""


class SessionClosed(BudgetEnvsError, RuntimeError):
    """A served session was closed: it builds no env again (open a new session)."""


class CapacityError(BudgetEnvsError, RuntimeError):
    """A served route's sessions are all taken (``CAPACITY_REACHED``)."""

    def __init__(self, message: str, active: int, maximum: int) -> None:
        super().__init__(message)
        self.active = active
        self.maximum = maximum


class SessionRefused(BudgetEnvsError, RuntimeError):
    """A request names a served session it may not use (unknown, held by a socket, attached
    before)."""
