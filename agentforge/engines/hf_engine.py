"""The HF transformers rollout engine: the fallback when vLLM is absent, and the reference vLLM is checked against.

Conventions shared with the vLLM engine, so either can feed the learner:
- token ids are exactly the sampled ids, including the EOS token or the token that completed a stop string;
  `text` is their decoding (special tokens skipped), cut right after the first stop string, as vLLM does with
  `include_stop_str_in_output=True`;
- log-probs are log-softmax of the model's raw logits (before penalties, temperature, top-k/p and
  interventions), i.e. vLLM's default `raw_logprobs`, or with `logprobs_mode="processed_logprobs"` of the
  distribution the token was sampled from (after every processor, temperature included: `generate`'s
  `output_scores`), as vLLM's mode of that name; with `SamplingConfig.uncertainty`, each token's entropy
  and top probability come from the raw logits (`generate`'s `output_logits`);
- processing order is vLLM's: interventions, repetition penalty (prompt + output), presence penalty (output),
  then temperature, top-k, top-p.
Prompts are left-padded; the attention mask is built from prompt lengths, never from pad ids, because SmolLM2's
pad token `<|im_end|>` also occurs inside chat prompts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from agentforge.engines import EngineRng, check_score_inputs
from agentforge.engines.interventions import (
    Intervention,
    InterventionSpec,
    build_intervention,
    next_token_uncertainty,
)
from agentforge.engines.stops import cut_at_stop
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.models.loading import ModelSpec, load_hf_model, load_tokenizer
from agentforge.types import Completion, SamplingConfig


class InterventionLogitsProcessor(LogitsProcessor):
    """HF adapter for interventions: row r of the padded batch runs `interventions[r]` (or nothing).

    Rows whose intervention `wants_uncertainty` get their entropy/top-prob computed in one batched pass first.
    """

    def __init__(self, interventions: Sequence[Intervention | None], prompt_width: int) -> None:
        self.interventions = list(interventions)
        self.prompt_width = prompt_width
        self.measured = [r for r, i in enumerate(self.interventions) if i is not None and i.wants_uncertainty]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        values: dict[int, tuple[float, float]] = {}
        if self.measured:
            entropy, top_prob = next_token_uncertainty(scores[self.measured])
            values = dict(zip(self.measured, zip(entropy.tolist(), top_prob.tolist(), strict=True), strict=True))
        # generate() keeps this very tensor as the step's raw logits (`output_logits`): never modify it in place
        scores = scores.clone()
        for row, intervention in enumerate(self.interventions):
            if intervention is not None:
                intervention.step(input_ids[row, self.prompt_width :].tolist(), scores[row], values.get(row))
        return scores


class PenaltyLogitsProcessor(LogitsProcessor):
    """vLLM-style penalties over a left-padded batch: repetition on prompt + output tokens, presence on output.

    transformers' own repetition processor would also penalise the pad token, which is SmolLM2's EOS.
    """

    def __init__(self, prompt_lengths: Sequence[int], prompt_width: int, repetition: float, presence: float) -> None:
        self.prompt_width = prompt_width
        self.repetition = repetition
        self.presence = presence
        positions = torch.arange(prompt_width)
        self.prompt_real = positions[None, :] >= (prompt_width - torch.tensor(prompt_lengths))[:, None]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        output_ids = input_ids[:, self.prompt_width :]
        in_output = torch.zeros_like(scores, dtype=torch.long).scatter_add_(1, output_ids, torch.ones_like(output_ids))
        if self.repetition != 1.0:
            real = self.prompt_real.to(input_ids.device).long()
            in_prompt = torch.zeros_like(in_output).scatter_add_(1, input_ids[:, : self.prompt_width], real)
            penalised = torch.where(scores > 0, scores / self.repetition, scores * self.repetition)
            scores = torch.where((in_prompt + in_output) > 0, penalised, scores)
        if self.presence != 0.0:
            scores = scores - self.presence * (in_output > 0).to(scores.dtype)
        return scores


class StopStringCriteria(StoppingCriteria):
    """Stop a row once its decoded output (special tokens skipped) contains a stop string."""

    def __init__(self, tokenizer: Any, stops: Sequence[str], prompt_width: int) -> None:
        self.tokenizer = tokenizer
        self.stops = list(stops)
        self.prompt_width = prompt_width
        # A stop string of L characters spans at most L tokens (+2 for tokens that decode to partial characters).
        self.window = max(len(s) for s in self.stops) + 2

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        tails = input_ids[:, self.prompt_width :][:, -self.window :].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        done = [any(s in text for s in self.stops) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


class HFEngine:
    """transformers `generate` behind the RolloutEngine protocol."""

    def __init__(
        self,
        spec: ModelSpec,
        dtype: str | None = None,
        seed: int = 0,
        batch_size: int = 32,
        device: str = "cpu",
        logprobs_mode: str = "raw_logprobs",
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"engine.batch_size must be >= 1, got {batch_size}")
        if logprobs_mode not in LOGPROBS_MODES:
            raise ConfigError(f"engine.logprobs_mode={logprobs_mode!r} is unknown; use one of "
                              f"{', '.join(LOGPROBS_MODES)}")
        self.logprobs_mode = logprobs_mode
        self.spec = spec
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.tokenizer = load_tokenizer(spec)
        self.model = load_hf_model(spec, dtype).to(self.device)
        self.vocab_size = int(self.model.config.vocab_size)  # the logits row width |V|
        self.rng = EngineRng(seed)
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]

    # ------------------------------------------------------------------------------------------- generation

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        interventions: list[InterventionSpec | None] | None = None,
    ) -> list[Completion]:
        if interventions is not None and len(interventions) != len(prompts):
            raise AgentforgeError(f"got {len(interventions)} interventions for {len(prompts)} prompts; pass one each")
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise AgentforgeError(f"prompt {i} is empty; every prompt needs at least one token")
        specs = interventions or [None] * len(prompts)
        # Batch similar lengths together to waste less compute on padding; results go back in input order.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        with self.rng.active(), torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                done = self._generate_batch([prompts[i] for i in chunk], sampling, [specs[i] for i in chunk])
                for i, completion in zip(chunk, done, strict=True):
                    results[i] = completion
        return [c for c in results if c is not None]

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """Raw log-probs of each response token after its prompt: one forward pass per pair (no padding, so the
        numbers do not depend on what else is scored)."""
        check_score_inputs(prompts, responses, None)
        scores = []
        with torch.inference_mode():
            for prompt, response in zip(prompts, responses, strict=True):
                ids = torch.tensor([list(prompt) + list(response)], dtype=torch.long, device=self.device)
                logits = self.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
                picked = logits.log_softmax(-1).gather(-1, ids[0, len(prompt):, None])[:, 0]
                scores.append(picked.cpu().tolist())
        return scores

    def _generate_batch(
        self, prompts: list[list[int]], sampling: SamplingConfig, specs: list[InterventionSpec | None]
    ) -> list[Completion]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        live = [build_intervention(s) if s is not None else None for s in specs]

        processors = LogitsProcessorList()
        if any(i is not None for i in live):
            processors.append(InterventionLogitsProcessor(live, width))
        if sampling.repetition_penalty != 1.0 or sampling.presence_penalty != 0.0:
            processors.append(
                PenaltyLogitsProcessor(
                    [len(p) for p in prompts], width, sampling.repetition_penalty, sampling.presence_penalty
                )
            )
        criteria = StoppingCriteriaList()
        stops = [s for s in sampling.stop if s]
        if stops:
            criteria.append(StopStringCriteria(self.tokenizer, stops, width))

        greedy = sampling.temperature < 1e-5
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            # when sampling, explicit values: None would let transformers fill in its defaults (top_k=50)
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else max(sampling.top_k, 0),
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            bos_token_id=self.tokenizer.bos_token_id,
            return_dict_in_generate=True,
            output_logits=True,
            output_scores=self.logprobs_mode == "processed_logprobs",
        )
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            generation_config=config,
            logits_processor=processors,
            stopping_criteria=criteria,
        )
        new_tokens = out.sequences[:, width:].cpu()
        # raw logits: before any processor; processed: the scores the token was sampled from
        scores = out.scores if self.logprobs_mode == "processed_logprobs" else out.logits
        logprobs = torch.stack(scores, dim=1).float().log_softmax(-1)
        token_logprobs = logprobs.gather(-1, new_tokens.to(logprobs.device)[..., None])[..., 0].cpu()
        entropy: list[list[float] | None] = [None] * len(prompts)
        top_prob: list[list[float] | None] = [None] * len(prompts)
        if sampling.uncertainty:
            # from the same raw logits, step by step: one batch-wide pass per step keeps temporaries at (batch, vocab)
            steps = [next_token_uncertainty(step_logits) for step_logits in out.logits]
            entropy = torch.stack([h for h, _ in steps], dim=1).cpu().tolist()
            top_prob = torch.stack([p for _, p in steps], dim=1).cpu().tolist()
        return [
            self._completion(
                new_tokens[row].tolist(), token_logprobs[row].tolist(), stops, live[row], entropy[row], top_prob[row]
            )
            for row in range(len(prompts))
        ]

    def _completion(
        self,
        ids: list[int],
        logprobs: list[float],
        stops: list[str],
        intervention: Intervention | None,
        entropy: list[float] | None = None,
        top_prob: list[float] | None = None,
    ) -> Completion:
        finish = "length"
        eos_at = next((i for i, t in enumerate(ids) if t in self.eos_ids), None)
        if eos_at is not None:
            ids, finish = ids[: eos_at + 1], "stop"
        ids, text, stopped = cut_at_stop(self.tokenizer, ids, stops)
        if stopped:
            finish = "stop"
        forced = intervention.forced_mask(len(ids)) if intervention is not None else [False] * len(ids)
        return Completion(
            token_ids=ids,
            logprobs=logprobs[: len(ids)],
            text=text,
            finish_reason=finish,
            forced_mask=forced,
            entropy=entropy[: len(ids)] if entropy is not None else None,
            top_prob=top_prob[: len(ids)] if top_prob is not None else None,
        )

    # ---------------------------------------------------------------------------------------------- weights

    def reseed(self, seed: int) -> None:
        """Restart the sampling stream: the trainer seeds each iteration, so a resumed run samples the same."""
        self.rng = EngineRng(seed)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors into the model in place; unknown names or wrong shapes are an error."""
        current = self.model.state_dict()
        incoming: dict[str, torch.Tensor] = {}
        for name, tensor in named_tensors:
            if name not in current:
                raise AgentforgeError(f"update_weights: {name!r} is not a parameter of {self.spec.path}")
            if tuple(tensor.shape) != tuple(current[name].shape):
                raise AgentforgeError(
                    f"update_weights: {name!r} has shape {tuple(tensor.shape)}, the model expects "
                    f"{tuple(current[name].shape)}"
                )
            incoming[name] = tensor
        with torch.no_grad():
            self.model.load_state_dict(incoming, strict=False)

    def sleep(self) -> None:
        """Nothing to free: the model stays resident."""

    def wake(self) -> None:
        """Nothing to restore."""

    def close(self) -> None:
        self.model = None
