"""What a study trains and evaluates: the arms, the families, :class:`StudySpec` and its presets.

:func:`full_spec` is the study of ``docs/study.md``, :func:`quick_spec` the pipeline check of
``budgetmix study --quick`` and :func:`demo_spec` the trained pair of ``budgetmix demo``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from budget_envs.integrations.trainers import study_trainers

#: The arms, in report order: name -> what it is. ``base`` is the starting checkpoint every
#: other arm resumes (imitation of oracle episodes, no RL); the others add PPO under their budget.
ARMS: dict[str, str] = {
    "base": "the starting checkpoint: imitation of oracle episodes, no RL",
    "fixed_generous": "RL at fixed T = generous",
    "fixed_tight": "RL at fixed T = tight",
    "mix": "RL with T uniform over tight..generous (BudgetMix)",
    "mix_log": "RL with T log-uniform over tight..generous (BudgetMix)",
    "process": "RL at fixed T = generous with the ProcessReward signal",
    "imitation": "more oracle imitation from base, as many env steps as an RL arm (no RL)",
}
#: The arm that is the policy every RL arm starts from (evaluated as it is).
BASE = "base"
#: The arm called "RL" in the contrasts (C1, C2, C4).
RL = "fixed_generous"
#: The equal-compute control: more imitation from base, as many env steps as an RL arm.
IMITATION = "imitation"
VISIBILITIES = ("hidden", "remaining")
#: The untrained baseline every arm is evaluated beside (its agent spec is its name).
RANDOM = "random"


def arm_budget(arm: str, tight: int, generous: int) -> int | str:
    """The training budget spec of ``arm`` (a fixed int or a spec string); ``base`` has the
    generous T of the warm start it is."""
    if arm in ("fixed_generous", "process", "base", "imitation"):
        return generous
    if arm == "fixed_tight":
        return tight
    if arm == "mix":
        return f"{tight}..{generous}"
    if arm == "mix_log":
        return f"log:{tight}..{generous}"
    raise ValueError(f"unknown arm {arm!r}; expected one of {list(ARMS)}")


def arm_pmf(arm: str, tight: int, generous: int) -> dict[int, float]:
    """P(T) of the arm's training budget."""
    from budget_envs.wrappers.budget_spec import parse_budget

    spec = parse_budget(arm_budget(arm, tight, generous))
    return {int(t): float(p) for t, p in spec.pmf(0).items()}


def curve_agent(arm: str, steps: int) -> str:
    """The agent name of ``arm``'s checkpoint after ``steps`` env steps (the learning curve)."""
    return f"{arm}~{steps}"


@dataclass(frozen=True)
class Family:
    """One family of the study: where it trains, where it is evaluated, and its budgets.

    ``train_kwargs`` and ``eval_kwargs`` are env constructor kwargs; the eval tasks are not
    among the training tasks (another split or world). ``optimal`` is the typical optimal length
    of the family's tasks (the oracle's cost-to-go at reset), ``tight`` about 1.25x and
    ``generous`` about 3x of it; ``eval_budgets`` is the T grid (about 1, 1.25, 1.5, 2, 3 and 4x),
    played once at its largest T when the budget is hidden (every smaller T follows) and at each
    T when it is visible.

    Training: the base is a warm start of ``warm_start_episodes`` oracle episodes (no random
    turns) fitted for ``warm_start_epochs`` epochs; each RL arm resumes it for ``iterations`` PPO
    iterations of ``batch_size`` env steps (``num_epochs`` passes in minibatches of
    ``minibatch_size``). ``curve_iterations`` are the iterations whose checkpoints the learning
    curve evaluates (:attr:`StudySpec.curve`). ``process_reward`` is the scale of the
    ``process`` arm's ProcessReward signal.

    Evaluation: ``eval_tasks`` unseen tasks x ``eval_samples`` samples without faults (with
    ``probe_states`` single-step probes per task), ``fault_samples`` samples with one fault at
    each of ``fault_turns``, ``visible_samples`` samples per T when the budget is visible.
    """

    name: str
    env_id: str
    train_kwargs: dict[str, Any]
    eval_kwargs: dict[str, Any]
    optimal: int
    tight: int
    generous: int
    eval_budgets: list[int]
    max_actions: int
    warm_start_episodes: int
    warm_start_epochs: int = 4
    iterations: int = 50
    batch_size: int = 1024
    minibatch_size: int = 128
    num_epochs: int = 4
    curve_iterations: list[int] = field(default_factory=lambda: [10, 30])
    process_reward: float = 0.1
    process_max_cost: int | None = None
    lr: float | None = None
    eval_tasks: int = 50
    eval_samples: int = 8
    fault_samples: int = 2
    fault_turns: list[int] = field(default_factory=lambda: [1, 2, 3])
    probe_states: int = 4
    visible_samples: int = 4
    #: Visibility -> the training seeds this family runs, among the spec's (None, or a
    #: visibility left out: all of the spec's): a family kept at fewer seeds than the others.
    seeds: dict[str, list[int]] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.tight < self.generous:
            raise ValueError(
                f"{self.name}: need 1 <= tight < generous, got {self.tight}, {self.generous}"
            )
        grid = sorted(self.eval_budgets)
        if not grid or grid[0] > self.tight or grid[-1] <= self.generous:
            raise ValueError(
                f"{self.name}: eval_budgets must reach tight ({self.tight}) or below and above "
                f"generous ({self.generous}), got {self.eval_budgets!r}"
            )
        if self.tight not in grid or self.generous not in grid:
            raise ValueError(f"{self.name}: eval_budgets must hold tight and generous")
        if any(not 0 < c < self.iterations for c in self.curve_iterations):
            raise ValueError(
                f"{self.name}: curve_iterations must lie in 1..{self.iterations - 1}, "
                f"got {self.curve_iterations!r}"
            )
        if not 1 <= self.fault_samples <= self.eval_samples:
            raise ValueError(f"{self.name}: need 1 <= fault_samples <= eval_samples")

    def steps(self, iterations: int | None = None) -> int:
        """Env steps of ``iterations`` PPO iterations (default: all of them)."""
        return (self.iterations if iterations is None else iterations) * self.batch_size


@dataclass(frozen=True)
class StudySpec:
    """What the study trains and evaluates (see :func:`full_spec` and :func:`quick_spec`).

    ``visible_seeds`` are the seeds run with the budget visible (None: all of ``seeds``);
    ``curve`` is the (family, seed) whose ``fixed_generous`` checkpoints at the family's
    ``curve_iterations`` are evaluated beside the arms (the learning curve; None: none).
    ``trainer`` is a row of the trainer table that the study trains with
    (:func:`~budget_envs.integrations.trainers.study_trainers`): ``"rllib"`` (the action-scoring
    policy) or ``"trl"`` (an LLM policy, trained from ``model``: ``"tiny"``, the offline tiny
    model, or a Hugging Face model name or path).
    """

    families: list[Family]
    arms: list[str] = field(
        default_factory=lambda: ["base", "fixed_generous", "fixed_tight", "mix", "process"]
    )
    visibilities: list[str] = field(default_factory=lambda: list(VISIBILITIES))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    visible_seeds: list[int] | None = None
    gamma: float = 1.0
    lr: float = 3e-4
    entropy_coeff: float = 0.001
    #: Width of the policy network (the study's own value, not ``budgetmix train``'s default,
    #: which may change: every seed of a study trains the same network).
    hidden: int = 128
    #: Adam's learning rate of the warm start (the study's own, as ``hidden``).
    warm_start_lr: float = 1e-3
    #: Remote env runners and envs per runner (the study's own, as ``hidden``: RLlib seeds each
    #: runner's envs from its index, so the runner count is part of what a seed trains).
    env_runners: int = 0
    envs_per_runner: int = 16
    n_boot: int = 2000
    curve: list[Any] | None = None
    trainer: str = "rllib"
    model: str = "tiny"
    #: Reference agents (name -> agent spec, e.g. ``{"oracle": "oracle"}``) evaluated beside the
    #: arms and random in the same runs (same tasks, same episode seeds); not trained.
    references: dict[str, str] = field(default_factory=dict)
    #: Where the language-model arms play in the eval stage (``cuda``; None: the CPU). TRL
    #: trains where accelerate finds a GPU. Not written to ``study.json`` when None.
    device: str | None = None

    def __post_init__(self) -> None:
        if not self.families:
            raise ValueError("a study needs at least one family")
        bad = [a for a in self.arms if a not in ARMS]
        if bad or not self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError(f"arms must be distinct names among {list(ARMS)}, got {self.arms!r}")
        bad = [v for v in self.visibilities if v not in VISIBILITIES]
        if bad or not self.visibilities:
            raise ValueError(
                f"visibilities must be among {VISIBILITIES}, got {self.visibilities!r}"
            )
        if not self.seeds:
            raise ValueError("a study needs at least one seed")
        if self.visible_seeds is not None and not set(self.visible_seeds) <= set(self.seeds):
            raise ValueError(f"visible_seeds must be among seeds {self.seeds!r}")
        if self.trainer not in study_trainers():
            raise ValueError(
                f"trainer must be one the study trains with {study_trainers()}, "
                f"got {self.trainer!r}"
            )
        if self.device is not None and (self.trainer != "trl" or not self.device):
            raise ValueError(f"device {self.device!r} needs trainer 'trl' (a language model)")
        if self.curve is not None:
            for fam, seed in self.curves:
                fams = {f.name: f for f in self.families}
                if fam not in fams or seed not in self.seeds_for("hidden", fams[fam]):
                    raise ValueError(
                        f"curve must be [family, seed] of the study, or a list of them, got "
                        f"{self.curve!r}"
                    )
            if RL not in self.arms:
                raise ValueError(f"a learning curve needs the {RL} arm")
        taken = {*ARMS, RANDOM}
        bad = [n for n in self.references if n in taken or "@s" in n or "~" in n or not n]
        if bad:
            raise ValueError(
                f"reference agent names must be new, non-empty and free of '@s' and '~', "
                f"got {bad!r}"
            )

    @property
    def agents(self) -> list[str]:
        """The agents of every eval run, in report order: the arms, random, the references."""
        return [*self.arms, RANDOM, *self.references]

    @property
    def rl_arms(self) -> list[str]:
        """The arms that train with PPO (every arm but ``base`` and ``imitation``)."""
        return [a for a in self.arms if a not in (BASE, IMITATION)]

    def seeds_for(self, visibility: str, fam: Family | None = None) -> list[int]:
        """The training seeds run with ``visibility`` (in ``fam`` when given: its own
        ``seeds`` of that visibility, when it has them, among the spec's)."""
        if visibility == "hidden" or self.visible_seeds is None:
            seeds = list(self.seeds)
        else:
            seeds = [s for s in self.seeds if s in self.visible_seeds]
        if fam is not None and fam.seeds is not None and visibility in fam.seeds:
            seeds = [s for s in seeds if s in fam.seeds[visibility]]
        return seeds

    @property
    def curves(self) -> list[tuple[str, int]]:
        """The (family, seed) pairs of the learning curves: ``curve`` is one pair or a list."""
        if self.curve is None:
            return []
        if len(self.curve) == 2 and isinstance(self.curve[0], str):
            return [(str(self.curve[0]), int(self.curve[1]))]
        return [(str(f), int(s)) for f, s in self.curve]

    def curve_points(self, fam: Family, seed: int) -> list[int]:
        """The curve's checkpoint iterations for (``fam``, ``seed``) (empty off the curves)."""
        if (fam.name, seed) not in self.curves:
            return []
        return sorted(fam.curve_iterations)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["device"] is None:  # the CPU: study.json as before the field existed
            del data["device"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudySpec:
        """The spec :meth:`to_json` wrote (``study.json`` of a study folder)."""
        fields = dict(data)
        fields["families"] = [Family(**f) for f in data["families"]]
        return cls(**fields)


def _tooluse(**sizes: Any) -> Family:
    """ToolUse level 1, trained in world 0 and evaluated in world 1 (unseen tasks): the family
    of the quick check and the demo; ``sizes`` gives its budgets and run sizes."""
    return Family(
        name="tooluse",
        env_id="BudgetMix/ToolUse-v0",
        train_kwargs={"level": 1, "world_seed": 0},
        eval_kwargs={"level": 1, "world_seed": 1},
        max_actions=256,
        **sizes,
    )


def full_spec() -> StudySpec:
    """The full study as study/PREREGISTRATION.md states it: ALFWorld small scenes and WebShop
    level 2 (where episodes end by budget and errors are recoverable; the claimed families) and
    ToolUse level 1 (where they are not: kept at its first five hidden and two visible seeds,
    in the tables, left out of the claims when its budget never binds); six arms (the imitation
    control included), eight seeds with the budget hidden and five with it visible, eight fault
    samples per task; learning curves on WebShop seed 0 and on seeds 5-7 of both claimed
    families."""
    return StudySpec(
        families=[
            Family(
                name="alfworld",
                env_id="BudgetMix/ALFWorld-v0",
                train_kwargs={"level": 1, "tasks_per_level": 100, "max_receptacles": 12},
                eval_kwargs={
                    "level": 1,
                    "tasks_per_level": 50,
                    "split": "valid_seen",
                    "max_receptacles": 12,
                },
                optimal=5,
                tight=6,
                generous=15,
                eval_budgets=[5, 6, 8, 10, 15, 20],
                max_actions=128,
                warm_start_episodes=100,
                warm_start_epochs=8,
                lr=1e-4,
                fault_samples=8,
            ),
            Family(
                name="webshop",
                env_id="BudgetMix/WebShop-v0",
                train_kwargs={"level": 2, "tasks_per_level": 400},
                eval_kwargs={"level": 2, "tasks_per_level": 50, "split": "test"},
                optimal=5,
                tight=6,
                generous=15,
                eval_budgets=[5, 6, 8, 10, 15, 20],
                max_actions=256,
                warm_start_episodes=200,
                warm_start_epochs=9,
                fault_samples=8,
            ),
            _tooluse(
                optimal=4,
                tight=5,
                generous=12,
                eval_budgets=[4, 5, 6, 8, 12, 16],
                warm_start_episodes=60,
                warm_start_epochs=10,
                seeds={"hidden": [0, 1, 2, 3, 4], "remaining": [0, 1]},
            ),
        ],
        arms=["base", "fixed_generous", "fixed_tight", "mix", "process", "imitation"],
        seeds=[0, 1, 2, 3, 4, 5, 6, 7],
        visible_seeds=[0, 1, 2, 3, 4],
        curve=[["webshop", 0]] + [[f, s] for f in ("alfworld", "webshop") for s in (5, 6, 7)],
    )


def quick_spec() -> StudySpec:
    """The pipeline check: ToolUse level 1, base, three RL arms and the imitation control,
    budget hidden, one seed,
    tiny training and evaluation (every stage and table runs, nothing is measured)."""
    return StudySpec(
        families=[
            _tooluse(
                optimal=4,
                tight=5,
                generous=12,
                eval_budgets=[4, 5, 8, 12, 14],
                warm_start_episodes=20,
                warm_start_epochs=2,
                iterations=2,
                batch_size=64,
                minibatch_size=64,
                num_epochs=1,
                curve_iterations=[1],
                eval_tasks=3,
                eval_samples=2,
                fault_samples=1,
                fault_turns=[1, 2],
                probe_states=2,
            )
        ],
        arms=["base", "fixed_generous", "fixed_tight", "mix", "imitation"],
        visibilities=["hidden"],
        seeds=[0],
        n_boot=200,
        curve=["tooluse", 0],
    )


def demo_spec(**sizes: Any) -> StudySpec:
    """The demo's trained trio on ToolUse level 1: ``base`` (a short imitation warm start),
    ``fixed_generous`` (PPO at T=12 from it) and ``mix`` (PPO with T uniform over 3..12).

    Budget hidden, one seed, trained in world 0 and evaluated on 20 tasks x 4 samples of world 1
    (unseen), beside the random, oracle and oracle-eps0.3 agents on the same tasks and episode
    seeds. ``tight`` is 3, the shortest optimal length of the level-1 tasks: the policy ends its
    episodes in about 3 turns, so with T drawn over 5..12 no training episode would meet its
    budget. ``sizes`` overrides :class:`Family` fields (smaller runs in tests), e.g.
    ``demo_spec(warm_start_episodes=20, iterations=2)``.
    """
    fam = _tooluse(
        optimal=3,
        tight=3,
        generous=12,
        eval_budgets=[2, 3, 4, 5, 6, 8, 10, 12, 14],
        warm_start_episodes=40,
        warm_start_epochs=10,
        iterations=12,
        batch_size=1024,
        curve_iterations=[4],
        eval_tasks=20,
        eval_samples=4,
        fault_samples=1,
        fault_turns=[2],
        probe_states=2,
    )
    try:
        fam = replace(fam, **sizes)
    except TypeError as exc:
        raise ValueError(f"demo_spec: bad size override {sizes!r}: {exc}") from None
    return StudySpec(
        families=[fam],
        arms=["base", "fixed_generous", "mix"],
        visibilities=["hidden"],
        seeds=[0],
        n_boot=1000,
        references={"oracle": "oracle", "oracle-eps0.3": "oracle:epsilon=0.3"},
    )
