"""One learner rank: a DeepSpeed engine that runs one optimizer step per batch of turn samples.

Why it looks the way it does:
- The optimizer is a torch AdamW passed *into* `deepspeed.initialize` (an optimizer named in the DS config builds
  FusedAdam from source, ~170 s on CPU), and so is the LR scheduler; DeepSpeed still does ZeRO partitioning, bf16
  master weights, gradient clipping (`gradient_clipping`) and the data-parallel reduction.
- One `step(samples)` is one optimizer step, however many micro-batches the samples need. The accumulation
  boundary is set explicitly per micro-batch and `backward(..., scale_wrt_gas=False)` keeps DeepSpeed from
  dividing the loss again. The loss is the token-level mean over the whole batch (all micro-batches, all ranks):
  each micro-batch's token sum is divided by total_tokens / world_size, because DeepSpeed *averages* gradients
  over the data-parallel ranks.
- Every rank runs the same number of forward/backward passes (ZeRO-2/3 communicate inside them), so ranks agree
  on the micro-batch count first and pad with zero-loss micro-batches.
- Non-finite inputs or losses skip the update on every rank (no optimizer or scheduler step) and report why.
- bf16 accumulates gradients and keeps master weights and optimizer state in fp32 (`data_types.grad_accum_dtype`):
  DeepSpeed supports that through its BF16 optimizer (the ZeRO-1 path) or ZeRO-2/3, so bf16 with `zero_stage: 0`
  runs as stage 1 (on one rank it partitions nothing).
- The reference policy (KL) is the policy RL starts from: `reset_reference()` after a warm start copies the current
  weights (full model: a frozen copy, one more set of weights per rank; LoRA: the adapter tensors only, swapped in
  for the reference forward, no second model).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentforge.errors import AgentforgeError
from agentforge.learner.batch import TurnSample, batch_statistics, total_loss_tokens
from agentforge.learner.config import LearnerConfig
from agentforge.learner.deepspeed_setup import (
    deepspeed_config,
    forget_stale_deepspeed_groups,
    lr_factor,
    prepare_process_env,
)
from agentforge.learner.lora import (
    wrap_with_lora,
)
from agentforge.learner.packing import (
    PackedBatch,
    collate_packed,
    pack_micro_batches,
    packed_logits,
    padding_batch,
    padding_stats,
    per_token_results,
    token_logprobs,
)
from agentforge.learner.rank_checkpoint import load_rank, save_rank
from agentforge.learner.rank_reference import RankReference
from agentforge.learner.rank_weights import RankWeights
from agentforge.objective import Normalizer, policy_objective
from agentforge.reliability.faultpoints import fault_point

log = logging.getLogger(__name__)

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Micro-batch metrics averaged over loss tokens (the others are maxima or per-step values).
TOKEN_MEAN_METRICS = ("loss", "pg_loss", "clip_fraction", "clip_fraction_low", "clip_fraction_high",
                      "clip_fraction_dual", "approx_kl", "logprob_mismatch", "entropy", "kl_ref", "is_weight")
SKIP_EXACT_METRICS = ("loss", "pg_loss")  # means over every loss token, skipped zero-advantage ones included
COMPUTED_TOKENS = "_computed_tokens"
COUNT_PREFIX = "count/"  # raw counts (per-stratum clip counts): summed over micro-batches, steps and ranks


def is_count(name: str) -> bool:
    return name.startswith(COUNT_PREFIX)


class DeepSpeedLearnerRank(RankReference, RankWeights):
    """One DeepSpeed rank. In a multi-rank world every public method is collective: call it on all ranks.

    With `loss.kl_coef > 0` the rank keeps a reference policy, the model as loaded until `reset_reference()` makes it
    the current policy (the trainer calls it after a warm start, so KL pulls toward the policy RL starts from).
    Without LoRA it is a frozen copy: one more full set of weights per rank (not partitioned by ZeRO-3). With LoRA
    it is a copy of the adapter tensors only (r·(d_in + d_out) per adapted module), swapped into the model for the
    reference forward; with ZeRO-3 (partitioned adapters) the reference is the base model (adapters off) and
    cannot be moved.
    """

    def __init__(self, model_path: str, config: LearnerConfig, rank: int = 0, world_size: int = 1,
                 master_addr: str = "127.0.0.1", master_port: int | None = None, local_rank: int | None = None):
        config.validate(model_path)
        self.model_path = str(model_path)
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.steps = 0
        prepare_process_env(rank, world_size, master_addr, master_port, local_rank)
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        self._deepspeed = deepspeed
        backend = config.backend or get_accelerator().communication_backend_name()
        if backend == "ccl" and get_accelerator().device_name() == "cpu":
            backend = "gloo"  # the CPU accelerator names oneCCL; gloo needs no extra install
        if not torch.distributed.is_initialized():
            deepspeed.init_distributed(dist_backend=backend)
        forget_stale_deepspeed_groups()
        if torch.distributed.get_world_size() != world_size:
            raise AgentforgeError(f"this process already belongs to a torch.distributed world of size "
                                  f"{torch.distributed.get_world_size()}, not {world_size}; run multi-rank "
                                  "learners as Ray actors (in_process=False)")
        torch.manual_seed(config.seed)
        model = self._load_model()
        self.reference = self._reference_copy(model)
        self.reference_adapter: dict[str, torch.Tensor] | None = None  # LoRA: the reference's adapter tensors
        self.reference_moved = False  # reset_reference() made it differ from the model as loaded
        self.objective = config.objective_spec()
        if config.lora.enabled:
            model = wrap_with_lora(model, config.lora)
        optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr,
                                      betas=tuple(config.betas), weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config))
        # DeepSpeed's BF16 optimizer prints memory reports with print(): into the log, not onto the console
        with contextlib.redirect_stdout(io.StringIO()) as chatter:
            self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=model, optimizer=optimizer, lr_scheduler=scheduler, config=deepspeed_config(config, world_size))
        if chatter.getvalue().strip():
            log.debug("deepspeed.initialize printed:\n%s", chatter.getvalue().rstrip())
        self.device = self.engine.device
        if self.reference is not None:
            self.reference.to(self.device)
        if config.needs_reference() and config.lora.enabled and config.zero_stage != 3:
            self.reference_adapter = self._adapter_snapshot()
        self.teacher = None  # on-policy distillation's frozen teacher (learner.teacher.path)
        if config.teacher.path:
            from agentforge.learner.teacher import TeacherRole

            self.teacher = TeacherRole(self.model_path, config, self.device, self._all_reduce)
        self.critic = None  # the value model, when the algorithm asks for one (learner.critic.enabled)
        if config.critic.enabled:
            from agentforge.learner.critic import CriticRole

            self.critic = CriticRole(self.model_path, config, world_size, self._all_reduce)

    # ------------------------------------------------------------------------------------------- set-up

    def _load_model(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=_TORCH_DTYPES[self.config.dtype])
        model.config.use_cache = False
        if self.config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if self.config.lora.enabled:
                model.enable_input_require_grads()
        return model

    # ----------------------------------------------------------------------------------------- training

    def step(self, samples: Sequence[TurnSample]) -> dict[str, float]:
        """One optimizer step of the clipped policy loss over all of this rank's samples."""
        return self._train_step(list(samples), sft=False)

    def sft_step(self, samples: Sequence[TurnSample], lr: float | None = None) -> dict[str, float]:
        """One optimizer step of token-mean negative log-likelihood on the masked tokens (supervised warm start).

        `lr` overrides the learning rate for this step only (SFT usually wants a larger one than RL); the scheduler
        sets the RL rate again when it steps.
        """
        return self._train_step(list(samples), sft=True, lr=lr)

    def _train_step(self, samples: list[TurnSample], sft: bool, lr: float | None = None) -> dict[str, float]:
        start = time.perf_counter()
        accumulated = self.accumulate_gradients(samples, sft)
        if isinstance(accumulated, str):
            return self._skip(samples, accumulated)
        sums, mismatch_max, num_batches = accumulated
        local_tokens = total_loss_tokens(samples)
        grad_norm = self._stage0_grad_norm()
        if grad_norm is not None and not math.isfinite(grad_norm):
            # a finite loss can still have a non-finite gradient (an absurd advantage such as 3e38)
            self._discard_gradients()
            return self._skip(samples, "the gradient was not finite")
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        lr = float(self.engine.get_lr()[0])
        fault_point("optimizer_step")  # reliability tests kill a run here: gradients summed, weights not yet stepped
        self.engine.step()
        if getattr(self.engine.optimizer, "overflow", False):  # DeepSpeed's own check (bf16, ZeRO) refused it
            self.engine.zero_grad()
            return self._skip(samples, "the gradient was not finite (DeepSpeed skipped the step)")
        self.steps += 1
        if grad_norm is None:
            norm_value = self.engine.get_global_grad_norm()
            grad_norm = float(norm_value) if norm_value is not None else float("nan")
        # means over the tokens computed; the loss's over all (a skipped zero-advantage token's loss is exactly 0)
        computed_tokens = sums.pop(COMPUTED_TOKENS)
        out = {name: value if is_count(name) else
               value / max(local_tokens if name in SKIP_EXACT_METRICS else computed_tokens, 1)
               for name, value in sums.items()}
        out.update({
            "grad_norm": grad_norm,
            "lr": lr,
            "tokens": float(local_tokens),
            "samples": float(len(samples)),
            "micro_batches": float(num_batches),
            "skipped": 0.0,
            "step_time_s": time.perf_counter() - start,
        })
        if not sft:
            out["logprob_mismatch_max"] = mismatch_max
        return out

    def accumulate_gradients(self, samples: list[TurnSample], sft: bool = False
                             ) -> tuple[dict[str, float], float, int] | str:
        """Forward and backward over every micro-batch of this step (gradients summed, no optimizer step): the
        token-weighted metric sums, the largest |logp - old_logp| and the micro-batch count, or why the step must
        be skipped (gradients already discarded)."""
        local_tokens = total_loss_tokens(samples)
        local_seqs = sum(1 for s in samples if s.num_loss_tokens > 0)
        bad_input = not sft and not _inputs_finite(samples)
        computed = samples
        if not sft and self.config.zero_advantage_skippable():
            # exact: such a sample adds 0 to the loss and its gradient; the denominators above still count it
            computed = [s for s in samples if s.has_signal()]
        sharing = self.config.sharing
        batches = pack_micro_batches(computed, self.config.micro_batch_tokens, sharing)
        num_batches, any_bad = (int(v) for v in self._all_reduce([len(batches), float(bad_input)], "max"))
        # at least one pass, so every parameter gets a (zero) gradient and the optimizer steps as it would unskipped
        num_batches = max(num_batches, 1)
        total_tokens, total_seqs = (int(v) for v in self._all_reduce([float(local_tokens), float(local_seqs)], "sum"))
        if any_bad:
            return "non-finite advantages or old log-probs in the batch"
        if total_tokens == 0:
            return "the batch has no loss tokens"

        self.engine.train()
        # the whole step's denominators; DeepSpeed averages gradients over ranks, so each rank divides by its share
        norm = Normalizer(total_tokens, total_seqs, self._loss_scale_factor()).per_rank(self.world_size)
        sums: dict[str, float] = {}
        mismatch_max = 0.0
        nonfinite = False
        for k in range(num_batches):
            self.engine.set_gradient_accumulation_boundary(k == num_batches - 1)
            batch = collate_packed(computed, batches[k], self.device, sharing) if k < len(batches) else \
                padding_batch(self.device)
            loss, metrics, logits = self._micro_batch_loss(batch, norm, sft)
            if not torch.isfinite(loss):
                nonfinite = True  # keep the collectives in step with the other ranks; the update is discarded
                loss = logits.nan_to_num(0.0, 0.0, 0.0).sum() * 0.0
            del logits
            self.engine.backward(loss, scale_wrt_gas=False)
            tokens = metrics.pop("tokens")
            mismatch_max = max(mismatch_max, metrics.pop("logprob_mismatch_max", 0.0))
            for name, value in metrics.items():  # counts add up as they are; means are weighted by tokens
                sums[name] = sums.get(name, 0.0) + (value if is_count(name) else value * tokens)
        if self._all_reduce([float(nonfinite)], "max")[0]:
            self._discard_gradients()
            return "the loss was not finite"
        sums[COUNT_PREFIX + "skipped_zero_advantage"] = float(len(samples) - len(computed))
        # what the model ran: tokens after prefix sharing (`row_tokens`) and with padding (`padded_tokens`), against
        # the samples' own (`train/input_tokens`): where the learner's time per trained token goes
        packed = padding_stats(computed, batches, sharing)
        sums[COUNT_PREFIX + "row_tokens"] = packed["row_tokens"]
        sums[COUNT_PREFIX + "padded_tokens"] = packed["padded_tokens"]
        sums[COMPUTED_TOKENS] = float(total_loss_tokens(computed))
        return sums, mismatch_max, num_batches

    def _loss_scale_factor(self) -> float:
        factor = self.config.loss.loss_scale_factor
        if factor is None and self.objective.agg_mode == "seq-mean-token-sum-norm":
            raise AgentforgeError("learner.loss.agg_mode=seq-mean-token-sum-norm divides by a constant "
                                  "learner.loss.loss_scale_factor (Dr. GRPO's L); set it (the trainer uses "
                                  "agent.sampling.max_new_tokens when it is null)")
        return float(factor or 1.0)

    def _micro_batch_loss(self, batch: PackedBatch, norm: Normalizer,
                          sft: bool) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
        mask = batch.loss_mask
        tokens = float(mask.sum())
        logits = packed_logits(self.engine, batch)
        if not sft and self.config.teacher.divergence != "sampled":
            return self._divergence_loss(batch, logits, norm)
        spec = self.objective
        temperature = 1.0 if sft else self.config.sampling_temperature
        logp, entropy = token_logprobs(logits, batch.target, with_entropy=True,
                                       entropy_grad=not sft and spec.entropy_coef > 0, temperature=temperature)
        metrics: dict[str, float] = {"tokens": tokens}
        if sft:
            picked = logp[mask]
            loss = -picked.sum() / norm.tokens
            metrics["loss"] = float(-picked.detach().sum()) / max(tokens, 1.0)
            metrics["entropy"] = float(entropy[mask].sum()) / max(tokens, 1.0)
            return loss, metrics, logits
        ref_logp = batch.ref_logprobs
        if ref_logp is None and spec.kl_coef > 0 and spec.kl_in_loss:
            ref_logp = self._reference_logprobs(batch)
        loss, loss_metrics = policy_objective(
            logp, batch.old_logprobs, batch.advantages, mask, batch.sequence, spec, norm=norm, ref_logp=ref_logp,
            entropy=entropy, is_weights=batch.is_weights, strata=batch.stratum)
        metrics["loss"] = float(loss.detach()) * norm.tokens / max(tokens, 1.0)
        metrics.update({k: v for k, v in loss_metrics.items() if k != "logprob_abs_diff"})
        metrics["logprob_mismatch"] = loss_metrics["logprob_abs_diff"]
        with torch.no_grad():
            diff = (logp.detach().float() - batch.old_logprobs)[mask].abs()
            metrics["logprob_mismatch_max"] = float(diff.max()) if diff.numel() else 0.0
        return loss, metrics, logits

    def _divergence_loss(self, batch: PackedBatch, logits: torch.Tensor,
                         norm: Normalizer) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
        """GKD's loss (`learner.teacher.divergence`): the divergence between the teacher's and the student's
        distributions on the teacher's top-k tokens at every loss token, token-mean over the step; the teacher runs
        on the same packed micro-batch (its shared prefixes once, as the student's)."""
        from agentforge.objective.distillation import topk_divergence

        if self.teacher is None:
            raise AgentforgeError("learner.teacher.divergence needs the teacher's logits: set learner.teacher.path")
        settings, mask = self.config.teacher, batch.loss_mask
        with torch.no_grad():
            teacher_logits = packed_logits(self.teacher.model, batch)[mask]
        per_token, mass = topk_divergence(logits[mask], teacher_logits, int(settings.top_k), str(settings.divergence),
                                          float(settings.jsd_beta), self.config.sampling_temperature)
        tokens = float(mask.sum())
        mean = float(per_token.detach().sum()) / max(tokens, 1.0)
        return per_token.sum() / norm.tokens, {"tokens": tokens, "loss": mean, "distill_divergence": mean,
                                               "distill_topk_mass": float(mass.sum()) / max(tokens, 1.0)}, logits

    def _stage0_grad_norm(self) -> float | None:
        """The pre-clip gradient norm where DeepSpeed does not report one (fp32 without ZeRO: a plain torch
        optimizer, gradients already reduced at the boundary)."""
        if self.config.zero_stage != 0 or self.config.dtype != "float32":
            return None
        squares = [p.grad.detach().float().pow(2).sum() for p in self.engine.module.parameters() if p.grad is not None]
        return float(torch.stack(squares).sum().sqrt()) if squares else 0.0

    def _discard_gradients(self) -> None:
        """Drop accumulated gradients without an optimizer step, in every place DeepSpeed keeps them."""
        optimizer = self.engine.optimizer
        if hasattr(optimizer, "_overflow_clean_up"):  # ZeRO-3
            optimizer._overflow_clean_up(getattr(optimizer, "loss_scale", 1.0))
        else:
            optimizer.zero_grad(set_to_none=True)
            averaged = getattr(optimizer, "averaged_gradients", None)  # ZeRO-1/2 partitions
            if isinstance(averaged, dict):
                for key in list(averaged):
                    averaged[key] = None
            if hasattr(optimizer, "_release_preflattened_grad_buffers"):
                optimizer._release_preflattened_grad_buffers()
        self.engine.zero_grad()

    def _skip(self, samples: list[TurnSample], reason: str) -> dict[str, float]:
        stats = batch_statistics(samples)
        log.warning("learner rank %d skipped the update (%s): %s", self.rank, reason,
                    ", ".join(f"{k}={v:.4g}" for k, v in stats.items()))
        return {**stats, "skipped": 1.0, "lr": float(self.engine.get_lr()[0]), "samples": float(len(samples))}

    def _all_reduce(self, values: list[float], op: str = "max") -> list[float]:
        """Element-wise MAX or SUM over ranks (a no-op on one rank)."""
        if self.world_size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64)
        reduce_op = torch.distributed.ReduceOp.MAX if op == "max" else torch.distributed.ReduceOp.SUM
        torch.distributed.all_reduce(tensor, op=reduce_op)
        return tensor.tolist()

    # ----------------------------------------------------------------------------------------- inference

    def compute_logprobs(self, samples: Sequence[TurnSample], reference: bool = False) -> list[np.ndarray]:
        """The learner's log-probs of each sample's response tokens (aligned with `response_ids`), at the sampling
        temperature: the recomputed old log-probs (`old_logprobs: recompute`), or with `reference=True` the
        reference policy's."""
        samples = list(samples)
        batches = pack_micro_batches(samples, self.config.micro_batch_tokens, self.config.sharing)
        num_batches = int(self._all_reduce([float(len(batches))], "max")[0])

        def policy_logprobs(batch: PackedBatch) -> torch.Tensor:
            return token_logprobs(packed_logits(self.engine, batch), batch.target,
                                  temperature=self.config.sampling_temperature)[0]

        self.engine.eval()
        with torch.no_grad():
            out = per_token_results(samples, batches, num_batches, self.device, self.config.sharing,
                                    self._reference_logprobs if reference else policy_logprobs)
        self.engine.train()
        return out

    def compute_values(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """The critic's values of each sample's response tokens (aligned with `response_ids`)."""
        return self._critic().values(samples)

    def compute_teacher_logprobs(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """The teacher's log-probs of each sample's response tokens (needs learner.teacher.path)."""
        if self.teacher is None:
            raise AgentforgeError("this learner has no teacher: an algorithm that distils (needs_teacher, e.g. opd) "
                                  "needs learner.teacher.path=<model folder>")
        return self.teacher.logprobs(samples)

    def critic_step(self, samples: Sequence[TurnSample]) -> dict[str, float]:
        """One optimizer step of the critic's clipped value loss over this rank's samples."""
        return self._critic().step(samples)

    def _critic(self) -> Any:
        if self.critic is None:
            raise AgentforgeError("this learner has no critic: an algorithm that needs values turns it on "
                                  "(learner.critic.enabled=true)")
        return self.critic

    # ------------------------------------------------------------------------------------ checkpointing

    def save(self, path: str | os.PathLike[str]) -> None:
        """Weights, optimizer, scheduler, an HF export, the moved reference and the critic (`rank_checkpoint.py`)."""
        save_rank(self, path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore what `save` wrote (same world size)."""
        load_rank(self, path)

    def _barrier(self) -> None:
        if self.world_size > 1:
            torch.distributed.barrier()

    # -------------------------------------------------------------------------------------------- misc

    def optimizer_steps(self) -> int:
        return self.steps

    def trainable_parameters(self) -> int:
        return sum(_numel(p) for p in self.engine.module.parameters() if p.requires_grad)

    def close(self) -> None:
        """Free the engine (the process group stays: other rank objects in this process may reuse it)."""
        self.engine = None  # type: ignore[assignment]
        self.reference = None
        self.critic = None
        import gc

        gc.collect()


# ----------------------------------------------------------------------------------------------- helpers


def _inputs_finite(samples: Sequence[TurnSample]) -> bool:
    return all(s.advantages_finite() and np.isfinite(s.old_logprobs[s.loss_mask]).all() for s in samples)


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only (norm scales and biases are not decayed)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    other = [p for p in trainable if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if other:
        groups.append({"params": other, "weight_decay": 0.0})
    return groups


def _numel(param: torch.nn.Parameter) -> int:
    return int(getattr(param, "ds_numel", param.numel()))
