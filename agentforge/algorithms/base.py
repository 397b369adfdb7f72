"""The Algorithm plugin interface, its registry and `make_algorithm`.

An algorithm is built from its config options (the Hydra `algorithm` group minus `name`), may change how episodes
are produced (its rollout workflow or hooks), and turns finished groups into one advantage per turn (and per
trained span outside the turns). The learner broadcasts a turn's advantage to every
response token of that turn.
"""

from __future__ import annotations

import dataclasses
import keyword
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from agentforge.errors import ConfigError
from agentforge.objective.turns import TurnBatch
from agentforge.registry import Registry
from agentforge.types import Group

if TYPE_CHECKING:
    from agentforge.rollout.hooks import RolloutHooks
    from agentforge.rollout.workflow import RolloutWorkflow


@dataclasses.dataclass
class AlgorithmConfig:
    """Options shared by every algorithm (none yet); subclasses add theirs as dataclass fields."""


class Algorithm:
    """Base class: how episodes are produced (the default multi-turn workflow unless overridden) plus the advantage
    computation.

    Subclasses set `name`, `config_class` (a dataclass of their options with the defaults) and implement
    `compute(batch)`. Advantages come back as one flat float64 array aligned with the turn order
    `for g in groups for τ in g.trajectories for t in τ.turns` (see `objective.turns.iter_turns`).
    After each `compute`, `last_metrics` holds a few scalars worth logging (keys without a prefix).
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = AlgorithmConfig
    # why the algorithm cannot train asynchronously (trainer.asynchronous.max_staleness >= 1), or None when it can
    not_asynchronous: ClassVar[str | None] = None
    # why the algorithm cannot train an external agent through the gateway (env=agent), or None when it can
    not_gateway: ClassVar[str | None] = None
    # the algorithm reads a critic's values (the learner then trains one: learner.critic) and gives per-token
    # advantages through `token_advantages` instead of per-turn ones through `compute`
    needs_values: ClassVar[bool] = False
    # the algorithm reads a teacher's log-probs of the sampled tokens (learner.teacher) and gives per-token advantages
    # through `token_advantages` (on-policy distillation)
    needs_teacher: ClassVar[bool] = False
    # the registered advantage estimator `compute` calls with the algorithm's config (objective.estimators), or None
    # when the algorithm overrides `compute`
    estimator: ClassVar[str | None] = None
    # advantages compare the rollouts of one task's group: a group of one learns nothing (trainer.group_size >= 2)
    group_relative: ClassVar[bool] = False

    @property
    def teacher_is_self(self) -> bool:
        """Self-distillation: the policy's own weights under a privileged context are the teacher (opd teacher=self)."""
        return False

    def __init__(self, **options: Any) -> None:
        self.config = _build_config(self.config_class, options, self.name or type(self).__name__)
        self.last_metrics: dict[str, float] = {}
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError for option values that cannot work; called once at construction."""

    def check_run(self, run: Mapping[str, Any]) -> None:
        """Raise ConfigError when the algorithm cannot train with this run's settings (`run`: the plain `trainer`,
        `agent` and `engine` config groups), e.g. a group size its rollout plan cannot fill. Called by the trainer's
        config validation, before anything expensive starts; default: nothing to check."""

    # ---- rollout: how episodes are produced (StraTA, T2PO, TrajEvolve change it) ----------------------------
    def rollout_hooks(self, purpose: str) -> RolloutHooks | None:
        """Hooks into the default multi-turn workflow for `purpose` (`train`, `eval` or `rollout`); None: plain
        multi-turn play. Override this for changes at the workflow's hook points (see `rollout.hooks`)."""
        return None

    def workflow(self, purpose: str) -> RolloutWorkflow:
        """The rollout workflow for `purpose`. Default: multi-turn play with `rollout_hooks(purpose)`; override
        to produce episodes another way altogether."""
        from agentforge.rollout.multi_turn import MultiTurnWorkflow

        return MultiTurnWorkflow(self.rollout_hooks(purpose))

    # ---- advantages ----------------------------------------------------------------------------------------
    def advantages(self, groups: Sequence[Group]) -> np.ndarray:
        """One advantage per turn, flat, in `iter_turns(groups)` order."""
        return self.compute(TurnBatch.from_groups(groups))

    def compute(self, batch: TurnBatch) -> np.ndarray:
        """The vectorised core: per-turn advantages for a prebuilt batch (flat order); default: the algorithm's
        registered `estimator` over its config."""
        if self.estimator is None:
            raise NotImplementedError(f"algorithm {self.name!r} names no estimator and does not implement compute()")
        from agentforge.objective.estimators import ADVANTAGE_ESTIMATORS

        result = ADVANTAGE_ESTIMATORS.get(self.estimator)(batch, self.config)
        self.last_metrics = result.metrics
        return result.per_turn

    def token_advantages(self, samples: Sequence[Any], owners: Sequence[Any], groups: Sequence[Group],
                         values: Sequence[np.ndarray]) -> np.ndarray:
        """`needs_values` algorithms: set each sample's `token_advantages`, `returns` and `old_values` from the
        critic's `values` (per sample, aligned with its response) and return one advantage per turn, flat in
        `iter_turns` order, for the records. `samples[i]` was made from `owners[i]`, a turn of `groups`."""
        raise NotImplementedError(f"algorithm {self.name!r} sets needs_values but does not implement "
                                  "token_advantages()")

    # ---- state outside the policy (checkpointed with the run) --------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What the algorithm learns across iterations besides the policy (e.g. TrajEvolve's step discriminator),
        saved with each checkpoint; {} (the default) when it learns nothing."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` on resume."""

    def span_advantages(self, groups: Sequence[Group]) -> np.ndarray | None:
        """One advantage per trained span outside the env turns (e.g. StraTA's strategies), flat in
        `learner.batch.iter_trained_spans` order; None when the algorithm's workflow makes none (the default)."""
        return None


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")


def make_algorithm(name_or_cfg: str | Mapping[str, Any]) -> Algorithm:
    """Build an algorithm from its registered name (or `pkg.mod:Class`), or from a config mapping with `name`.

    A mapping (a dict or an OmegaConf DictConfig such as `cfg.algorithm`) gives the options besides `name`.
    """
    import agentforge.algorithms  # noqa: F401  (registers the built-in algorithms)

    if isinstance(name_or_cfg, str):
        name, options = name_or_cfg, {}
    else:
        options = dict(_to_plain_mapping(name_or_cfg))
        if "name" not in options:
            raise ConfigError(
                f"algorithm config {options} has no 'name'; add one, e.g. name: grpo "
                f"(valid: {', '.join(ALGORITHMS.names())})"
            )
        name = options.pop("name")
    cls = ALGORITHMS.get(str(name))
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(
            f"algorithm {name!r} resolves to {cls!r}, which is not an agentforge Algorithm subclass; "
            "point it at a class derived from agentforge.algorithms.Algorithm"
        )
    return cls(**options)


def _to_plain_mapping(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover - hydra (and so omegaconf) is a core dependency
        return cfg
    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return cfg


def _build_config(config_class: type, options: Mapping[str, Any], algorithm: str) -> Any:
    valid = [f.name for f in dataclasses.fields(config_class)]
    options = dict(options)
    for spelled in [name for name in options if keyword.iskeyword(name) and f"{name}_" in valid]:
        # a Python keyword (TJPO's and StraTA's `lambda`) is a `lambda_` field; configs and commands say `lambda`
        if f"{spelled}_" in options:
            raise ConfigError(f"algorithm {algorithm!r}: give `{spelled}` or `{spelled}_`, not both")
        options[f"{spelled}_"] = options.pop(spelled)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for algorithm {algorithm!r}; "
            f"valid options: {', '.join(valid) or '(none)'}"
        )
    return config_class(**options)


# ---- validation helpers for subclasses ---------------------------------------------------------------------------
def check_choice(algorithm: str, option: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"algorithm {algorithm!r}: {option}={value!r} is not one of {', '.join(choices)}")


def check_bool(algorithm: str, option: str, value: Any) -> None:
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"algorithm {algorithm!r}: {option}={value!r} must be true or false")


def check_number(
    algorithm: str, option: str, value: Any, *, low: float | None = None, high: float | None = None,
    low_open: bool = False,
) -> None:
    """A finite real number in [low, high] (or (low, high] with `low_open`)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bounds = f"{'(' if low_open else '['}{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise ConfigError(f"algorithm {algorithm!r}: {option}={value!r} must be a finite number in {bounds}")
