"""`ReplicatedEngine`: N rollout engines hosted as Ray actors behind the RolloutEngine protocol.

Each replica is `engine.tensor_parallel_size` devices wide (GPUs) or `engine.replica_cpus` threads (CPU), placed by
one placement group (a bundle per replica, spread over nodes by default). A generate call is split by the router
(sticky per episode key, least-loaded otherwise), the parts run on their replicas at once and come back in the
caller's order, each completion marked with the weight version that sampled it (with `engine.interrupt_tokens` a
push may land inside a call: the completion then lists where the version changed, `interruptible.py`). Weights
reach every replica over one process group (gloo on CPU, NCCL on GPU: `weight_group.py`) or, as the fallback,
through Ray's object store.

Faults: a replica that dies while generating or scoring is restarted on its bundle, given the current weights (from
`weight_source`, the learner's export) and its part of the call is submitted again, at most `max_restarts` times per
call; dead replicas found before a push are restarted first; a push no replica acknowledges within
`sync_timeout_s` fails with the replicas named.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch

from agentforge.engines.interventions import InterventionSpec
from agentforge.engines.replicas.actor import EngineReplica
from agentforge.engines.replicas.options import ReplicaOptions
from agentforge.engines.replicas.router import Router
from agentforge.engines.replicas.senders import LocalSender, WeightSender
from agentforge.engines.replicas.weight_group import default_backend, free_port
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Completion, SamplingConfig

log = logging.getLogger("agentforge.engines.replicas")

COLOCATED_CPU = 0.01  # a colocated replica's Ray bundle on CPU: a token amount (Ray refuses empty bundles)
WeightSource = Callable[[], Iterable[tuple[str, torch.Tensor]]]


def replica_resources(options: ReplicaOptions, tensor_parallel: int, cluster: dict[str, float],
                      nodes: list[dict[str, Any]], free: dict[str, float] | None = None) -> dict[str, float]:
    """The Ray bundle of one replica, after checking that all replicas fit the cluster and what is free of it now
    (`free`; refused before any starts)."""
    bundle = _replica_bundle(options, tensor_parallel, cluster, nodes)
    n = int(options.replicas or 0)
    for resource, amount in bundle.items():
        if free is not None and amount and n * amount > float(free.get(resource, 0)) + 1e-9:
            raise ConfigError(f"engine.replicas={n} need {n * amount:g} {resource}; {free.get(resource, 0):g} of the "
                              f"cluster's {cluster.get(resource, 0):g} are free (other actors hold the rest): lower "
                              "engine.replicas or engine.replica_cpus, or close what holds them")
    return bundle


def _replica_bundle(options: ReplicaOptions, tensor_parallel: int, cluster: dict[str, float],
                    nodes: list[dict[str, Any]]) -> dict[str, float]:
    n, gpus = int(options.replicas or 0), float(cluster.get("GPU", 0))
    if gpus > 0:
        per_node = sorted({float(node.get("Resources", {}).get("GPU", 0)) for node in nodes if node.get("Alive")})
        if any(g % tensor_parallel for g in per_node if g):
            raise ConfigError(f"engine.tensor_parallel_size={tensor_parallel} does not divide the GPUs of a node "
                              f"({', '.join(f'{g:g}' for g in per_node)}); choose a divisor")
        if options.colocate:
            raise ConfigError("engine.colocate=true is not built on GPUs yet: learner ranks take whole GPUs, so a "
                              "replica cannot share one (it needs one placement group for both); use "
                              "engine.colocate=false, or the in-process engine with engine.enable_sleep_mode=true")
        if n * tensor_parallel > gpus:
            raise ConfigError(f"engine.replicas={n} × engine.tensor_parallel_size={tensor_parallel} needs "
                              f"{n * tensor_parallel} GPUs; the Ray cluster has {gpus:g}: lower either")
        return {"CPU": float(options.replica_cpus), "GPU": float(tensor_parallel)}
    if tensor_parallel != 1:
        raise ConfigError(f"engine.tensor_parallel_size={tensor_parallel} needs GPUs; the Ray cluster has none: "
                          "use 1 on CPU (more replicas instead)")
    if options.colocate:
        return {"CPU": COLOCATED_CPU}  # shares the learner's cores: it sleeps while the learner trains
    need, cpus = n * options.replica_cpus, float(cluster.get("CPU", 0))
    if need > cpus:
        raise ConfigError(f"engine.replicas={n} × engine.replica_cpus={options.replica_cpus} needs {need} CPU slots; "
                          f"the Ray cluster has {cpus:g}: lower either (or engine.colocate=true to share cores)")
    return {"CPU": float(options.replica_cpus)}


def free_resources(bundle: dict[str, float], n: int, wait_s: float = 15.0) -> dict[str, float]:
    """Ray's free resources, waiting a little for them to cover `n` bundles (a placement group just removed frees
    its resources asynchronously)."""
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        free = ray.available_resources()
        if all(n * amount <= free.get(k, 0) + 1e-9 for k, amount in bundle.items()) or time.monotonic() > deadline:
            return free
        time.sleep(0.25)


def _first(chunked: int | None, call: int) -> int:
    """A completion's version: its first chunk's (interruptible generation), else the call's."""
    return call if chunked is None else chunked


class ReplicatedEngine:
    """The RolloutEngine protocol over `options.replicas` Ray-hosted engines (see the module docstring)."""

    routes_by_key = True  # RolloutContext passes each request's episode key

    def __init__(self, name: str, spec: Any, engine_options: dict[str, Any], options: ReplicaOptions) -> None:
        import ray
        from transformers import AutoTokenizer

        from agentforge.cluster.placement import ready_placement_group
        from agentforge.cluster.ray_runtime import ensure_ray

        ensure_ray()
        self.name, self.spec, self.options = name, spec, options
        self.engine_options = dict(engine_options)
        tp = int(self.engine_options.get("tensor_parallel_size", 1) or 1)
        n = int(options.replicas or 1)
        cluster, nodes = ray.cluster_resources(), ray.nodes()
        wanted = _replica_bundle(options, tp, cluster, nodes)
        self.bundle = replica_resources(options, tp, cluster, nodes, free_resources(wanted, n))
        self.placement_group = ready_placement_group(
            self.bundle, n, options.placement_strategy, "engine replicas", "lower engine.replicas or "
            "engine.replica_cpus, or use engine.placement_strategy=PACK", timeout_s=60)
        self.tokenizer = AutoTokenizer.from_pretrained(spec.path)
        self.router = Router(n)
        self.version = 0
        self.restarts = 0
        self.weight_source: WeightSource | None = None
        self.last_sync: dict[str, float] = {}
        self._seed: int | None = None
        self._sender: WeightSender | None = None  # rank 0 of the formed weight group
        self._local_sender = LocalSender()
        self.actors: list[Any] = [None] * n
        try:
            for i in range(n):
                self.actors[i] = self._start_actor(i)
            self.replicas = ray.get([a.describe.remote() for a in self.actors])
        except Exception:
            self.close()
            raise
        self.vocab_size = int(self.replicas[0]["vocab_size"])

    # ------------------------------------------------------------------------------------------ actors
    def _start_actor(self, index: int) -> Any:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=index)
        threads = self.options.replica_cpus
        interrupt = self.options.interrupt_tokens
        remote = ray.remote(EngineReplica).options(
            num_cpus=self.bundle.get("CPU", 0), num_gpus=self.bundle.get("GPU", 0), scheduling_strategy=strategy,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads), "VLLM_LOGGING_LEVEL": "ERROR"}},
            max_restarts=0, max_concurrency=4 if interrupt else 1)  # a push (and pings) beside a generate call
        return remote.remote(index, self.name, self.spec, self.engine_options, threads, interrupt)

    def _restart(self, index: int, error: BaseException) -> None:
        """A new actor on replica `index`'s bundle, with the current weights and the sampling stream reseeded."""
        import ray

        self.restarts += 1
        log.warning("engine replica %d died (%s); restarting it", index, type(error).__name__)
        with contextlib.suppress(Exception):  # already gone
            ray.kill(self.actors[index], no_restart=True)
        self.actors[index] = self._start_actor(index)
        self.replicas[index] = ray.get(self.actors[index].describe.remote())
        self._leave_group()  # the group lost a member: it forms again at the next push
        if self.version > 0:
            if self.weight_source is None:
                raise AgentforgeError(f"engine replica {index} was restarted but its engine has no way to get the "
                                      f"current weights (version {self.version}): set ReplicatedEngine.weight_source")
            ray.get(self.actors[index].update_weights.remote(list(self.weight_source()), self.version))
        if self._seed is not None:
            ray.get(self.actors[index].reseed.remote(self._replica_seed(self._seed, index) + 104_729 * self.restarts))

    def _call(self, parts: dict[int, Callable[[Any], Any]], submitted: dict[int, Any] | None = None) -> dict[int, Any]:
        """Run `parts[replica](actor)` (a remote call) on each replica at once (or collect the `submitted` ref of
        that call); restart a replica that dies and run its part again."""
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        pending = {r: (submitted or {}).get(r) or fn(self.actors[r]) for r, fn in parts.items()}
        out: dict[int, Any] = {}
        attempts = dict.fromkeys(parts, 0)
        while pending:
            for r, ref in list(pending.items()):
                try:
                    out[r] = ray.get(ref)
                    del pending[r]
                except (ActorDiedError, ActorUnavailableError, RayActorError) as error:
                    attempts[r] += 1
                    if attempts[r] > self.options.max_restarts:
                        raise AgentforgeError(f"engine replica {r} died {attempts[r]} times in one call; giving up "
                                              f"(engine.max_restarts={self.options.max_restarts}): {error}") from error
                    self._restart(r, error)
                    pending[r] = parts[r](self.actors[r])
        return out

    # ------------------------------------------------------------------------------------------ generation
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig,
                 interventions: list[InterventionSpec | None] | None = None,
                 keys: Sequence[Hashable | None] | None = None) -> list[Completion]:
        if not prompts:
            return []
        routed = self.router.route(list(keys) if keys is not None else [None] * len(prompts))
        by_replica: dict[int, list[int]] = {}
        for i, r in enumerate(routed):
            by_replica.setdefault(r, []).append(i)

        def part(indices: list[int]) -> Callable[[Any], Any]:
            sub_prompts = [prompts[i] for i in indices]
            sub_specs = [interventions[i] for i in indices] if interventions is not None else None
            return lambda actor: actor.generate.remote(sub_prompts, sampling, sub_specs)

        try:
            results = self._call({r: part(indices) for r, indices in by_replica.items()})
        finally:
            for r, indices in by_replica.items():
                self.router.done(r, len(indices))
        out: list[Completion | None] = [None] * len(prompts)
        for r, (version, completions) in results.items():
            for i, completion in zip(by_replica[r], completions, strict=True):
                out[i] = replace(completion, policy_version=_first(completion.policy_version, version), replica=r)
        return [c for c in out if c is not None]

    # ------------------------------------------------------------------------------------------ lanes
    @property
    def lanes(self) -> int:
        """Per-episode scheduling sends each replica its own generate calls, one in flight at a time."""
        return len(self.actors)

    def lane_of(self, key: Hashable) -> int:
        return self.router.assign(key)

    def submit_lane(self, lane: int, prompts: list[list[int]], sampling: SamplingConfig,
                    interventions: list[InterventionSpec | None] | None) -> Any:
        """Start a generate call on replica `lane`; `finish_lane` collects it (the ref to wait on is returned)."""
        return self.actors[lane].generate.remote(prompts, sampling, interventions)

    def finish_lane(self, lane: int, ref: Any, prompts: list[list[int]], sampling: SamplingConfig,
                    interventions: list[InterventionSpec | None] | None) -> list[Completion]:
        """The completions of a `submit_lane` call; a replica that died meanwhile is restarted and the call run
        again on it (nothing lost)."""
        results = self._call({lane: lambda actor: actor.generate.remote(prompts, sampling, interventions)},
                             submitted={lane: ref})
        version, completions = results[lane]
        return [replace(c, policy_version=_first(c.policy_version, version), replica=lane) for c in completions]

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        n = len(self.actors)
        chunks = {r: list(range(r, len(prompts), n)) for r in range(n) if r < len(prompts)}
        def part(indices: list[int]) -> Callable[[Any], Any]:
            sub = ([prompts[i] for i in indices], [responses[i] for i in indices])
            return lambda actor: actor.score.remote(*sub)

        results = self._call({r: part(indices) for r, indices in chunks.items()})
        out: list[list[float]] = [[] for _ in prompts]
        for r, values in results.items():
            for i, v in zip(chunks[r], values, strict=True):
                out[i] = v
        return out

    @staticmethod
    def _replica_seed(seed: int, index: int) -> int:
        return seed if index == 0 else (seed + 7_919 * index) % 2**31  # one replica: the in-process engine's stream

    def reseed(self, seed: int) -> None:
        import ray

        self._seed = int(seed)
        ray.get([a.reseed.remote(self._replica_seed(int(seed), i)) for i, a in enumerate(self.actors)])

    # ------------------------------------------------------------------------------------------ weights
    def _ensure_alive(self) -> None:
        """Restart replicas that died since the last call (a hung one is not restarted here: the push then times
        out and names it)."""
        import ray
        from ray.exceptions import RayActorError

        refs = [actor.ping.remote() for actor in self.actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=min(5.0, self.options.sync_timeout_s))
        for i, ref in enumerate(refs):
            if ref in ready:
                try:
                    ray.get(ref)
                except RayActorError as error:
                    self._restart(i, error)

    def _form_group(self, sender: WeightSender) -> None:
        """Replicas as ranks 1..N and `sender` as rank 0 of one process group (formed again when the sender changes
        or a member was replaced)."""
        import ray

        if self._sender is not None and self._sender.key == sender.key:
            return
        self._leave_group()
        backend = default_backend() if self.options.sync_backend == "auto" else self.options.sync_backend
        sender_ip = sender.address()
        local = {r["node_ip"] for r in self.replicas} <= {sender_ip} and sender_ip == ray.util.get_node_ip_address()
        host = "127.0.0.1" if local else sender_ip
        port = self.options.sync_port or free_port()
        world = len(self.actors) + 1
        timeout = self.options.sync_timeout_s
        joins = [a.join_weight_group.remote(host, port, i + 1, world, backend, timeout)
                 for i, a in enumerate(self.actors)]
        joins += sender.join(host, port, world, backend, timeout)
        self._wait(joins, "join the weight group")
        self._sender = sender

    def _leave_group(self) -> None:
        import ray

        if self._sender is None:
            return
        with contextlib.suppress(Exception):
            self._sender.leave()
        self._sender = None
        for actor in self.actors:
            with contextlib.suppress(Exception):  # a dead member: it is being replaced
                ray.get(actor.leave_weight_group.remote(), timeout=30)

    def _wait(self, refs: list[Any], what: str) -> list[Any]:
        import ray

        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.options.sync_timeout_s)
        late = [i for i, ref in enumerate(refs) if ref not in ready]
        if late:
            nodes = [self.replicas[i]["node_ip"] for i in late]
            raise AgentforgeError(f"engine replica(s) {late} did not {what} within engine.sync_timeout_s="
                                  f"{self.options.sync_timeout_s:g} s (on {nodes}); the run stops rather than roll "
                                  "out with stale weights")
        return ray.get(refs)

    def continue_from(self, version: int) -> None:
        """A resumed run: its first push re-sends the checkpoint's weights, so it takes the version those weights
        had (`version`, the checkpoint's `engine/version`), and later pushes count on from it."""
        if self.version:
            raise AgentforgeError(f"continue_from({version}) after {self.version} push(es): call it before the first")
        self.version = max(0, int(version) - 1)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Push tensors held in this process to every replica: one version more."""
        import ray

        named = list(named_tensors)
        if self.options.weight_sync == "object_store":
            self._ensure_alive()
            started, version = time.perf_counter(), self.version + 1
            stored = ray.put(named)  # once: every replica reads the same stored copy
            self._wait([a.update_weights.remote(stored, version) for a in self.actors], "take the weights")
            self._pushed(version, started, float(sum(t.numel() * t.element_size() for _, t in named)))
        else:
            self.update_weights_from(self._local_sender.load(named))

    def update_weights_from(self, sender: WeightSender) -> None:
        """Push over the weight group from `sender` (rank 0): the changed weights, in buckets, one version more."""
        import ray

        self._ensure_alive()
        started, version = time.perf_counter(), self.version + 1
        self._form_group(sender)
        manifest = sender.prepare(version, int(self.options.sync_bucket_mb * 2**20))
        refs = [a.receive_weights.remote(manifest) for a in self.actors]
        try:
            sender.send(manifest)
        except Exception as error:
            self._sender = None  # a broken group forms again at the next push
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=1)
            late = [i for i, ref in enumerate(refs) if ref not in ready]
            raise AgentforgeError(f"the weight push (version {version}) failed: replica(s) {late} did not take it "
                                  f"within engine.sync_timeout_s={self.options.sync_timeout_s:g} s ({error})"
                                  ) from error
        self._wait(refs, "take the weights")
        self._pushed(version, started, float(manifest.nbytes))

    def _pushed(self, version: int, started: float, nbytes: float) -> None:
        self.version = version
        self.router.forget()
        self.last_sync = {"engine/sync_seconds": time.perf_counter() - started, "engine/sync_bytes": nbytes,
                          "engine/version": float(version), "engine/replica_restarts": float(self.restarts)}

    # ------------------------------------------------------------------------------------------ memory
    def sleep(self) -> None:
        import ray

        ray.get([a.sleep.remote() for a in self.actors])

    def wake(self) -> None:
        import ray

        ray.get([a.wake.remote() for a in self.actors])

    def take_events(self) -> list[list[tuple[str, int]]]:
        import ray

        return ray.get([a.take_events.remote() for a in self.actors])

    def close(self) -> None:
        import ray
        from ray.util.placement_group import placement_group_table, remove_placement_group

        with contextlib.suppress(Exception):
            self._leave_group()
        for actor in getattr(self, "actors", []):
            if actor is None:
                continue
            with contextlib.suppress(Exception):  # dead or stuck: killed below
                ray.get(actor.close.remote(), timeout=30)
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self.actors = []
        group = getattr(self, "placement_group", None)
        self.placement_group = None
        if group is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(group)
                deadline = time.monotonic() + 10  # removal is asynchronous: the next engine may need these slots
                while placement_group_table(group).get("state") != "REMOVED" and time.monotonic() < deadline:
                    time.sleep(0.1)
