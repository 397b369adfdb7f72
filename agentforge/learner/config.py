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
    """Clipped policy loss coefficients (ALGORITHMS.md "Policy loss")."""

    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.0
    entropy_coef: float = 0.0


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
        if "betas" in kwargs:
            kwargs["betas"] = tuple(kwargs["betas"])
        return cls(**kwargs)

    from_dict = from_mapping

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
        loss = self.loss
        if not 0.0 <= loss.eps_low < 1.0 or loss.eps_high < 0.0:
            p.append(f"loss.eps_low={loss.eps_low} must be in [0, 1) and loss.eps_high={loss.eps_high} >= 0")
        if loss.kl_coef < 0 or loss.entropy_coef < 0:
            p.append("loss.kl_coef and loss.entropy_coef must be >= 0")
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
