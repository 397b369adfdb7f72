"""The critic role: a value model beside the policy, with its own optimizer, steps and checkpoint state.

An algorithm that needs values (`Algorithm.needs_values`, e.g. PPO with GAE) gets a critic on every learner rank:
the policy's transformer body (loaded again from the same folder, so the critic starts from what the policy knows,
as verl's and OpenRLHF's critics do; or, with `learner.critic.path`, a separate model's body, e.g. a smaller one of
the same family) with a scalar head. `V_t` of a response token is read at the position whose
logits predict it, the state the token was sampled from (verl: `values[:, -response_length - 1:-1]`). The value
loss is verl's clipped one: `0.5 · max((V − R)², (clip(V, V_old ± c) − R)²)`, token-mean over the batch's loss
tokens (every rank's), one optimizer step per `step`. With LoRA on the policy the critic's body carries LoRA
adapters too (its head is always trained whole).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from agentforge.errors import AgentforgeError
from agentforge.learner.batch import TurnSample, total_loss_tokens
from agentforge.learner.config import LearnerConfig
from agentforge.learner.deepspeed_setup import deepspeed_config
from agentforge.learner.packing import (
    PackedBatch,
    collate_packed,
    pack_micro_batches,
    padding_batch,
    per_token_results,
)

log = logging.getLogger(__name__)

CRITIC_DIR = "critic"
CRITIC_TAG = "state"
AllReduce = Callable[[list[float], str], list[float]]


class ValueModel(torch.nn.Module):
    """A transformer body and a linear head: one scalar value per position."""

    def __init__(self, body: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.body = body
        self.value_head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.normal_(self.value_head.weight, std=1.0 / (hidden_size + 1))
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           use_cache=False).last_hidden_state
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1).float()


def load_value_model(model_path: str, config: LearnerConfig) -> ValueModel:
    """The policy folder's body (`AutoModel`: the causal LM without its vocabulary head) with a fresh value head."""
    from transformers import AutoModel

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[str(config.dtype)]
    body = AutoModel.from_pretrained(model_path, dtype=dtype)
    body.config.use_cache = False
    if config.gradient_checkpointing:
        body.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.critic.uses_lora(config):
        from peft import LoraConfig, get_peft_model

        if config.gradient_checkpointing:
            body.enable_input_require_grads()
        lora = config.lora
        body = get_peft_model(body, LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                               target_modules=list(lora.target_modules), bias="none"))
    model = ValueModel(body, int(body.config.hidden_size))
    return model.to(dtype)


class CriticRole:
    """One rank's critic: `values(samples)`, `step(samples)` (one optimizer step of the clipped value loss),
    `save(path)` and `load(path)`. Every method is collective in a multi-rank world."""

    def __init__(self, model_path: str, config: LearnerConfig, world_size: int, all_reduce: AllReduce) -> None:
        import deepspeed

        self.config = config
        self.settings = config.critic
        self.world_size = world_size
        self._all_reduce = all_reduce
        self.steps = 0
        if self.settings.path:  # its values are read on the policy's token ids: one tokenizer for both
            from agentforge.learner.teacher import check_same_tokenizer

            check_same_tokenizer(model_path, self.settings.path)
        model = load_value_model(self.settings.path or model_path, config)  # learner.critic.path: a separate one
        self.parameters = sum(p.numel() for p in model.parameters())
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=self.settings.lr, betas=tuple(config.betas),
                                      weight_decay=self.settings.weight_decay)
        ds_config = deepspeed_config(dataclasses.replace(config, grad_clip=self.settings.grad_clip), world_size)
        with contextlib.redirect_stdout(io.StringIO()) as chatter:
            self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                                                     config=ds_config)
        if chatter.getvalue().strip():
            log.debug("deepspeed.initialize (critic) printed:\n%s", chatter.getvalue().rstrip())
        self.device = self.engine.device

    # ------------------------------------------------------------------------------------------ values

    def _token_values(self, batch: PackedBatch) -> torch.Tensor:
        """V_t of each flat token: the value at the position whose logits predict it."""
        values = self.engine(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                             position_ids=batch.position_ids)
        return values[batch.row, batch.keep[batch.source]]

    def _batches(self, samples: list[TurnSample]) -> tuple[list[list[list[int]]], int]:
        batches = pack_micro_batches(samples, self.config.micro_batch_tokens, self.config.sharing)
        return batches, max(int(self._all_reduce([float(len(batches))], "max")[0]), 1)

    def values(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """The critic's value of each sample's response tokens (aligned with `response_ids`, float32)."""
        samples = list(samples)
        batches, num_batches = self._batches(samples)
        self.engine.eval()
        with torch.no_grad():
            out = per_token_results(samples, batches, num_batches, self.device, self.config.sharing,
                                    self._token_values)
        self.engine.train()
        return out

    # ---------------------------------------------------------------------------------------- training

    def step(self, samples: Sequence[TurnSample]) -> dict[str, float]:
        """One optimizer step of the clipped value loss over this rank's samples (each needs `returns` and
        `old_values`)."""
        samples = [s for s in samples if s.num_loss_tokens > 0]
        missing = [i for i, s in enumerate(samples) if s.returns is None or s.old_values is None]
        if missing:
            raise AgentforgeError(f"{len(missing)} sample(s) reach the critic without returns or old values; an "
                                  "algorithm that asks for a critic (needs_values) must set both on every sample")
        batches, num_batches = self._batches(samples)
        total = int(self._all_reduce([float(total_loss_tokens(samples))], "sum")[0])
        if total == 0:
            return {"critic/skipped": 1.0}
        share = total / self.world_size  # DeepSpeed averages gradients over ranks: each divides by its share
        clip = float(self.settings.cliprange_value)
        sums = {"value_loss": 0.0, "vf_clipfrac": 0.0, "values_mean": 0.0}
        self.engine.train()
        for k in range(num_batches):
            self.engine.set_gradient_accumulation_boundary(k == num_batches - 1)
            batch = collate_packed(samples, batches[k], self.device, self.config.sharing) if k < len(batches) \
                else padding_batch(self.device)
            predicted = self._token_values(batch)
            if batch.returns is None:  # a padding micro-batch: no loss tokens, a zero gradient
                loss = predicted.sum() * 0.0
            else:
                mask = batch.loss_mask
                old, target = batch.old_values, batch.returns
                clipped = old + (predicted - old).clamp(-clip, clip)
                plain_loss, clipped_loss = (predicted - target) ** 2, (clipped - target) ** 2
                per_token = 0.5 * torch.maximum(plain_loss, clipped_loss)
                loss = per_token[mask].sum() / share
                with torch.no_grad():
                    sums["value_loss"] += float(per_token[mask].sum())
                    sums["vf_clipfrac"] += float((clipped_loss > plain_loss)[mask].sum())
                    sums["values_mean"] += float(predicted[mask].sum())
            self.engine.backward(loss, scale_wrt_gas=False)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.engine.step()
        self.steps += 1
        norm = self.engine.get_global_grad_norm()
        tokens = max(total_loss_tokens(samples), 1)
        out = {f"critic/{k}": v / tokens for k, v in sums.items()}
        out.update({"critic/grad_norm": float(norm) if norm is not None else float("nan"), "critic/lr": lr,
                    "critic/parameters": float(self.parameters)})
        return out

    # ------------------------------------------------------------------------------------ checkpointing

    def save(self, path: Path, exclude_frozen: bool) -> None:
        self.engine.save_checkpoint(str(path / CRITIC_DIR), tag=CRITIC_TAG, client_state={"critic_steps": self.steps},
                                    exclude_frozen_parameters=exclude_frozen)

    def load(self, path: Path, strict: bool) -> None:
        if not (path / CRITIC_DIR).is_dir():
            raise AgentforgeError(f"{path} has no critic state ({CRITIC_DIR}/): it was written by a run without a "
                                  "critic; resume it with the algorithm it trained, or start a new run")
        load_path, client = self.engine.load_checkpoint(str(path / CRITIC_DIR), tag=CRITIC_TAG,
                                                        load_module_strict=strict, load_optimizer_states=True,
                                                        load_lr_scheduler_states=False)
        if load_path is None:
            raise AgentforgeError(f"DeepSpeed found no critic state under {path / CRITIC_DIR}; the checkpoint is "
                                  "damaged")
        self.steps = int((client or {}).get("critic_steps", 0))


def explained_variance(values: Sequence[np.ndarray], returns: Sequence[np.ndarray],
                       masks: Sequence[np.ndarray]) -> float:
    """1 − Var(R − V) / Var(R) over the loss tokens: 1 when the critic predicts the returns, ≤ 0 when it does no
    better than their mean (nan when the returns do not vary)."""
    v = np.concatenate([np.asarray(a)[m] for a, m in zip(values, masks, strict=True)]) if values else np.zeros(0)
    r = np.concatenate([np.asarray(a)[m] for a, m in zip(returns, masks, strict=True)]) if returns else np.zeros(0)
    spread = float(np.var(r)) if len(r) else 0.0
    return float("nan") if spread == 0.0 else 1.0 - float(np.var(r - v)) / spread
