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
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentforge.errors import AgentforgeError
from agentforge.learner.batch import TurnSample, batch_statistics, total_loss_tokens
from agentforge.learner.config import LearnerConfig
from agentforge.learner.lora import (
    adapted_weight_names,
    hf_name,
    is_lora_parameter,
    merged_lora_weights,
    wrap_with_lora,
)
from agentforge.learner.packing import (
    PackedBatch,
    collate_packed,
    pack_micro_batches,
    packed_logits,
    padding_batch,
    token_logprobs,
)
from agentforge.reliability.faultpoints import fault_point

log = logging.getLogger(__name__)

COMPLETE_MARKER = "COMPLETE"
CHECKPOINT_TAG = "state"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja", "generation_config.json")
_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Micro-batch metrics averaged over loss tokens (the others are maxima or per-step values).
TOKEN_MEAN_METRICS = ("loss", "pg_loss", "clip_fraction", "clip_fraction_low", "clip_fraction_high", "approx_kl",
                      "logprob_mismatch", "entropy", "kl_ref")


def free_port() -> int:
    """A TCP port that was free a moment ago (the rendezvous port of a new process group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def prepare_process_env(rank: int, world_size: int, master_addr: str, master_port: int | None,
                        local_rank: int | None = None) -> None:
    """The variables torch.distributed and DeepSpeed read, set before DeepSpeed is imported in this process."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Another part of this process (an earlier rank object, vLLM's in-process engine) made the world;
        # DeepSpeed joins it but still reads these variables.
        os.environ.setdefault("RANK", str(torch.distributed.get_rank()))
        os.environ.setdefault("WORLD_SIZE", str(torch.distributed.get_world_size()))
        os.environ.setdefault("LOCAL_RANK", str(rank if local_rank is None else local_rank))
        return
    os.environ.update({
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port or free_port()),
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank if local_rank is None else local_rank),
    })


def forget_stale_deepspeed_groups() -> None:
    """DeepSpeed caches process groups (a clone of the world group) in module globals. When the world is torn
    down and made again in one process (vLLM's in-process engine does so on close and restart, e.g. a trainer
    resumed in the same process), those groups are dead and `deepspeed.initialize` fails with "Group ... is not
    registered": drop every cached group the current world does not know."""
    from deepspeed.utils import groups
    from torch.distributed import distributed_c10d

    registered = distributed_c10d._world.pg_group_ranks
    for name, value in list(vars(groups).items()):
        if isinstance(value, torch.distributed.ProcessGroup) and value not in registered:
            setattr(groups, name, None)


def lr_factor(config: LearnerConfig) -> Callable[[int], float]:
    """LR multiplier per optimizer step: linear warmup from 1/(warmup+1) (the first step is not wasted at lr 0),
    then constant, cosine or linear decay to 0 at `total_steps`."""
    warmup, total, schedule = config.warmup_steps, config.total_steps, config.lr_schedule

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, (total or 0) - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress

    return factor


def deepspeed_config(config: LearnerConfig, world_size: int) -> dict[str, Any]:
    zero: dict[str, Any] = {
        "stage": config.zero_stage,
        "reduce_bucket_size": int(config.reduce_bucket_size),
        "allgather_bucket_size": int(config.allgather_bucket_size),
    }
    if config.zero_stage == 3:
        zero["stage3_prefetch_bucket_size"] = int(config.allgather_bucket_size)
    return {
        # Nominal sizes: the real accumulation boundary is set per micro-batch by the learner.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world_size,
        "gradient_clipping": float(config.grad_clip),
        "zero_optimization": zero,
        "bf16": {"enabled": config.dtype == "bfloat16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


class DeepSpeedLearnerRank:
    """One DeepSpeed rank. In a multi-rank world every public method is collective: call it on all ranks.

    Without LoRA and with `loss.kl_coef > 0`, a frozen copy of the initial model serves as the reference policy:
    it costs one more full set of weights per rank (not partitioned by ZeRO-3). With LoRA the reference is the
    same model with adapters disabled, at no memory cost.
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
        if config.lora.enabled:
            model = wrap_with_lora(model, config.lora)
        optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr,
                                      betas=tuple(config.betas), weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config))
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=deepspeed_config(config, world_size))
        self.device = self.engine.device
        if self.reference is not None:
            self.reference.to(self.device)

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

    def _reference_copy(self, model: torch.nn.Module) -> torch.nn.Module | None:
        if self.config.loss.kl_coef <= 0 or self.config.lora.enabled:
            return None
        import copy

        reference = copy.deepcopy(model).eval()
        reference.requires_grad_(False)
        return reference

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
        batches = pack_micro_batches(samples, self.config.micro_batch_tokens, self.config.share_prompts)
        local_tokens = total_loss_tokens(samples)
        bad_input = not sft and not _inputs_finite(samples)
        num_batches, any_bad = (int(v) for v in self._all_reduce([len(batches), float(bad_input)], "max"))
        total_tokens = int(self._all_reduce([float(local_tokens)], "sum")[0])
        if any_bad:
            return self._skip(samples, "non-finite advantages or old log-probs in the batch")
        if total_tokens == 0:
            return self._skip(samples, "the batch has no loss tokens")

        self.engine.train()
        per_rank_tokens = total_tokens / self.world_size  # DeepSpeed averages gradients over ranks
        sums: dict[str, float] = {}
        mismatch_max = 0.0
        nonfinite = False
        for k in range(num_batches):
            self.engine.set_gradient_accumulation_boundary(k == num_batches - 1)
            batch = collate_packed(samples, batches[k], self.device) if k < len(batches) else padding_batch(self.device)
            loss, metrics, logits = self._micro_batch_loss(batch, per_rank_tokens, sft)
            if not torch.isfinite(loss):
                nonfinite = True  # keep the collectives in step with the other ranks; the update is discarded
                loss = logits.nan_to_num(0.0, 0.0, 0.0).sum() * 0.0
            del logits
            self.engine.backward(loss, scale_wrt_gas=False)
            tokens = metrics.pop("tokens")
            mismatch_max = max(mismatch_max, metrics.pop("logprob_mismatch_max", 0.0))
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + value * tokens
        if self._all_reduce([float(nonfinite)], "max")[0]:
            self._discard_gradients()
            return self._skip(samples, "the loss was not finite")

        grad_norm = self._stage0_grad_norm()
        if lr is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        lr = float(self.engine.get_lr()[0])
        fault_point("optimizer_step")  # reliability tests kill a run here: gradients summed, weights not yet stepped
        self.engine.step()
        self.steps += 1
        if grad_norm is None:
            norm = self.engine.get_global_grad_norm()
            grad_norm = float(norm) if norm is not None else float("nan")
        out = {name: value / max(local_tokens, 1) for name, value in sums.items()}
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

    def _micro_batch_loss(self, batch: PackedBatch, per_rank_tokens: float,
                          sft: bool) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
        from agentforge.algorithms.losses import clipped_policy_loss

        mask = batch.loss_mask
        tokens = float(mask.sum())
        logits = packed_logits(self.engine, batch)
        logp, entropy = token_logprobs(logits, batch.target, with_entropy=True,
                                       entropy_grad=not sft and self.config.loss.entropy_coef > 0)
        metrics: dict[str, float] = {"tokens": tokens}
        if sft:
            loss = -(logp * mask).sum() / per_rank_tokens
            metrics["loss"] = float(loss.detach()) * per_rank_tokens / max(tokens, 1.0)
            metrics["entropy"] = float((entropy * mask).sum()) / max(tokens, 1.0)
            return loss, metrics, logits
        ref_logp = self._reference_logprobs(batch) if self.config.loss.kl_coef > 0 else None
        lc = self.config.loss
        loss, loss_metrics = clipped_policy_loss(
            logp, batch.old_logprobs, batch.advantages, mask, eps_low=lc.eps_low, eps_high=lc.eps_high,
            ref_logp=ref_logp, kl_coef=lc.kl_coef, entropy=entropy, entropy_coef=lc.entropy_coef,
            num_tokens=per_rank_tokens)
        metrics["loss"] = float(loss.detach()) * per_rank_tokens / max(tokens, 1.0)
        metrics.update({k: v for k, v in loss_metrics.items() if k != "logprob_abs_diff"})
        metrics["logprob_mismatch"] = loss_metrics["logprob_abs_diff"]
        with torch.no_grad():
            diff = (logp.detach().float() - batch.old_logprobs).abs()[mask]
            metrics["logprob_mismatch_max"] = float(diff.max()) if diff.numel() else 0.0
        return loss, metrics, logits

    def _reference_logprobs(self, batch: PackedBatch) -> torch.Tensor:
        with torch.no_grad():
            if self.reference is not None:
                logits = packed_logits(self.reference, batch)
            else:  # LoRA: the base model is the reference
                with self.engine.module.disable_adapter():
                    logits = packed_logits(self.engine.module, batch)
            return token_logprobs(logits, batch.target)[0]

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

    def compute_logprobs(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """The learner's log-probs of each sample's response tokens (aligned with `response_ids`): the exact
        old log-probs when the engine's are not (bf16 engines), and the first-step reference in tests."""
        samples = list(samples)
        batches = pack_micro_batches(samples, self.config.micro_batch_tokens, self.config.share_prompts)
        num_batches = int(self._all_reduce([float(len(batches))], "max")[0])
        out = [np.zeros(s.length - s.prompt_len, np.float32) for s in samples]
        self.engine.eval()
        with torch.no_grad():
            for k in range(num_batches):
                batch = collate_packed(samples, batches[k], self.device) if k < len(batches) else \
                    padding_batch(self.device)
                logp = token_logprobs(packed_logits(self.engine, batch), batch.target)[0].cpu().numpy()
                if k < len(batches):
                    for i, j, value in zip(batch.sample, batch.index, logp, strict=True):
                        out[i][j] = value
        self.engine.train()
        return out

    # -------------------------------------------------------------------------------------------- export

    def export_weights(self, only_changed: bool = False, copy: bool = True) -> list[tuple[str, torch.Tensor]]:
        """The policy's weights in HF checkpoint names (`model.layers.0...`), as CPU tensors on rank 0 (other ranks
        return []). With `copy=False` unchanged parameters come as views (no second copy of the weights; for a
        consumer that copies them at once, like a weight push). With LoRA the adapted modules' weights are merged
        (W + scale·B·A);
        `only_changed=True` returns just those (without LoRA every weight changes, so all are returned).
        Tied weights appear once (`lm_head.weight` tied to `model.embed_tokens.weight` is left out)."""
        module = self.engine.module
        gather = self._gather_context()
        keep = self.rank == 0
        out: list[tuple[str, torch.Tensor]] = []
        if self.config.lora.enabled:
            merged = list(merged_lora_weights(module, gather))
            out.extend(merged if keep else [])
            if only_changed:
                return out
            skip = adapted_weight_names(module)
            named = [(n, p) for n, p in module.named_parameters() if n not in skip and not is_lora_parameter(n)]
        else:
            named = list(module.named_parameters())
        for name, param in named:
            with gather([param]):
                if keep:
                    # ZeRO-3 frees a gathered parameter on leaving the block, so it is always copied
                    tensor = param.detach().cpu()
                    out.append((hf_name(name), tensor.clone() if copy or self.config.zero_stage == 3 else tensor))
        return out

    def _gather_context(self) -> Callable[[list[torch.nn.Parameter]], contextlib.AbstractContextManager]:
        if self.config.zero_stage != 3:
            return lambda params: contextlib.nullcontext()
        return lambda params: self._deepspeed.zero.GatheredParameters(params, modifier_rank=None)

    # ------------------------------------------------------------------------------------ checkpointing

    def save(self, path: str | os.PathLike[str]) -> None:
        """DeepSpeed state (weights, optimizer, LR scheduler) in `path/deepspeed`, an HF export in `path/hf`
        (the adapter with LoRA, else the full model plus tokenizer files), and `path/COMPLETE` written last."""
        path = Path(path)
        marker = path / COMPLETE_MARKER
        if self.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            marker.unlink(missing_ok=True)
        self._barrier()
        self.engine.save_checkpoint(str(path / "deepspeed"), tag=CHECKPOINT_TAG,
                                    client_state={"learner_steps": self.steps},
                                    exclude_frozen_parameters=self.config.lora.enabled)
        self._save_hf(path / "hf")
        self._barrier()
        if self.rank == 0:
            meta = {"model_path": self.model_path, "steps": self.steps, "world_size": self.world_size,
                    "config": self.config.to_dict()}
            (path / "learner.json").write_text(json.dumps(meta, indent=2, default=str))
            marker.write_text(f"steps={self.steps}\n")
        self._barrier()

    def _save_hf(self, out: Path) -> None:
        module = self.engine.module
        state = self.engine._zero3_consolidated_16bit_state_dict() if self.config.zero_stage == 3 else None
        if self.rank != 0:
            return
        if state is not None:
            module.save_pretrained(out, state_dict=state)
        else:
            module.save_pretrained(out)
        if not self.config.lora.enabled:
            for name in TOKENIZER_FILES:
                source = Path(self.model_path) / name
                if source.is_file():
                    shutil.copy2(source, out / name)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore weights, optimizer and LR scheduler from a checkpoint written by `save` (same world size)."""
        path = Path(path)
        if not (path / COMPLETE_MARKER).is_file():
            raise AgentforgeError(f"{path} is not a complete learner checkpoint (no {COMPLETE_MARKER} marker): "
                                  "saving was interrupted or the path is wrong; resume from an earlier checkpoint")
        from agentforge.training.checkpoint import CheckpointMismatchError, check_learner_checkpoint, mismatch_message

        check_learner_checkpoint(path, self.model_path, self.config.to_dict()["lora"])
        try:
            load_path, client = self.engine.load_checkpoint(
                str(path / "deepspeed"), tag=CHECKPOINT_TAG, load_module_strict=not self.config.lora.enabled,
                load_optimizer_states=True, load_lr_scheduler_states=True)
        except RuntimeError as error:  # what the metadata check could not see: torch's size-mismatch traceback
            if "size mismatch" not in str(error) and "Missing key" not in str(error):
                raise
            first = str(error).strip().splitlines()[1:2] or [str(error)[:200]]
            raise CheckpointMismatchError(mismatch_message(path / "deepspeed", first[0].strip())
                                          ) from error
        if load_path is None:
            raise AgentforgeError(f"DeepSpeed found no state under {path / 'deepspeed'}; the checkpoint is damaged")
        self.steps = int((client or {}).get("learner_steps", 0))

    def _barrier(self) -> None:
        if self.world_size > 1:
            torch.distributed.barrier()

    # -------------------------------------------------------------------------------------------- misc

    def trainable_parameters(self) -> int:
        return sum(_numel(p) for p in self.engine.module.parameters() if p.requires_grad)

    def close(self) -> None:
        """Free the engine (the process group stays: other rank objects in this process may reuse it)."""
        self.engine = None  # type: ignore[assignment]
        self.reference = None
        import gc

        gc.collect()


# ----------------------------------------------------------------------------------------------- helpers


def _inputs_finite(samples: Sequence[TurnSample]) -> bool:
    return all(math.isfinite(s.advantage) and np.isfinite(s.old_logprobs[s.loss_mask]).all() for s in samples)


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
