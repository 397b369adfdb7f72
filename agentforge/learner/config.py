"""The learner's settings (the Hydra `learner` group) and the checks that must pass before any model is built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentforge.errors import ConfigError

DTYPES = ("float32", "bfloat16")
LR_SCHEDULES = ("constant", "cosine", "linear")
BACKENDS = ("gloo", "nccl", "ccl", "mpi")
PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")  # Ray placement group strategies


@dataclass
class LoraSettings:
    """peft LoRA on the named linear modules (matched by name suffix, as peft does)."""

    enabled: bool = False
    rank: int = 16
    alpha: float = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class LossSettings:
    """The policy objective (ALGORITHMS.md "Policy loss" and "Objective options"; verl's names where it has them).

    `eps_low`/`eps_high` and `agg_mode` left null take the policy loss's own defaults (`objective.policy`):
    vanilla 0.2/0.28 token-mean (today's loss), gspo 3e-4/4e-4 seq-mean-token-mean, cispo 10/0.2 token-mean.
    `kl_in: reward` subtracts β·KL from each turn's reward before advantages instead of adding it to the loss;
    `kl_target` then makes β adaptive (Ziegler et al. 2019's controller, as verl's `kl_ctrl.type: adaptive`).
    """

    policy_loss: str = "vanilla"
    eps_low: float | None = None
    eps_high: float | None = None
    clip_ratio_c: float | None = 3.0
    log_ratio_clamp: float = 20.0
    agg_mode: str | None = None
    loss_scale_factor: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_clamp: float = 10.0
    kl_in: str = "loss"
    kl_target: float | None = None
    kl_horizon: int = 10000
    entropy_coef: float = 0.0

    def resolved_policy_loss(self) -> str:
        from agentforge.learner.objective.policy import canonical_policy_loss

        return canonical_policy_loss(self.policy_loss)

    def clip_bounds(self) -> tuple[float, float]:
        from agentforge.learner.objective.policy import CLIP_DEFAULTS

        low, high = CLIP_DEFAULTS.get(self.resolved_policy_loss(), CLIP_DEFAULTS["vanilla"])
        return (low if self.eps_low is None else float(self.eps_low),
                high if self.eps_high is None else float(self.eps_high))

    def aggregation(self) -> str:
        from agentforge.learner.objective.policy import DEFAULT_AGGREGATION

        return self.agg_mode or DEFAULT_AGGREGATION.get(self.resolved_policy_loss(), "token-mean")

    def needs_reference(self) -> bool:
        return self.kl_coef > 0


@dataclass
class CorrectionSettings:
    """Rollout correction (`learner.rollout_correction`; objective.correction): TIS weights and MIS rejection of
    tokens/sequences by the learner-vs-engine importance weight. Needs `learner.old_logprobs: recompute`."""

    is_level: str | None = None
    is_threshold: float = 2.0
    rejection: str | None = None
    rejection_threshold: float = 2.0
    rejection_threshold_lower: float | None = None

    @property
    def active(self) -> bool:
        return self.is_level is not None or self.rejection is not None


@dataclass
class LearnerConfig:
    """Everything the DeepSpeed learner needs besides the model path.

    `in_process=True` keeps the single rank in the driver process (CPU default); false runs ranks as Ray actors.
    `micro_batch_tokens` bounds the *padded* size (rows x longest row) of one forward pass (a single turn longer
    than it is a micro-batch of its own); one optimizer step always covers every sample given to `step`, however
    many micro-batches that takes. `total_steps` is needed by
    the decaying schedules (`cosine`, `linear`). `backend=None` picks gloo on CPU and nccl on CUDA.
    """

    num_ranks: int = 1
    in_process: bool = True
    zero_stage: int = 0
    dtype: str = "float32"
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    lr_schedule: str = "constant"
    total_steps: int | None = None
    grad_clip: float = 1.0
    micro_batch_tokens: int = 1024
    gradient_checkpointing: bool = False
    share_prompts: bool = True  # samples with identical prompt ids: the prompt computed once (learner.packing)
    lora: LoraSettings = field(default_factory=LoraSettings)
    loss: LossSettings = field(default_factory=LossSettings)
    old_logprobs: str = "engine"  # engine: the rollout engine's; recompute: the learner's forward before the update
    rollout_correction: CorrectionSettings = field(default_factory=CorrectionSettings)
    ppo_epochs: int = 1
    mini_batch_size: int | None = None  # per optimizer step, in mini_batch_unit; None: the whole batch
    mini_batch_unit: str = "turns"  # turns (turn samples) | tokens (loss tokens)
    shuffle: bool = True  # mini-batches drawn in a seeded random order each epoch (only when there are several)
    temperature: float | None = None  # log-probs of logits / T; None: 1 (the trainer passes the sampling temperature)
    reduce_bucket_size: float = 2e7
    allgather_bucket_size: float = 2e7
    seed: int = 0
    backend: str | None = None
    num_cpus_per_rank: int = 1
    placement_strategy: str = "PACK"  # how Ray places the ranks' bundles over nodes; STRICT_SPREAD: one per node

    def __post_init__(self) -> None:
        # `auto`: bf16 where the hardware computes it natively, else float32 (agentforge.hardware); a composed config
        # arrives resolved, a LearnerConfig built by hand may still say auto
        if self.dtype in (None, "auto"):
            from agentforge.hardware import resolve_dtype

            self.dtype = resolve_dtype("auto", key="learner.dtype")[0]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> LearnerConfig:
        """Build from a plain or OmegaConf mapping (the Hydra `learner` group); unknown keys are errors."""
        values = _to_plain(values or {})
        _reject_unknown("learner", values, cls)
        kwargs = dict(values)
        if "lora" in kwargs:
            _reject_unknown("learner.lora", kwargs["lora"], LoraSettings)
            kwargs["lora"] = LoraSettings(**kwargs["lora"])
        if "loss" in kwargs:
            _reject_unknown("learner.loss", kwargs["loss"], LossSettings)
            kwargs["loss"] = LossSettings(**kwargs["loss"])
        if "rollout_correction" in kwargs:
            _reject_unknown("learner.rollout_correction", kwargs["rollout_correction"], CorrectionSettings)
            kwargs["rollout_correction"] = CorrectionSettings(**kwargs["rollout_correction"])
        if "betas" in kwargs:
            kwargs["betas"] = tuple(kwargs["betas"])
        return cls(**kwargs)

    from_dict = from_mapping

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def sampling_temperature(self) -> float:
        return 1.0 if self.temperature is None else float(self.temperature)

    def objective_spec(self) -> Any:
        """The loss options resolved (the policy loss's own clip bounds and aggregation where left null)."""
        from agentforge.learner.objective import ClipParams, ObjectiveSpec
        from agentforge.learner.objective.kl import canonical_estimator

        loss = self.loss
        low, high = loss.clip_bounds()
        return ObjectiveSpec(
            policy_loss=loss.resolved_policy_loss(),
            clip=ClipParams(low, high, loss.clip_ratio_c, float(loss.log_ratio_clamp)),
            agg_mode=loss.aggregation(), kl_coef=float(loss.kl_coef),
            kl_estimator=canonical_estimator(loss.kl_estimator),
            kl_clamp=float(loss.kl_clamp), kl_in_loss=loss.kl_in == "loss", entropy_coef=float(loss.entropy_coef))

    def correction_spec(self) -> Any:
        from agentforge.learner.objective import CorrectionSpec

        rc = self.rollout_correction
        upper = float(rc.rejection_threshold)
        lower = float(rc.rejection_threshold_lower) if rc.rejection_threshold_lower is not None else 1.0 / upper
        return CorrectionSpec(rc.is_level, float(rc.is_threshold), rc.rejection, lower, upper)

    def validate_for_model(self, model_path: str) -> LearnerConfig:
        """`validate` against the model folder's config (LoRA targets must be its linear modules)."""
        return self.validate(model_path)

    def validate(self, model_config: Any = None) -> LearnerConfig:
        """Raise ConfigError naming the problem and its fix; `model_config` (an HF config or model folder)
        lets the LoRA target modules be checked against the real module names. Returns self."""
        problems = self._value_problems()
        if not problems and self.lora.enabled and model_config is not None:
            problems += _lora_target_problems(self.lora.target_modules, model_config)
        if problems:
            raise ConfigError("invalid learner config:\n  - " + "\n  - ".join(problems))
        return self

    def _value_problems(self) -> list[str]:
        p: list[str] = []
        if not isinstance(self.num_ranks, int) or self.num_ranks < 1:
            p.append(f"num_ranks={self.num_ranks} must be an integer >= 1")
        if self.zero_stage not in (0, 1, 2, 3):
            p.append(f"zero_stage={self.zero_stage} is out of range; use 0, 1, 2 or 3")
        if self.dtype not in DTYPES:
            p.append(f"dtype={self.dtype!r} is not supported; use auto (bfloat16 where the hardware computes it "
                     f"natively, else float32) or one of {', '.join(DTYPES)}")
        if not self.lr > 0:
            p.append(f"lr={self.lr} must be > 0")
        if self.weight_decay < 0:
            p.append(f"weight_decay={self.weight_decay} must be >= 0")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            p.append(f"betas={self.betas} must be two values in [0, 1)")
        if self.warmup_steps < 0:
            p.append(f"warmup_steps={self.warmup_steps} must be >= 0")
        if self.lr_schedule not in LR_SCHEDULES:
            p.append(f"lr_schedule={self.lr_schedule!r} is unknown; use one of {', '.join(LR_SCHEDULES)}")
        elif self.lr_schedule != "constant" and (self.total_steps is None or self.total_steps <= self.warmup_steps):
            p.append(f"lr_schedule={self.lr_schedule!r} decays over total_steps; set total_steps > warmup_steps "
                     f"(got total_steps={self.total_steps}, warmup_steps={self.warmup_steps})")
        if self.grad_clip < 0:
            p.append(f"grad_clip={self.grad_clip} must be >= 0 (0 disables clipping)")
        if self.micro_batch_tokens < 2:
            p.append(f"micro_batch_tokens={self.micro_batch_tokens} must be >= 2")
        if self.reduce_bucket_size <= 0 or self.allgather_bucket_size <= 0:
            p.append("reduce_bucket_size and allgather_bucket_size must be > 0")
        if self.backend is not None and self.backend not in BACKENDS:
            p.append(f"backend={self.backend!r} is unknown; use null (auto) or one of {', '.join(BACKENDS)}")
        if self.in_process and self.num_ranks != 1:
            p.append(f"in_process=true runs one rank inside the driver, but num_ranks={self.num_ranks}; set "
                     "learner.in_process=false to run the ranks as Ray actors")
        if self.num_cpus_per_rank < 1:
            p.append(f"num_cpus_per_rank={self.num_cpus_per_rank} must be >= 1")
        if self.placement_strategy not in PLACEMENT_STRATEGIES:
            p.append(f"placement_strategy={self.placement_strategy!r} is unknown; use one of "
                     f"{', '.join(PLACEMENT_STRATEGIES)}")
        if self.lora.enabled:
            if self.lora.rank < 1:
                p.append(f"lora.rank={self.lora.rank} must be >= 1")
            if not 0.0 <= self.lora.dropout < 1.0:
                p.append(f"lora.dropout={self.lora.dropout} must be in [0, 1)")
            if not self.lora.target_modules:
                p.append("lora.target_modules is empty; name the linear modules to adapt, e.g. [q_proj, v_proj]")
        p += _objective_problems(self)
        return p


def _objective_problems(config: LearnerConfig) -> list[str]:
    """The objective's options: names, ranges and combinations (ALGORITHMS.md "Objective options")."""
    from agentforge.learner.objective.aggregate import AGG_MODES
    from agentforge.learner.objective.correction import IS_LEVELS, REJECTION_LEVELS
    from agentforge.learner.objective.kl import ALIASES as KL_ALIASES
    from agentforge.learner.objective.kl import ESTIMATORS
    from agentforge.learner.objective.policy import ALIASES, POLICY_LOSSES

    p: list[str] = []
    loss = config.loss
    name = loss.resolved_policy_loss()
    if name not in POLICY_LOSSES and ":" not in name:
        p.append(f"loss.policy_loss={loss.policy_loss!r} is unknown; use one of "
                 f"{', '.join([*POLICY_LOSSES.names(), *ALIASES])} or a plugin as pkg.module:function")
    low, high = loss.clip_bounds()
    if name == "cispo":
        if low < 0 or high < 0:
            p.append(f"loss.eps_low={low} and loss.eps_high={high} must be >= 0 for cispo (eps_low >= 1: no lower "
                     "bound on the IS weight)")
    elif not 0.0 <= low < 1.0 or high < 0.0:
        p.append(f"loss.eps_low={low} must be in [0, 1) and loss.eps_high={high} >= 0 (the ratio is clipped to "
                 "[1 - eps_low, 1 + eps_high])")
    if loss.clip_ratio_c is not None and not loss.clip_ratio_c > 1.0:
        p.append(f"loss.clip_ratio_c={loss.clip_ratio_c} must be > 1 (dual clip bounds a negative-advantage token's "
                 "loss by -c*A; verl's default 3.0) or null to turn the dual clip off")
    if not loss.log_ratio_clamp > 0 or not loss.kl_clamp > 0:
        p.append(f"loss.log_ratio_clamp={loss.log_ratio_clamp} and loss.kl_clamp={loss.kl_clamp} must be > 0")
    if loss.agg_mode is not None and loss.agg_mode not in AGG_MODES:
        p.append(f"loss.agg_mode={loss.agg_mode!r} is unknown; use one of {', '.join(AGG_MODES)} (or null: the "
                 "policy loss's own)")
    if loss.loss_scale_factor is not None and not loss.loss_scale_factor > 0:
        p.append(f"loss.loss_scale_factor={loss.loss_scale_factor} must be > 0 (null: the response budget, "
                 "agent.sampling.max_new_tokens)")
    if loss.kl_estimator not in ESTIMATORS and loss.kl_estimator not in KL_ALIASES:
        p.append(f"loss.kl_estimator={loss.kl_estimator!r} is unknown; use one of {', '.join(ESTIMATORS)} "
                 f"(or verl's {', '.join(KL_ALIASES)})")
    if loss.kl_coef < 0 or loss.entropy_coef < 0:
        p.append("loss.kl_coef and loss.entropy_coef must be >= 0")
    if loss.kl_in not in ("loss", "reward"):
        p.append(f"loss.kl_in={loss.kl_in!r} is unknown; use loss (a KL term in the loss) or reward (beta*KL "
                 "subtracted from each turn's reward before advantages)")
    if loss.kl_target is not None and (loss.kl_in != "reward" or not loss.kl_target > 0):
        p.append(f"loss.kl_target={loss.kl_target} is the adaptive controller's target KL: it needs "
                 "loss.kl_in=reward and a value > 0 (null: a fixed coefficient)")
    if loss.kl_horizon < 1:
        p.append(f"loss.kl_horizon={loss.kl_horizon} must be >= 1")
    if config.old_logprobs not in ("engine", "recompute"):
        p.append(f"old_logprobs={config.old_logprobs!r} is unknown; use engine (the rollout engine's log-probs) or "
                 "recompute (the learner's own forward before the update)")
    if not isinstance(config.ppo_epochs, int) or config.ppo_epochs < 1:
        p.append(f"ppo_epochs={config.ppo_epochs} must be an integer >= 1")
    if config.mini_batch_size is not None and (not isinstance(config.mini_batch_size, int)
                                               or config.mini_batch_size < 1):
        p.append(f"mini_batch_size={config.mini_batch_size} must be an integer >= 1 (null: the whole batch)")
    if config.mini_batch_unit not in ("turns", "tokens"):
        p.append(f"mini_batch_unit={config.mini_batch_unit!r} is unknown; use turns or tokens")
    if config.temperature is not None and not config.temperature > 0:
        p.append(f"temperature={config.temperature} must be > 0 (null: the sampling temperature)")
    rc = config.rollout_correction
    if rc.is_level is not None and rc.is_level not in IS_LEVELS:
        p.append(f"rollout_correction.is_level={rc.is_level!r} is unknown; use token, sequence or null")
    if rc.rejection is not None and rc.rejection not in REJECTION_LEVELS:
        p.append(f"rollout_correction.rejection={rc.rejection!r} is unknown; use token, sequence, geometric or null")
    if not rc.is_threshold >= 1.0:
        p.append(f"rollout_correction.is_threshold={rc.is_threshold} must be >= 1 (weights are truncated at it)")
    lower = rc.rejection_threshold_lower if rc.rejection_threshold_lower is not None else \
        1.0 / rc.rejection_threshold if rc.rejection_threshold > 0 else 0.0
    if not (0 < lower < 1.0 < rc.rejection_threshold):
        p.append(f"rollout_correction bounds are inverted or empty: rejection_threshold_lower={lower} and "
                 f"rejection_threshold={rc.rejection_threshold} must satisfy 0 < lower < 1 < upper")
    if rc.active and config.old_logprobs != "recompute":
        p.append("rollout_correction weighs tokens by pi_old / pi_engine, which needs the learner's own log-probs: "
                 "set learner.old_logprobs=recompute (with old_logprobs=engine the weight is always 1)")
    return p


def linear_module_names(model_config: Any) -> list[str]:
    """The short names of the model's nn.Linear modules (e.g. q_proj, gate_proj), built on the meta device so
    even a 7B model costs no memory or time."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_config) if isinstance(model_config, str) else model_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


def _lora_target_problems(targets: list[str], model_config: Any) -> list[str]:
    available = linear_module_names(model_config)
    missing = [t for t in targets if t.rsplit(".", 1)[-1] not in available]
    if not missing:
        return []
    return [f"lora.target_modules {missing} are not linear modules of this model; its linear modules are: "
            f"{', '.join(available)}"]


def _to_plain(values: Any) -> dict[str, Any]:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(values, DictConfig):
            return OmegaConf.to_container(values, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - hydra is a hard dependency
        pass
    return {k: (_to_plain(v) if isinstance(v, Mapping) else v) for k, v in dict(values).items()}


def _reject_unknown(where: str, values: Mapping[str, Any], cls: type) -> None:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {where} option(s) {unknown}; valid options: {', '.join(sorted(known))}")
