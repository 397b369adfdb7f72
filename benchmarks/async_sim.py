"""A SIMULATION (not a measurement): GPU utilisation and speed-up of synchronous vs asynchronous training at 8 and
64 GPUs, from measured env step times and stated GPU-speed assumptions.

    python benchmarks/async_sim.py [--episodes 40] [--seed 0]

What is measured: ALFWorld's real step time distribution on this machine (random admissible actions through the
real engine, `--episodes` episodes). What is assumed (the model; change the constants below to yours):
- A 7B policy, one GPU per engine replica, continuous batching: a replica serves up to `CONCURRENCY` sequences at
  once, each decoding `DECODE_TOK_S` tokens/s and prefilling `PREFILL_TOK_S` tokens/s, independent of the others.
- Episodes: turns per episode lognormal (median `TURNS_MEDIAN`, σ `TURNS_SIGMA`, at most `MAX_TURNS`: heavy-tailed
  lengths), response tokens per turn lognormal (median `TOKENS_MEDIAN`, σ 0.6), prompt `PROMPT_TOKENS` per turn
  (prefix-cached: only the new observation, `NEW_PROMPT_TOKENS`, is prefilled after the first turn).
- Env steps run on CPU workers without limit, their seconds drawn from the measured distribution (`alfworld`) or a
  heavy-tailed tool/web env (`tool`: lognormal, median 0.5 s, σ 1.2, at most 30 s).
- Training: `TRAIN_TOK_S_PER_GPU` tokens/s per GPU (forward + backward + optimizer of a 7B model, ZeRO-3), linear in
  GPUs; a weight push takes `SYNC_S` seconds (NeMo-RL reports 0.5-1.5 s refits at 30B; we take 2 s).
- Synchronous (verl's colocated hybrid engine): every GPU rolls out a batch of B·G episodes (B = 32 tasks, G = 8),
  then every GPU trains on it, then weights are pushed; the rollout ends with its slowest episode.
- Asynchronous, staleness k (AReaL's bound): GPUs split into rollout and training (the best split of 1/8 .. 7/8 is
  reported); replicas keep playing, a group of G enters training when all its episodes are done, a training step
  takes B groups; a new group may start only while groups started <= (version + k + 1) × B, so no trained turn is
  more than k versions old; each finished step pushes weights (replicas take them between turns).
Writes benchmarks/results/async_sim.json and one summary line; docs/benchmarks.md shows the table.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from _report import publish

CONCURRENCY = 64
DECODE_TOK_S = 40.0
PREFILL_TOK_S = 8_000.0
TURNS_MEDIAN, TURNS_SIGMA, MAX_TURNS = 12, 0.6, 50
TOKENS_MEDIAN = 180
PROMPT_TOKENS, NEW_PROMPT_TOKENS = 2_500, 150
TRAIN_TOK_S_PER_GPU = 3_000.0
SYNC_S = 2.0
TASKS, GROUP = 32, 8
STEPS = 12  # training steps simulated per configuration


@dataclass
class Episode:
    group: int
    turns: list[tuple[float, float]]  # per turn: (generation seconds on a replica slot, env step seconds)
    tokens: int  # trained tokens (prompt + response of every turn)


def measure_alfworld_steps(episodes: int, seed: int) -> list[float]:
    """Seconds of real ALFWorld steps (random admissible actions), this machine."""
    from agentforge.envs import make_env
    from agentforge.tasks import TaskSampler

    rng, seconds = random.Random(seed), []
    env = make_env("alfworld", {})
    try:
        for task in TaskSampler("alfworld", "train").sample(episodes):
            observation = env.reset(task)
            for _ in range(20):
                started = time.perf_counter()
                result = env.step(rng.choice(sorted(observation.admissible) or ["look"]))
                seconds.append(time.perf_counter() - started)
                observation = result.observation
                if result.done:
                    break
    finally:
        env.close()
    return seconds


def make_episode(group: int, rng: random.Random, step_seconds: Any) -> Episode:
    n = min(MAX_TURNS, max(1, round(TURNS_MEDIAN * math.exp(TURNS_SIGMA * rng.gauss(0, 1)))))
    turns, tokens = [], 0
    for t in range(n):
        response = max(8, round(TOKENS_MEDIAN * math.exp(0.6 * rng.gauss(0, 1))))
        prefill = PROMPT_TOKENS if t == 0 else NEW_PROMPT_TOKENS
        turns.append((prefill / PREFILL_TOK_S + response / DECODE_TOK_S, step_seconds(rng)))
        tokens += PROMPT_TOKENS + response
    return Episode(group, turns, tokens)


def rollout_seconds(episodes: list[Episode], replicas: int) -> float:
    """Wall time for all episodes on `replicas` × CONCURRENCY slots, each episode's turns in order."""
    slots = [0.0] * (replicas * CONCURRENCY)  # when each slot is free
    heapq.heapify(slots)
    ready = [(0.0, i, 0) for i in range(len(episodes))]  # (ready at, episode, turn)
    heapq.heapify(ready)
    end = 0.0
    while ready:
        at, i, t = heapq.heappop(ready)
        free = heapq.heappop(slots)
        start = max(at, free)
        gen, env = episodes[i].turns[t]
        heapq.heappush(slots, start + gen)
        done = start + gen + env
        if t + 1 < len(episodes[i].turns):
            heapq.heappush(ready, (done, i, t + 1))
        end = max(end, done)
    return end


def synchronous(gpus: int, rng: random.Random, step_seconds: Any) -> dict[str, float]:
    wall = busy_gen = busy_train = 0.0
    episodes_done = 0
    for _ in range(STEPS):
        batch = [make_episode(g, rng, step_seconds) for g in range(TASKS) for _ in range(GROUP)]
        roll = rollout_seconds(batch, gpus)
        train = sum(e.tokens for e in batch) / (TRAIN_TOK_S_PER_GPU * gpus)
        wall += roll + train + SYNC_S
        busy_gen += sum(g for e in batch for g, _ in e.turns) / (gpus * CONCURRENCY)
        busy_train += train
        episodes_done += len(batch)
    return {"wall_s": wall, "episodes_per_h": episodes_done / wall * 3600, "train_busy": busy_train / wall,
            "rollout_slot_busy": busy_gen / wall}


def asynchronous(gpus: int, k: int, rng: random.Random, step_seconds: Any) -> dict[str, Any]:
    """Best split of the GPUs into rollout and training for staleness bound k."""
    best: dict[str, Any] | None = None
    for eighths in range(1, 8):
        rollout_gpus = max(1, round(gpus * eighths / 8))
        train_gpus = gpus - rollout_gpus
        if train_gpus < 1:
            continue
        result = _async_run(rollout_gpus, train_gpus, k, random.Random(rng.random()), step_seconds)
        if best is None or result["episodes_per_h"] > best["episodes_per_h"]:
            best = {**result, "rollout_gpus": rollout_gpus, "train_gpus": train_gpus}
    assert best is not None
    return best


def _async_run(rollout_gpus: int, train_gpus: int, k: int, rng: random.Random, step_seconds: Any) -> dict[str, Any]:
    slots = [0.0] * (rollout_gpus * CONCURRENCY)
    heapq.heapify(slots)
    groups: dict[int, list[Episode]] = {}
    left: dict[int, int] = {}
    started_version: dict[int, int] = {}
    finished: list[tuple[float, int]] = []  # (time a group finished, group)
    ready: list[tuple[float, int, int, int]] = []  # (ready at, group, episode index, turn)
    version, learner_free, next_group, wall, dropped = 0, 0.0, 0, 0.0, 0
    train_busy, lags = 0.0, []

    def start_groups(now: float) -> None:
        nonlocal next_group
        while next_group - dropped < (version + k + 1) * TASKS:
            g = next_group
            groups[g] = [make_episode(g, rng, step_seconds) for _ in range(GROUP)]
            left[g], started_version[g] = GROUP, version
            for e in range(GROUP):
                heapq.heappush(ready, (now, g, e, 0))
            next_group += 1

    start_groups(0.0)
    steps = 0
    while steps < STEPS:
        # play turns until TASKS finished groups wait and the learner is free
        while ready and (len(finished) < TASKS or ready[0][0] < learner_free):
            at, g, e, t = heapq.heappop(ready)
            free = heapq.heappop(slots)
            begin = max(at, free)
            gen, env = groups[g][e].turns[t]
            heapq.heappush(slots, begin + gen)
            done = begin + gen + env
            if t + 1 < len(groups[g][e].turns):
                heapq.heappush(ready, (done, g, e, t + 1))
            else:
                left[g] -= 1
                if left[g] == 0:
                    heapq.heappush(finished, (done, g))
        if len(finished) < TASKS:
            raise RuntimeError("the staleness bound starved the generator (a bug in the simulation)")
        batch = []
        while len(batch) < TASKS and finished:
            done_at, g = heapq.heappop(finished)
            if version - started_version[g] > k:  # too old to train: dropped and counted, never trained silently
                dropped += 1
                continue
            batch.append((done_at, g))
        if len(batch) < TASKS:  # put them back and play on until enough fresh groups are done
            for item in batch:
                heapq.heappush(finished, item)
            start_groups(learner_free)
            continue
        begin = max(learner_free, max(t for t, _ in batch))
        tokens = sum(e.tokens for _, g in batch for e in groups[g])
        train = tokens / (TRAIN_TOK_S_PER_GPU * train_gpus)
        learner_free = begin + train + SYNC_S
        train_busy += train
        lags += [version - started_version[g] for _, g in batch]
        version += 1
        steps += 1
        wall = learner_free
        start_groups(learner_free)
    return {"wall_s": wall, "episodes_per_h": STEPS * TASKS * GROUP / wall * 3600, "train_busy": train_busy / wall,
            "mean_staleness": statistics.mean(lags), "max_staleness": max(lags), "dropped_groups": dropped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    measured = measure_alfworld_steps(args.episodes, args.seed)
    envs = {"alfworld": lambda r: r.choice(measured),
            "tool": lambda r: min(30.0, 0.5 * math.exp(1.2 * r.gauss(0, 1)))}
    rows = []
    for env, step_seconds in envs.items():
        for gpus in (8, 64):
            rng = random.Random(args.seed)
            sync = synchronous(gpus, rng, step_seconds)
            row: dict[str, Any] = {"env": env, "gpus": gpus, "sync": sync}
            for k in (1, 2):
                a = asynchronous(gpus, k, random.Random(args.seed + k), step_seconds)
                row[f"async_k{k}"] = {**a, "speedup": a["episodes_per_h"] / sync["episodes_per_h"]}
            rows.append(row)
    quantiles = statistics.quantiles(measured, n=100)
    out = {"label": "SIMULATION: GPU speeds assumed, env step times measured (ALFWorld) or assumed (tool)",
           "alfworld_step_s": {"n": len(measured), "median": statistics.median(measured), "p90": quantiles[89],
                               "p99": quantiles[98]},
           "assumptions": {"concurrency": CONCURRENCY, "decode_tok_s": DECODE_TOK_S, "prefill_tok_s": PREFILL_TOK_S,
                           "turns_median": TURNS_MEDIAN, "turns_sigma": TURNS_SIGMA, "max_turns": MAX_TURNS,
                           "tokens_median": TOKENS_MEDIAN, "train_tok_s_per_gpu": TRAIN_TOK_S_PER_GPU,
                           "sync_s": SYNC_S, "tasks": TASKS, "group": GROUP, "steps": STEPS},
           "rows": rows}
    line = "; ".join(f"{r['env']} {r['gpus']} GPUs: k=1 {r['async_k1']['speedup']:.2f}x, "
                     f"k=2 {r['async_k2']['speedup']:.2f}x" for r in rows)
    publish("async_sim", out, f"async_sim (SIMULATION): {line}")


if __name__ == "__main__":
    main()
