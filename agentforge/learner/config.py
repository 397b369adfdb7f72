"""The learner's settings (the Hydra `learner` group) and the checks that must pass before any model is built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentforge.errors import ConfigError
from agentforge.schema.options import opt
from agentforge.schema.registry import owns_section

DTYPES = ("float32", "bfloat16")
LR_SCHEDULES = ("constant", "cosine", "linear")
BACKENDS = ("gloo", "nccl", "ccl", "mpi")
PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")  # Ray placement group strategies


@dataclass
class LoraSettings:
    """peft LoRA on the named linear modules (matched by name suffix, as peft does)."""

    enabled: bool = opt(False, "train LoRA adapters instead of the full model (peft)")
    rank: int = opt(16, "adapter rank r", ge=1)
    alpha: float = opt(32, "LoRA alpha (scale alpha / r)", gt=0)
    dropout: float = opt(0.0, "adapter dropout", ge=0, lt=1)
    target_modules: list[str] = opt(["q_proj", "k_proj", "v_proj", "o_proj"], "linear modules to adapt (name "
                                    "suffixes; checked against the model's)")


@dataclass
class LossSettings:
    """The policy objective (ALGORITHMS.md "Policy loss" and "Objective options"; verl's names where it has them).

    `eps_low`/`eps_high` left null take the policy loss's own defaults (`objective.policy`): vanilla 0.2/0.28,
    gspo 3e-4/4e-4, cispo 10/0.2. `agg_mode` (null: token-mean) aggregates every term, except GSPO's policy term,
    always seq-mean-token-mean (as verl).
    KL in the reward (β·KL off each turn's reward before advantages) is a reward stage: `reward.kl`.
    """

    policy_loss: str = opt("vanilla", "vanilla (PPO clip + dual clip) | gspo | cispo | reinforce (= gpg) | "
                                      "pkg.module:function")
    eps_low: float | None = opt(None, "clip 1 - eps_low; null: the policy loss's own (0.2; gspo 3e-4; cispo 10)",
                                ge=0)
    eps_high: float | None = opt(None, "clip 1 + eps_high; null: the policy loss's own (0.28; gspo 4e-4; cispo 0.2)",
                                 ge=0)
    clip_ratio_c: float | None = opt(3.0, "dual clip: a negative-advantage token's loss is at most -c*A (null: off)",
                                     gt=1)
    log_ratio_clamp: float = opt(20.0, "log ratio clamped to +-this before exp", gt=0)
    agg_mode: str | None = opt(None, "token-mean | seq-mean-token-mean | seq-mean-token-sum | "
                                     "seq-mean-token-sum-norm; null: token-mean. GSPO's policy term is always "
                                     "seq-mean-token-mean (verl); this then aggregates its KL and entropy")
    loss_scale_factor: float | None = opt(None, "seq-mean-token-sum-norm's constant L (null: "
                                                "agent.sampling.max_new_tokens)", gt=0)
    kl_coef: float = opt(0.0, "beta of the KL to the reference (the policy RL starts from) in the loss; KL in the "
                              "reward is reward.kl.coef", ge=0)
    kl_estimator: str = opt("k3", "k1 | k2 | k3 | abs | k1+ | k3+ | abs+ (verl's kl, mse, low_var_kl accepted)")
    kl_clamp: float = opt(10.0, "k3's value clamped to +-this", gt=0)
    entropy_coef: float = opt(0.0, "entropy bonus", ge=0)

    def resolved_policy_loss(self) -> str:
        from agentforge.objective.policy_loss import canonical_policy_loss

        return canonical_policy_loss(self.policy_loss)

    def clip_bounds(self) -> tuple[float, float]:
        from agentforge.objective.policy_loss import CLIP_DEFAULTS

        low, high = CLIP_DEFAULTS.get(self.resolved_policy_loss(), CLIP_DEFAULTS["vanilla"])
        return (low if self.eps_low is None else float(self.eps_low),
                high if self.eps_high is None else float(self.eps_high))

    def aggregation(self) -> str:
        """`agg_mode` (token-mean when null, as verl's loss_agg_mode): the KL and entropy terms', and the policy
        term's unless the loss has its own (GSPO: `policy_aggregation`)."""
        return self.agg_mode or "token-mean"

    def policy_aggregation(self) -> str:
        from agentforge.objective.policy_loss import POLICY_AGGREGATION

        return POLICY_AGGREGATION.get(self.resolved_policy_loss(), self.aggregation())

    def needs_reference(self) -> bool:
        """KL in the loss needs the reference policy's log-probs."""
        return self.kl_coef > 0


@dataclass
class CorrectionSettings:
    """Rollout correction (`learner.rollout_correction`; objective.correction): TIS weights and MIS rejection of
    tokens/sequences by the learner-vs-engine importance weight. Needs `learner.old_logprobs: recompute`."""

    is_level: str | None = opt(None, "TIS: token | sequence weights pi_old/pi_engine (null: off)",
                               choices=("token", "sequence", None))
    is_threshold: float = opt(2.0, "TIS truncation C", ge=1)
    rejection: str | None = opt(None, "MIS: drop token | sequence | geometric whose pi_old/pi_engine leaves the "
                                      "band, or verl's token_k1 | seq_sum_k1 | seq_mean_k1 (band on pi_engine/pi_old, "
                                      "per-token log-ratio clamped to +-20) (null: off)",
                                choices=("token", "sequence", "geometric", "token_k1", "seq_sum_k1", "seq_mean_k1",
                                         None))
    rejection_threshold: float = opt(2.0, "the band's upper bound", gt=1)
    rejection_threshold_lower: float | None = opt(None, "the band's lower bound (null: 1 / rejection_threshold)",
                                                  gt=0)

    @property
    def active(self) -> bool:
        return self.is_level is not None or self.rejection is not None


@dataclass
class CriticSettings:
    """The value model an algorithm asks for (`Algorithm.needs_values`, e.g. ppo): the policy's body with a scalar
    head, trained by its own optimizer on the clipped value loss (verl's critic defaults: lr 1e-5, cliprange 0.5)."""

    enabled: bool = opt(False, "train a critic beside the policy (the trainer turns it on for an algorithm that "
                               "needs values, e.g. ppo)")
    lr: float = opt(1e-5, "the critic's learning rate", gt=0)
    cliprange_value: float = opt(0.5, "value clip: V stays within +-this of the values the targets came from",
                                 gt=0)
    weight_decay: float = opt(0.0, "the critic's AdamW weight decay", ge=0)
    grad_clip: float = opt(1.0, "the critic's gradient norm clip (0: off)", ge=0)
    lora: bool | None = opt(None, "LoRA on the critic's body (null: as the policy, learner.lora.enabled)")
    path: str | None = opt(None, "a separate critic: the value model's body from this HF folder (another size of the "
                                 "policy's family, same tokenizer); null: the policy's own folder")
    warmup_iterations: int = opt(0, "first RL iterations in which only the critic trains and the policy stays put "
                                    "(verl's trainer.critic_warmup): advantages from an untrained critic are noise",
                                 ge=0)

    def uses_lora(self, config: LearnerConfig) -> bool:
        return config.lora.enabled if self.lora is None else bool(self.lora)


@dataclass
class TeacherSettings:
    """The teacher of on-policy distillation (`Algorithm.needs_teacher`, e.g. opd): a frozen model on every learner
    rank that scores the student's sampled tokens; its tokenizer must be the student's."""

    path: str | None = opt(None, "the teacher's model folder (an HF folder, or `agentforge export` of a run); null: "
                                 "no teacher")
    dtype: str | None = opt(None, "the teacher's dtype (null: the learner's)",
                            choices=("float32", "bfloat16", "float16", None))
    url: str | None = opt(None, "instead of a folder: an OpenAI-compatible base URL that returns prompt log-probs "
                                "(`agentforge serve`, a vLLM server), e.g. http://127.0.0.1:8000/v1; scored from the "
                                "trainer, `concurrency` requests at a time")
    model: str | None = opt(None, "the model name sent to `url` (null: the first that its /models lists)")
    api_key_env: str | None = opt(None, "the environment variable holding `url`'s API key (never the key itself; "
                                        "agentforge serve's: AGENTFORGE_SERVE_TOKEN); null: none sent")
    concurrency: int = opt(4, "requests to `url` in flight at once", ge=1)
    timeout_s: float = opt(120.0, "seconds one request to `url` may take", gt=0)
    divergence: str = opt("sampled", "sampled (the policy gradient of teacher - student at each sampled token) | "
                                     "forward | reverse | jsd (GKD's divergences on the teacher's top-k tokens at each "
                                     "position, with gradient through the student's distribution; needs `path`)",
                          choices=("sampled", "forward", "reverse", "jsd"))
    top_k: int = opt(20, "the teacher's most likely tokens a divergence is taken over", ge=1)
    jsd_beta: float = opt(0.5, "jsd's β: β·KL(p ‖ m) + (1 − β)·KL(q ‖ m), m = β·p + (1 − β)·q", ge=0, le=1)


@owns_section("learner")
@dataclass
class LearnerConfig:
    """Everything the DeepSpeed learner needs besides the model path.

    `in_process=True` keeps the single rank in the driver process (CPU default); false runs ranks as Ray actors.
    `micro_batch_tokens` bounds the *padded* size (rows x longest row) of one forward pass (a single turn longer
    than it is a micro-batch of its own); one optimizer step always covers every sample given to `step`, however
    many micro-batches that takes. `total_steps` is needed by
    the decaying schedules (`cosine`, `linear`). `backend=None` picks gloo on CPU and nccl on CUDA.
    """

    num_ranks: int = opt(1, "DeepSpeed ranks (Ray actors unless in_process)", ge=1)
    in_process: bool = opt(True, "one rank inside the driver (the CPU default); false: ranks as Ray actors")
    zero_stage: int = opt(0, "DeepSpeed ZeRO stage", choices=(0, 1, 2, 3))
    dtype: str | None = opt("float32", "null: the model's; auto; float32 | bfloat16 (bf16 accumulates in fp32)",
                            choices=(*DTYPES, "auto", None))
    lr: float = opt(1e-5, "learning rate", gt=0)
    weight_decay: float = opt(0.0, "AdamW weight decay (matrices only)", ge=0)
    betas: tuple[float, float] = opt((0.9, 0.999), "AdamW betas, each in [0, 1)")
    warmup_steps: int = opt(0, "linear warmup, in optimizer steps", ge=0)
    lr_schedule: str = opt("constant", "constant | cosine | linear (decaying over total_steps optimizer steps)",
                           choices=LR_SCHEDULES)
    total_steps: int | None = opt(None, "the schedule's length in optimizer steps (the trainer sets it)", ge=1)
    grad_clip: float = opt(1.0, "gradient norm clip (0: off)", ge=0)
    micro_batch_tokens: int = opt(1024, "padded tokens per forward pass (rows x longest row)", ge=2)
    gradient_checkpointing: bool = opt(False, "recompute activations in backward (less memory, slower)")
    sharing: str = opt("prefix", "prefix: samples sharing a token prefix run it once (prefix tree, tree attention "
                                 "mask) | prompt: only identical prompts | none", choices=("prefix", "prompt", "none"))
    skip_zero_advantage: bool = opt(True, "leave samples with advantage exactly 0 out of forward/backward where that "
                                          "is exact (built-in policy loss, no KL in the loss, no entropy bonus)")
    lora: LoraSettings = opt(LoraSettings(), "")
    loss: LossSettings = opt(LossSettings(), "")
    old_logprobs: str = opt("engine", "engine: the rollout engine's log-probs | recompute: the learner's forward "
                                      "before the update", choices=("engine", "recompute"))
    rollout_correction: CorrectionSettings = opt(CorrectionSettings(), "")
    critic: CriticSettings = opt(CriticSettings(), "")
    teacher: TeacherSettings = opt(TeacherSettings(), "")
    keep_reference: bool = opt(False, "compute the reference policy's log-probs without KL in the loss (the trainer "
                                      "sets it for KL in the reward, reward.kl.coef > 0)")
    ppo_epochs: int = opt(1, "passes over each batch (pi_old fixed before the first)", ge=1)
    mini_batch_size: int | None = opt(None, "per optimizer step, in mini_batch_unit (null: the whole batch)", ge=1)
    mini_batch_unit: str = opt("turns", "turns (turn samples) | tokens (loss tokens)", choices=("turns", "tokens"))
    shuffle: bool = opt(True, "seeded mini-batch order each epoch (only when there are several)")
    temperature: float | None = opt(None, "log-probs of logits / T (null: agent.sampling.temperature)", gt=0)
    reduce_bucket_size: float = opt(2e7, "DeepSpeed reduce bucket (elements)", gt=0)
    allgather_bucket_size: float = opt(2e7, "DeepSpeed all-gather bucket (elements)", gt=0)
    seed: int = opt(0, "the learner's seed", ge=0)
    backend: str | None = opt(None, "torch.distributed backend (null: gloo on CPU, nccl on CUDA)",
                              choices=(*BACKENDS, None))
    num_cpus_per_rank: int = opt(1, "CPUs per Ray rank", ge=1)
    placement_strategy: str = opt("PACK", "Ray placement of the ranks: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD "
                                          "(one per node)", choices=PLACEMENT_STRATEGIES)

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
        if "share_prompts" in values:
            raise ConfigError("learner.share_prompts was replaced by learner.sharing: prefix (shared token prefixes "
                              "run once, the default) | prompt (identical prompts only; share_prompts=true) | none "
                              "(share_prompts=false)")
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
        if "critic" in kwargs:
            _reject_unknown("learner.critic", kwargs["critic"], CriticSettings)
            kwargs["critic"] = CriticSettings(**kwargs["critic"])
        if "teacher" in kwargs:
            _reject_unknown("learner.teacher", kwargs["teacher"], TeacherSettings)
            kwargs["teacher"] = TeacherSettings(**kwargs["teacher"])
        if "betas" in kwargs:
            kwargs["betas"] = tuple(kwargs["betas"])
        return cls(**kwargs)

    from_dict = from_mapping

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def needs_reference(self) -> bool:
        """Whether the learner keeps a reference policy: KL in the loss, or in the reward (`keep_reference`)."""
        return self.loss.needs_reference() or self.keep_reference

    @property
    def sampling_temperature(self) -> float:
        return 1.0 if self.temperature is None else float(self.temperature)

    def zero_advantage_skippable(self) -> bool:
        """Whether leaving zero-advantage samples out changes nothing but time: every built-in policy loss is
        A times a finite factor per token, so such a sample adds exactly 0 to the loss and its gradient, as long as no
        term without A is in the loss (KL to the reference, entropy bonus). Denominators still count it."""
        from agentforge.objective.policy_loss import POLICY_LOSSES

        loss = self.loss
        return (self.skip_zero_advantage and self.teacher.divergence == "sampled"
                and loss.resolved_policy_loss() in POLICY_LOSSES.builtin_names()
                and not loss.kl_coef > 0 and loss.entropy_coef == 0)

    def objective_spec(self) -> Any:
        """The loss options resolved (the policy loss's own clip bounds and aggregation where left null)."""
        from agentforge.objective import ClipParams, ObjectiveSpec
        from agentforge.objective.kl import canonical_estimator

        loss = self.loss
        low, high = loss.clip_bounds()
        return ObjectiveSpec(
            policy_loss=loss.resolved_policy_loss(),
            clip=ClipParams(low, high, loss.clip_ratio_c, float(loss.log_ratio_clamp)),
            agg_mode=loss.aggregation(), kl_coef=float(loss.kl_coef),
            kl_estimator=canonical_estimator(loss.kl_estimator),
            kl_clamp=float(loss.kl_clamp), kl_in_loss=True, entropy_coef=float(loss.entropy_coef))

    def correction_spec(self) -> Any:
        from agentforge.objective import CorrectionSpec

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
        """Types, bounds and choices from the schema (the fields' metadata: the one home of those rules), then the
        checks that involve several fields."""
        from agentforge.schema.check import dataclass_problems

        problems = dataclass_problems("learner", self)
        return problems or self._cross_field_problems()

    def _cross_field_problems(self) -> list[str]:
        p: list[str] = []
        if not all(0.0 <= b < 1.0 for b in self.betas):
            p.append(f"learner.betas={list(self.betas)}: each must be in [0, 1)")
        if self.lr_schedule != "constant" and (self.total_steps is None or self.total_steps <= self.warmup_steps):
            p.append(f"learner.lr_schedule={self.lr_schedule!r} decays over total_steps; set total_steps > "
                     f"warmup_steps (got total_steps={self.total_steps}, warmup_steps={self.warmup_steps})")
        if self.in_process and self.num_ranks != 1:
            p.append(f"learner.in_process=true runs one rank inside the driver, but num_ranks={self.num_ranks}; set "
                     "learner.in_process=false to run the ranks as Ray actors")
        if self.lora.enabled and not self.lora.target_modules:
            p.append("learner.lora.target_modules is empty; name the linear modules to adapt, e.g. [q_proj, v_proj]")
        if self.teacher.path and self.teacher.url:
            p.append(f"learner.teacher.path={self.teacher.path!r} and learner.teacher.url={self.teacher.url!r} name "
                     "two teachers; set one of them (path: a model on the learner's ranks; url: a served one)")
        if self.teacher.divergence != "sampled" and not self.teacher.path:
            p.append(f"learner.teacher.divergence={self.teacher.divergence} is taken over the teacher's top-k "
                     "distribution, which needs its logits: set learner.teacher.path (a served teacher returns the "
                     "sampled tokens' log-probs only; use divergence=sampled with learner.teacher.url)")
        if self.teacher.url and self.sampling_temperature != 1.0:
            p.append(f"learner.teacher.url: a served teacher returns raw (temperature 1) prompt log-probs, but the "
                     f"student samples at {self.sampling_temperature:g}; sample at agent.sampling.temperature=1.0, or "
                     "load the teacher on the learner (learner.teacher.path), which scores at any temperature")
        p += _objective_problems(self)
        return p


def _objective_problems(config: LearnerConfig) -> list[str]:
    """The objective's options: names, ranges and combinations (ALGORITHMS.md "Objective options")."""
    from agentforge.objective.aggregate import AGG_MODES
    from agentforge.objective.kl import ALIASES as KL_ALIASES
    from agentforge.objective.kl import ESTIMATORS
    from agentforge.objective.policy_loss import ALIASES, POLICY_LOSSES

    p: list[str] = []
    loss = config.loss
    name = loss.resolved_policy_loss()
    if name not in POLICY_LOSSES and ":" not in name:
        p.append(f"learner.loss.policy_loss={loss.policy_loss!r} is unknown; use one of "
                 f"{', '.join([*POLICY_LOSSES.names(), *ALIASES])} or a plugin as pkg.module:function")
    low, high = loss.clip_bounds()
    if name == "cispo":
        if low < 0 or high < 0:
            p.append(f"learner.loss.eps_low={low} and loss.eps_high={high} must be >= 0 for cispo (eps_low >= 1: "
                     "no lower bound on the IS weight)")
    elif not 0.0 <= low < 1.0 or high < 0.0:
        p.append(f"learner.loss.eps_low={low} must be in [0, 1) and loss.eps_high={high} >= 0 (the ratio is "
                 "clipped to [1 - eps_low, 1 + eps_high])")
    if loss.agg_mode is not None and loss.agg_mode not in AGG_MODES:
        p.append(f"learner.loss.agg_mode={loss.agg_mode!r} is unknown; use one of {', '.join(AGG_MODES)} (or null: "
                 "token-mean)")
    if loss.kl_estimator not in ESTIMATORS and loss.kl_estimator not in KL_ALIASES:
        p.append(f"learner.loss.kl_estimator={loss.kl_estimator!r} is unknown; use one of {', '.join(ESTIMATORS)} "
                 f"(or verl's {', '.join(KL_ALIASES)})")
    rc = config.rollout_correction
    lower = rc.rejection_threshold_lower if rc.rejection_threshold_lower is not None else \
        1.0 / rc.rejection_threshold
    if not lower < 1.0 < rc.rejection_threshold:
        p.append(f"learner.rollout_correction bounds are inverted or empty: rejection_threshold_lower={lower} and "
                 f"rejection_threshold={rc.rejection_threshold} must satisfy 0 < lower < 1 < upper")
    if rc.active and config.old_logprobs != "recompute":
        p.append("learner.rollout_correction weighs tokens by pi_old / pi_engine, which needs the learner's own "
                 "log-probs: set learner.old_logprobs=recompute (with old_logprobs=engine the weight is always 1)")
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
