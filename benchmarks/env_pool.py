"""Env steps/s through the Ray pool vs in-process (LocalEnvPool), on the same episodes, in one run (ratios, since
machines are noisy). The issue's target: Ray at >= 0.8x in-process.

    python benchmarks/env_pool.py [--envs sokoban alfworld] [--episodes 32 64] [--steps 20] [--workers 2]

Every episode steps a random admissible action (seeded per slot, so all pools play exactly the same actions) for
`--steps` turns, all pools in lockstep; only the batched `step` calls are timed (resets are reported apart).
Pools: in-process, Ray with each of `--workers` actors, and a candidate change measured against the pool in the
same run (`ray_<n>w_stdlib_pickle`: each batch's results pickled by the stdlib in the actor instead of going
through Ray's serializer, which visits every nested object in Python). Also reports a bare actor round trip and the
pickled size of one turn's results: what Ray adds per call. Writes
benchmarks/results/env_pool.json (with the CPU model, torch's CPU capability and the core count) and prints one
summary line.
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import random
import time
from pathlib import Path
from typing import Any

from _report import publish

from agentforge.hosting.pool import EnvHost, EnvPool, LocalEnvPool, RayEnvPool, ensure_ray
from agentforge.types import Task

OPTIONS: dict[str, dict[str, Any]] = {
    "sokoban": {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 100},
    "alfworld": {"max_steps": 100},
}


class PackedHost(EnvHost):
    """EnvHost that returns a batch's results pickled by the stdlib (the candidate change)."""

    def packed(self, method: str, payload: list[tuple[int, Any]]) -> bytes:
        return pickle.dumps(getattr(self, method)(payload), protocol=pickle.HIGHEST_PROTOCOL)


class StdlibPicklePool(RayEnvPool):
    """The Ray pool with results shipped as stdlib pickles (no crash recovery: for measuring only)."""

    def _new_worker(self) -> Any:
        import ray

        return ray.remote(PackedHost).options(**self.actor_options).remote(self.env_factory, self.env_options)

    def _call_all(self, method: str, groups: dict[int, list[tuple[int, Any]]]) -> dict[int, Any]:
        import ray

        refs = {w: self._workers[w].packed.remote(method, payload) for w, payload in groups.items()}
        out: dict[int, Any] = {}
        for w, ref in refs.items():
            out.update(zip([slot for slot, _ in groups[w]], pickle.loads(ray.get(ref)), strict=True))
        return out


def machine() -> dict[str, Any]:
    """What the figures were measured on: they differ a lot between CPU kinds (FACTS)."""
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        capability = "torch not installed"
    return {"cpu_model": model, "torch_cpu_capability": capability, "cores": os.cpu_count(),
            "python": platform.python_version()}


class Player:
    """One pool playing `episodes` slots; every slot steps a random admissible action, seeded per slot."""

    def __init__(self, pool: EnvPool, env: str, episodes: int) -> None:
        self.pool, self.env, self.episodes = pool, env, episodes
        self.step_s = self.reset_s = 0.0
        self.steps = self.turns = self.payload = 0

    def reset(self) -> None:
        self.rngs = [random.Random(slot) for slot in range(self.episodes)]
        t0 = time.perf_counter()
        self.observations = dict(enumerate(self.pool.reset([Task(self.env, s) for s in range(self.episodes)])))
        self.reset_s += time.perf_counter() - t0

    def turn(self) -> list[Any]:
        """One batched step of every active slot; returns what the slots showed (to check both pools agree)."""
        actions = {s: self.rngs[s].choice(self.observations[s].admissible or ["look"]) for s in self.pool.active_slots}
        t0 = time.perf_counter()
        results = self.pool.step(actions)
        self.step_s += time.perf_counter() - t0
        self.steps += len(results)
        self.turns += 1
        self.payload = max(self.payload, len(pickle.dumps(list(results.values()), protocol=5)))
        for slot, result in results.items():
            self.observations[slot] = result.observation
        return sorted((s, r.observation.anchor, r.reward) for s, r in results.items())

    def report(self) -> dict[str, Any]:
        return {"steps": self.steps, "step_s": self.step_s, "steps_per_s": self.steps / self.step_s,
                "turn_ms": 1000 * self.step_s / max(self.turns, 1), "reset_s": self.reset_s,
                "turn_payload_bytes": self.payload}


def ray_round_trip_ms(pool: RayEnvPool, calls: int = 200) -> float:
    """A bare actor call (no env work): the floor of every batched step."""
    import ray

    worker = pool._workers[0]
    ray.get(worker.pid.remote())
    t0 = time.perf_counter()
    for _ in range(calls):
        ray.get(worker.pid.remote())
    return 1000 * (time.perf_counter() - t0) / calls


def measure(env: str, episodes: int, steps: int, workers: list[int], rounds: int, candidate: bool) -> dict[str, Any]:
    """The same episodes in every pool, stepped turn by turn in lockstep (local, then each Ray pool), so load from
    other processes on a shared machine falls on all pools alike; `rounds` resets, `steps` turns each."""
    load_before = os.getloadavg()[0]  # the machine may be shared: say how busy it was
    pools: dict[str, EnvPool] = {"local": LocalEnvPool(env, OPTIONS[env])}
    pools.update({f"ray_{w}w": RayEnvPool(env, OPTIONS[env], num_workers=w) for w in workers})
    if candidate:
        pools[f"ray_{workers[0]}w_stdlib_pickle"] = StdlibPicklePool(env, OPTIONS[env], num_workers=workers[0])
    try:
        round_trip = {name: ray_round_trip_ms(pool) for name, pool in pools.items() if isinstance(pool, RayEnvPool)}
        players = {name: Player(pool, env, episodes) for name, pool in pools.items()}
        for _ in range(rounds):
            for player in players.values():
                player.reset()
            for _ in range(steps):
                if not players["local"].pool.active_slots:
                    break
                shown = [player.turn() for player in players.values()]
                if any(s != shown[0] for s in shown):
                    raise AssertionError(f"{env}: the pools played different episodes")
    finally:
        for pool in pools.values():
            pool.close()
    out: dict[str, Any] = {"episodes": episodes, "ray_round_trip_ms": round_trip,
                           "load_average_1m": {"start": load_before, "end": os.getloadavg()[0]}}
    out.update({name: player.report() for name, player in players.items()})
    local = players["local"].report()["steps_per_s"]
    out["ray_over_local"] = {name: out[name]["steps_per_s"] / local for name in players if name != "local"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["sokoban", "alfworld"], choices=sorted(OPTIONS))
    parser.add_argument("--episodes", nargs="+", type=int, default=[32, 64])
    parser.add_argument("--steps", type=int, default=20, help="turns per round (every active slot steps each turn)")
    parser.add_argument("--alfworld-steps", type=int, default=6, help="turns per round for ALFWorld (slow steps)")
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 1], help="Ray pools to compare (workers each)")
    parser.add_argument("--rounds", type=int, default=3, help="resets per measurement (ALFWorld: 1)")
    parser.add_argument("--candidate-envs", nargs="*", default=["sokoban"],
                        help="envs that also run the candidate pool (StdlibPicklePool); ALFWorld's ~50 ms steps "
                             "hide what it could save")
    args = parser.parse_args()
    ensure_ray(num_cpus=os.cpu_count())
    results: dict[str, dict[str, Any]] = {}
    for env in args.envs:
        # ALFWorld resets take ~0.5-1 s per env: one round, and only the first Ray pool
        steps, rounds, workers = ((args.alfworld_steps, 1, args.workers[:1]) if env == "alfworld"
                                  else (args.steps, args.rounds, args.workers))
        candidate = env in args.candidate_envs
        results[env] = {str(n): measure(env, n, steps, workers, rounds, candidate) for n in args.episodes}
    report = {"config": vars(args), "machine": machine(), "results": results}
    main_pool = f"ray_{args.workers[0]}w"
    parts = []
    for env, by_n in results.items():
        for n, r in by_n.items():
            candidate = r["ray_over_local"].get(f"{main_pool}_stdlib_pickle")
            parts.append(f"{env} x{n}: local {r['local']['steps_per_s']:.0f} {main_pool} "
                         f"{r[main_pool]['steps_per_s']:.0f} steps/s ({r['ray_over_local'][main_pool]:.2f}x"
                         + (f", stdlib pickle {candidate:.2f}x)" if candidate is not None else ")"))
    load = os.getloadavg()[0]
    publish("env_pool", report,
            f"env pool steps/s, Ray vs in-process, {report['machine']['cores']} cores (load {load:.1f}): "
            + " | ".join(parts))


if __name__ == "__main__":
    main()
