"""The `eval:` config block (`agentforge eval`), checked before anything expensive starts, and the decoding-only
baselines it can add."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE
from agentforge.types import SamplingConfig

# baseline name -> (sampling option it changes, the eval setting holding its value, the row suffix)
BASELINES: dict[str, tuple[str, str, str]] = {
    "pp": ("presence_penalty", "presence_penalty", "PP"),
    "rp": ("repetition_penalty", "repetition_penalty", "RP"),
}



@dataclass(frozen=True)
class EvalSettings:
    """The `eval:` config block, checked before anything expensive starts."""

    num_tasks: int = 128
    samples_per_task: int = 8
    temperature: float = 0.4
    split: str = "eval"
    seed_offset: int = 0
    seed: int | None = None
    descriptors: list[str] | str = "auto"
    baselines: list[str] = field(default_factory=list)
    presence_penalty: float = 0.5
    repetition_penalty: float = 1.05
    interventions: bool = False
    intervention_cases: str = "bundled"
    intervention_samples: int | None = None
    label: str | None = None
    output: str | None = None

    @classmethod
    def from_config(cls, node: Any) -> EvalSettings:
        values = dict((OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node) or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown eval option(s) {unknown}; valid options: {', '.join(sorted(known))}")
        if isinstance(values.get("baselines"), str):
            values["baselines"] = [values["baselines"]]
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if int(self.num_tasks) < 1:
            raise ConfigError(f"eval.num_tasks={self.num_tasks} must be >= 1")
        if int(self.samples_per_task) < 1:
            raise ConfigError(f"eval.samples_per_task={self.samples_per_task} must be >= 1 (diversity needs >= 2)")
        if float(self.temperature) < 0:
            raise ConfigError(f"eval.temperature={self.temperature} must be >= 0")
        if self.split not in SPLIT_SEED_BASE:
            raise ConfigError(f"eval.split={self.split!r} is unknown; valid splits: eval (choosing settings), test "
                              "(claims), train (replaying training tasks: not held out)")
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise ConfigError(f"unknown eval baseline(s) {bad}; valid baselines: {', '.join(BASELINES)} (pp: presence "
                              "penalty eval.presence_penalty, rp: repetition penalty eval.repetition_penalty)")
        if self.intervention_samples is not None and int(self.intervention_samples) < 1:
            raise ConfigError(f"eval.intervention_samples={self.intervention_samples} must be >= 1 (or null: "
                              "eval.samples_per_task)")
        if float(self.repetition_penalty) <= 0:
            raise ConfigError(f"eval.repetition_penalty={self.repetition_penalty} must be > 0 (1.0 is off)")



def baseline_sampling(base: SamplingConfig, baseline: str, settings: EvalSettings) -> SamplingConfig:
    option, setting, _ = BASELINES[baseline]
    return replace(base, **{option: float(getattr(settings, setting))})
