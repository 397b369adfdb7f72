"""The driver-facing `Learner`: learner ranks as Ray actors forming one DeepSpeed world (or one in-process rank).

Each rank is a `DeepSpeedLearnerRank` in its own Ray actor, placed by a placement group with one bundle per rank.
The rendezvous address is the node of rank 0 (127.0.0.1 when that is the driver's node), so the same code spans
one laptop and several Slurm nodes. `in_process=True` keeps the single rank in the driver process instead: no
Ray needed, handy for tests and tiny CPU runs; the class is the same, only not wrapped by `ray.remote`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.learner.batch import TurnSample
from agentforge.learner.config import LearnerConfig
from agentforge.learner.deepspeed_learner import TOKEN_MEAN_METRICS, DeepSpeedLearnerRank
from agentforge.learner.packing import shard_by_tokens, shard_indices_by_tokens


class Learner:
    """One optimizer step per `step(samples)` over however many ranks; metrics come back aggregated."""

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
        if in_process:
            self._local: DeepSpeedLearnerRank | None = DeepSpeedLearnerRank(self.model_path, config)
            self._actors: list[Any] = []
        else:
            self._local = None
            self._actors = self._start_actors(use_gpus)

    # ----------------------------------------------------------------------------------------- ray set-up

    def _start_actors(self, use_gpus: bool | None) -> list[Any]:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not ray.is_initialized():
            raise AgentforgeError("the learner's Ray actors need a running Ray runtime: call "
                                  "agentforge.envs.pool.ensure_ray() (or ray.init(...)) first, or use in_process=True")
        n, cpus = self.config.num_ranks, self.config.num_cpus_per_rank
        gpus = use_gpus if use_gpus is not None else ranks_use_gpus(ray.cluster_resources().get("GPU", 0), n)
        bundle = {"CPU": cpus, **({"GPU": 1} if gpus else {})}
        strategy = self.config.placement_strategy
        self._placement_group = placement_group([dict(bundle) for _ in range(n)], strategy=strategy)
        try:
            ray.get(self._placement_group.ready(), timeout=120)
        except Exception as err:
            remove_placement_group(self._placement_group)
            raise AgentforgeError(f"could not place {n} learner ranks of {bundle} each ({strategy}); the Ray cluster "
                                  f"has {ray.cluster_resources()} on {len(ray.nodes())} node(s); lower "
                                  "learner.num_ranks or num_cpus_per_rank, or use learner.placement_strategy=PACK"
                                  ) from err

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
        """One optimizer step of the clipped policy loss over all samples (sharded across ranks by tokens)."""
        return self._train("step", samples)

    def sft_step(self, samples: Sequence[TurnSample], lr: float | None = None) -> dict[str, float]:
        """One optimizer step of token-mean NLL on the masked tokens (supervised warm start); `lr` for this step."""
        return self._train("sft_step", samples, lr)

    def _train(self, method: str, samples: Sequence[TurnSample], *extra: Any) -> dict[str, float]:
        shards = shard_by_tokens(list(samples), self.config.num_ranks, self.config.share_prompts)
        return aggregate_rank_metrics(self._call_all(method, per_rank_args=[(s, *extra) for s in shards]))

    def compute_logprobs(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """The learner's log-probs of each sample's response tokens, in the order given."""
        samples = list(samples)
        owners = shard_indices_by_tokens(samples, self.config.num_ranks, self.config.share_prompts)
        results = self._call_all("compute_logprobs", per_rank_args=[([samples[i] for i in o],) for o in owners])
        out: list[np.ndarray] = [np.zeros(0)] * len(samples)
        for indices, logps in zip(owners, results, strict=True):
            for i, logp in zip(indices, logps, strict=True):
                out[i] = logp
        return out

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
    for name in ("tokens", "samples"):
        if name in out:
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

    from agentforge.learner.deepspeed_learner import free_port

    ip = ray.util.get_node_ip_address()
    return ("127.0.0.1" if ip == driver_ip else ip), free_port()
