"""The driver-facing `Learner`: learner ranks as Ray actors forming one DeepSpeed world (or one in-process rank).

Each rank is a `DeepSpeedLearnerRank` in its own Ray actor, placed by a placement group with one bundle per rank.
The rendezvous address is the node of rank 0 (127.0.0.1 when that is the driver's node), so the same code spans
one laptop and several Slurm nodes. `in_process=True` keeps the single rank in the driver process instead: no
Ray needed, handy for tests and tiny CPU runs; the class is the same, only not wrapped by `ray.remote`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.learner.batch import TurnSample
from agentforge.learner.config import LearnerConfig
from agentforge.learner.deepspeed_learner import TOKEN_MEAN_METRICS, DeepSpeedLearnerRank, is_count
from agentforge.learner.packing import shard_by_tokens, shard_indices_by_tokens
from agentforge.objective import mismatch_metrics, rollout_correction


class Learner:
    """`update(samples)`: the batch's whole PPO update (old log-probs fixed first, then `ppo_epochs` passes over
    mini-batches, one optimizer step each); `step(samples)`: one optimizer step. Metrics come back aggregated over
    ranks (and steps)."""

    def __init__(self, model_path: str, config: LearnerConfig, in_process: bool | None = None,
                 use_gpus: bool | None = None):
        """`in_process=None` follows `config.in_process`; `use_gpus=None` uses GPUs when Ray has one per rank."""
        in_process = config.in_process if in_process is None else in_process
        if in_process and config.num_ranks != 1:
            raise ConfigError(f"in_process=True runs one rank in the driver, but learner.num_ranks="
                              f"{config.num_ranks}; use Ray actors (in_process=False) for several ranks")
        config = dataclasses.replace(config, in_process=in_process)
        config.validate(model_path)
        self.config = config
        self.model_path = str(model_path)
        self.in_process = in_process
        self._placement_group = None
        # a served teacher (learner.teacher.url) is asked from here, not from the ranks: nothing of it is loaded
        self._endpoint_teacher = None
        if config.teacher.url:
            from agentforge.learner.endpoint_teacher import EndpointTeacher

            self._endpoint_teacher = EndpointTeacher(config.teacher, self.model_path)
        if in_process:
            self._local: DeepSpeedLearnerRank | None = DeepSpeedLearnerRank(self.model_path, config)
            self._actors: list[Any] = []
        else:
            self._local = None
            self._actors = self._start_actors(use_gpus)

    # ----------------------------------------------------------------------------------------- ray set-up

    def _start_actors(self, use_gpus: bool | None) -> list[Any]:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from agentforge.cluster.placement import ready_placement_group

        if not ray.is_initialized():
            raise AgentforgeError("the learner's Ray actors need a running Ray runtime: call "
                                  "agentforge.hosting.pool.ensure_ray() (or ray.init(...)) first, or use "
                                  "in_process=True")
        n, cpus = self.config.num_ranks, self.config.num_cpus_per_rank
        gpus = use_gpus if use_gpus is not None else ranks_use_gpus(ray.cluster_resources().get("GPU", 0), n)
        bundle = {"CPU": cpus, **({"GPU": 1} if gpus else {})}
        strategy = self.config.placement_strategy
        self._placement_group = ready_placement_group(
            bundle, n, strategy, "learner ranks", "lower learner.num_ranks or num_cpus_per_rank, or use "
            "learner.placement_strategy=PACK", timeout_s=120)

        def on_bundle(i: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(self._placement_group, placement_group_bundle_index=i)

        probe = ray.remote(_rendezvous_address).options(num_cpus=0, scheduling_strategy=on_bundle(0))
        master_addr, master_port = ray.get(probe.remote(ray.util.get_node_ip_address()))
        env = {"DS_ACCELERATOR": "cuda" if gpus else "cpu", "OMP_NUM_THREADS": str(cpus)}
        remote_rank = ray.remote(DeepSpeedLearnerRank)
        actors = [
            remote_rank.options(
                num_cpus=cpus, num_gpus=1 if gpus else 0, scheduling_strategy=on_bundle(rank),
                runtime_env={"env_vars": env},
            ).remote(self.model_path, self.config, rank, n, master_addr, master_port, 0 if gpus else rank)
            for rank in range(n)
        ]
        try:
            ray.get([a.trainable_parameters.remote() for a in actors])  # surfaces init errors here
        except Exception:
            self._kill(actors)
            raise
        return actors

    # ------------------------------------------------------------------------------------------- calls

    def _call_all(self, method: str, *args: Any, per_rank_args: Sequence[tuple] | None = None) -> list[Any]:
        if self._local is not None:
            return [getattr(self._local, method)(*(per_rank_args[0] if per_rank_args else args))]
        import ray

        refs = [getattr(a, method).remote(*(per_rank_args[i] if per_rank_args else args))
                for i, a in enumerate(self._actors)]
        return ray.get(refs)

    def step(self, samples: Sequence[TurnSample]) -> dict[str, float]:
        """One optimizer step of the policy objective over all samples (sharded across ranks by tokens)."""
        return self._train("step", samples)

    def prepare(self, samples: Sequence[TurnSample]) -> dict[str, float]:
        """What the objective needs before the first update, set on the samples in place: the learner's own old
        log-probs (`old_logprobs: recompute`; the engine's kept as `rollout_logprobs`) with the engine-vs-learner
        mismatch and the rollout-correction weights and rejections, and the reference log-probs (KL). Returns
        metrics (`rollout/*`, `time/prepare`)."""
        started = time.perf_counter()
        samples = list(samples)
        metrics: dict[str, float] = {}
        if not samples:
            return metrics
        if self.config.old_logprobs == "recompute":
            learner_lp = self.compute_logprobs(samples)
            engine_lp = [s.old_logprobs[s.prompt_len:].copy() for s in samples]
            masks = [s.loss_mask[s.prompt_len:].copy() for s in samples]
            metrics.update(mismatch_metrics(learner_lp, engine_lp, masks))
            for sample, logp in zip(samples, learner_lp, strict=True):
                sample.rollout_logprobs = sample.old_logprobs.copy()
                sample.old_logprobs[sample.prompt_len:] = logp
            if self.config.rollout_correction.active:
                correction = rollout_correction(learner_lp, engine_lp, masks, self.config.correction_spec())
                for sample, weight, keep in zip(samples, correction.weights, correction.keep, strict=True):
                    if weight is not None:
                        sample.is_weights = np.concatenate([np.zeros(sample.prompt_len, np.float32), weight])
                    sample.loss_mask[sample.prompt_len:] = keep
                metrics.update(correction.metrics)
        if self.config.needs_reference():
            for sample, ref in zip(samples, self.compute_logprobs(samples, reference=True), strict=True):
                sample.ref_logprobs = np.concatenate([np.zeros(sample.prompt_len, np.float32), ref])
        if metrics or self.config.needs_reference():
            metrics["time/prepare"] = time.perf_counter() - started
        return metrics

    def update(self, samples: Sequence[TurnSample], prepared: bool = False,
               train_policy: bool = True) -> dict[str, float]:
        """The batch's PPO update: `prepare` (unless already done), then `ppo_epochs` passes, each over the batch
        cut into `mini_batch_size` pieces (seeded shuffle when there are several), one optimizer step per piece.
        One epoch of one mini-batch is exactly one `step`. The steps' own metrics are kept in `last_steps`.
        `train_policy=False` (the critic's warm-up): only the critic steps, on the same pieces."""
        metrics = {} if prepared else self.prepare(samples)
        samples = [s for s in samples if s.num_loss_tokens > 0]  # rollout-correction rejection may empty some
        done = self.optimizer_steps()
        rng = np.random.default_rng([int(self.config.seed), done])
        steps: list[dict[str, float]] = []
        critic_steps: list[dict[str, float]] = []
        with_critic = self.config.critic.enabled and any(s.returns is not None for s in samples)
        for epoch in range(self.config.ppo_epochs):
            for piece in mini_batches(samples, self.config.mini_batch_size, self.config.mini_batch_unit,
                                      rng if self.config.shuffle else None):
                if train_policy:
                    steps.append({**self.step(piece), "epoch": float(epoch + 1)})
                if with_critic:  # the critic steps on the same pieces (verl: ppo_epochs and mini-batches alike)
                    critic_steps.append(self.critic_step(piece))
        self.last_steps = steps
        if with_critic:
            metrics.update(critic_metrics(samples, critic_steps))
        if not train_policy:
            metrics["critic_warmup"] = 1.0
        return {**combine_steps(steps), **metrics}

    def critic_step(self, samples: Sequence[TurnSample]) -> dict[str, float]:
        """One optimizer step of the critic's clipped value loss (samples carry `returns` and `old_values`)."""
        return self._train("critic_step", samples)

    def compute_values(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """The critic's value of each sample's response tokens, in the order given (needs learner.critic)."""
        return self._gather("compute_values", samples)

    def compute_teacher_logprobs(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """The teacher's log-prob of each sample's response tokens, in the order given (needs learner.teacher)."""
        if self._endpoint_teacher is not None:
            return self._endpoint_teacher.logprobs(samples)
        return self._gather("compute_teacher_logprobs", samples)

    def optimizer_steps(self) -> int:
        """Optimizer steps taken so far (restored with a checkpoint): seeds each update's mini-batch order."""
        return int(self._call_all("optimizer_steps")[0])

    def reset_reference(self) -> None:
        """Make the KL reference the current policy (after a warm start); a no-op without a KL term."""
        self._call_all("reset_reference")

    def sft_step(self, samples: Sequence[TurnSample], lr: float | None = None) -> dict[str, float]:
        """One optimizer step of token-mean NLL on the masked tokens (supervised warm start); `lr` for this step."""
        return self._train("sft_step", samples, lr)

    def _train(self, method: str, samples: Sequence[TurnSample], *extra: Any) -> dict[str, float]:
        shards = shard_by_tokens(list(samples), self.config.num_ranks, self.config.sharing)
        return aggregate_rank_metrics(self._call_all(method, per_rank_args=[(s, *extra) for s in shards]))

    def compute_logprobs(self, samples: Sequence[TurnSample], reference: bool = False) -> list[np.ndarray]:
        """The learner's log-probs of each sample's response tokens, in the order given (`reference=True`: the
        KL reference policy's)."""
        return self._gather("compute_logprobs", samples, reference)

    def _gather(self, method: str, samples: Sequence[TurnSample], *extra: Any) -> list[np.ndarray]:
        """A per-token inference over the samples sharded across ranks, back in the order given."""
        samples = list(samples)
        owners = shard_indices_by_tokens(samples, self.config.num_ranks, self.config.sharing)
        results = self._call_all(method, per_rank_args=[([samples[i] for i in o], *extra) for o in owners])
        out: list[np.ndarray] = [np.zeros(0)] * len(samples)
        for indices, logps in zip(owners, results, strict=True):
            for i, logp in zip(indices, logps, strict=True):
                out[i] = logp
        return out

    @property
    def actors(self) -> list[Any]:
        """The ranks' Ray actors (empty in process)."""
        return list(self._actors)

    def export_weights(self, only_changed: bool = False, copy: bool = True) -> list[tuple[str, torch.Tensor]]:
        """Rank 0's export in HF names (see `DeepSpeedLearnerRank.export_weights`); collective on all ranks."""
        return self._call_all("export_weights", only_changed, copy)[0]

    def save(self, path: str | os.PathLike[str]) -> None:
        self._call_all("save", str(Path(path).resolve()))

    def load(self, path: str | os.PathLike[str]) -> None:
        self._call_all("load", str(Path(path).resolve()))

    @property
    def rank0(self) -> DeepSpeedLearnerRank:
        """The in-process rank (tests, debugging); only with in_process=True."""
        if self._local is None:
            raise AgentforgeError("rank0 is only reachable in-process; use the Learner methods with Ray actors")
        return self._local

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            self._local = None
        self._kill(self._actors)
        self._actors = []
        if self._placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._placement_group)
            self._placement_group = None

    @staticmethod
    def _kill(actors: list[Any]) -> None:
        if not actors:
            return
        import ray

        for actor in actors:
            ray.kill(actor)

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def critic_metrics(samples: Sequence[TurnSample], steps: list[dict[str, float]]) -> dict[str, float]:
    """The critic's update: its steps' means, and how much of the returns' variance the values it started from
    explained (1: all; <= 0: no better than their mean)."""
    from agentforge.learner.critic import explained_variance

    out: dict[str, float] = {}
    for name in sorted({k for step in steps for k in step}):
        values = [step[name] for step in steps if name in step]
        out[name] = float(np.mean(values)) if name != "critic/lr" else float(values[-1])
    masks = [s.loss_mask[s.prompt_len:] for s in samples]
    out["critic/explained_variance"] = explained_variance([s.old_values[s.prompt_len:] for s in samples],
                                                          [s.returns[s.prompt_len:] for s in samples], masks)
    out["critic/returns_mean"] = float(np.mean(np.concatenate(
        [s.returns[s.prompt_len:][m] for s, m in zip(samples, masks, strict=True)])))
    return out


def mini_batches(samples: list[TurnSample], size: int | None, unit: str,
                 rng: np.random.Generator | None) -> list[list[TurnSample]]:
    """The batch cut into optimizer steps: all of it (`size` None), or pieces of `size` turn samples (`unit:
    turns`) or of at least `size` loss tokens (`unit: tokens`, whole samples each), in a shuffled order when `rng`
    is given and there is more than one piece."""
    if size is None or not samples:
        return [samples]
    pieces_needed = len(samples) > size if unit == "turns" else sum(s.num_loss_tokens for s in samples) > size
    if not pieces_needed:
        return [samples]
    order = list(rng.permutation(len(samples))) if rng is not None else list(range(len(samples)))
    pieces: list[list[TurnSample]] = [[]]
    filled = 0
    for i in order:
        if pieces[-1] and filled >= size:
            pieces.append([])
            filled = 0
        pieces[-1].append(samples[i])
        filled += 1 if unit == "turns" else samples[i].num_loss_tokens
    return pieces


def combine_steps(steps: list[dict[str, float]]) -> dict[str, float]:
    """One update's metrics from its optimizer steps: one step is reported as it is; several give token-weighted
    means of per-token metrics, the first epoch's token and sample counts, the mean grad norm, the last lr, summed
    times and counts (`count/*` included), the engine-vs-learner mismatch of the first step (later ones measure
    the policy's own move), and each epoch's clip fraction (`clip_fraction_epoch_<k>`: the clip acts from the
    second epoch on, when the policy has moved away from pi_old)."""
    if len(steps) <= 1:
        return {k: v for k, v in (steps[0] if steps else {}).items() if k != "epoch"}
    out: dict[str, float] = {}
    weights = [s.get("tokens", 0.0) for s in steps]
    total = sum(weights) or 1.0
    for name in TOKEN_MEAN_METRICS:
        if any(name in s for s in steps):
            out[name] = sum(s.get(name, 0.0) * w for s, w in zip(steps, weights, strict=True)) / total
    first = [s for s in steps if s.get("epoch", 1.0) == 1.0]
    out["tokens"] = sum(s.get("tokens", 0.0) for s in first)
    out["samples"] = sum(s.get("samples", 0.0) for s in first)
    norms = [s["grad_norm"] for s in steps if "grad_norm" in s]
    if norms:
        out["grad_norm"] = float(np.mean(norms))
        out["grad_norm_max"] = float(np.max(norms))
    out["lr"] = steps[-1].get("lr", float("nan"))
    for name in ("step_time_s", "micro_batches", "skipped", *sorted({k for s in steps for k in s if is_count(k)})):
        out[name] = sum(s.get(name, 0.0) for s in steps)
    for name in ("logprob_mismatch", "logprob_mismatch_max"):  # engine vs learner: before any update only
        if name in steps[0]:
            out[name] = steps[0][name]
    out["optimizer_steps"] = float(len(steps))
    for epoch in sorted({s.get("epoch", 1.0) for s in steps}):
        these = [s for s in steps if s.get("epoch", 1.0) == epoch and "clip_fraction" in s]
        w = [s.get("tokens", 0.0) for s in these]
        if these:
            out[f"clip_fraction_epoch_{int(epoch)}"] = sum(
                s["clip_fraction"] * x for s, x in zip(these, w, strict=True)) / (sum(w) or 1.0)
    return out


def aggregate_rank_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """Rank metrics -> one dict: token-weighted means for per-token quantities, sums for counts, maxima for
    maxima and times, rank 0's value for what all ranks share (grad_norm, lr, skipped)."""
    if len(per_rank) == 1:
        return dict(per_rank[0])
    out = dict(per_rank[0])
    weights = [m.get("tokens", 0.0) for m in per_rank]
    total = sum(weights)
    for name in TOKEN_MEAN_METRICS:
        if name in out and total > 0:
            out[name] = sum(m.get(name, 0.0) * w for m, w in zip(per_rank, weights, strict=True)) / total
    for name in ("tokens", "samples", *sorted({k for m in per_rank for k in m if is_count(k)})):
        if any(name in m for m in per_rank):
            out[name] = sum(m.get(name, 0.0) for m in per_rank)
    for name in ("logprob_mismatch_max", "step_time_s", "micro_batches", "skipped"):
        if name in out:
            out[name] = max(m.get(name, 0.0) for m in per_rank)
    return out


def ranks_use_gpus(cluster_gpus: float, num_ranks: int) -> bool:
    """One GPU per rank when the cluster has enough; none on a CPU-only cluster. Fewer GPUs than ranks is refused:
    training on the CPU while GPUs sit idle is never what a GPU cluster's user meant."""
    if cluster_gpus >= num_ranks:
        return True
    if cluster_gpus > 0:
        raise ConfigError(
            f"learner.num_ranks={num_ranks} needs one GPU per rank but the Ray cluster has {cluster_gpus:g} GPU(s); "
            f"set learner.num_ranks={int(cluster_gpus)} (or add GPUs), or hide the GPUs (CUDA_VISIBLE_DEVICES= / "
            "`ray start --num-gpus=0`) to train on CPU ranks")
    return False


def _rendezvous_address(driver_ip: str) -> tuple[str, int]:
    """Runs on rank 0's node: its address (loopback when it is the driver's node) and a free port there."""
    import ray

    from agentforge.engines.replicas.weight_group import free_port

    ip = ray.util.get_node_ip_address()
    return ("127.0.0.1" if ip == driver_ip else ip), free_port()
