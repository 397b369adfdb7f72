"""Engine replicas, measured: rollout throughput of 2 replicas × 1 thread against one 2-thread in-process engine,
and weight-sync time and bytes over the process group (gloo here) against Ray's object store.

    python benchmarks/replicas.py [--tasks 8] [--group 4] [--skip-alfworld] [--skip-large]

Rollout: the same tasks on each engine, after one untimed warm-up rollout per engine (a cold engine's first batch
pays for allocation and kernel selection; earlier figures that timed it varied 1.4× with run order). Sokoban and
ALFWorld, SmolLM2, the run's dtype (`auto`).
Sync: SmolLM2 into two real HF-engine replicas (transport + loading into the engine), then random-initialised
Qwen2.5-0.5B- and 1.5B-shaped weights in bf16 (full, and a LoRA run's merged q/v projections: what
`only_changed=True` sends) into two sink actors that only receive (transport alone: a 1.5B engine per replica does
not fit this machine's memory beside the sender). Writes benchmarks/results/replicas.json and one summary line.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

import torch
from _report import publish
from rollout import add_workload_arguments, env_options, measured_rollout

from agentforge.cluster.ray_runtime import ensure_ray
from agentforge.commands.builders import build_model_spec
from agentforge.engines.replicas import ReplicaOptions, ReplicatedEngine
from agentforge.engines.replicas.weight_group import WeightGroupMember, free_port, plan_buckets
from agentforge.engines.shared import checkpoint_tensors
from agentforge.hardware import describe
from agentforge.schema.compose import compose_config

SHAPES = {  # Qwen2.5 configs: hidden, layers, intermediate, heads, kv heads, head dim, vocab
    "qwen2.5-0.5b": (896, 24, 4864, 14, 2, 64, 151_936),
    "qwen2.5-1.5b": (1536, 28, 8960, 12, 2, 128, 151_936),
}


# ------------------------------------------------------------------------------------------------ rollout
def rollout(env: str, replicas: int | None, args: argparse.Namespace, tasks: int) -> dict[str, float]:
    engine_options = ["engine.replicas=2", "engine.replica_cpus=1"] if replicas else []
    cfg = compose_config([
        f"env={env}", *env_options(env), "env_pool.kind=local", f"agent.max_turns={args.turns}",
        f"agent.sampling.max_new_tokens={args.max_new_tokens}", "agent.max_prompt_tokens=3500",
        "engine.max_model_len=4096", *engine_options,
    ])
    threads = torch.get_num_threads()
    if not replicas:
        torch.set_num_threads(2)
    try:
        result = measured_rollout(cfg, env, args.group, tasks, warmup_tasks=2)
    finally:
        torch.set_num_threads(threads)
    stats = result.stats
    return {"generated_tokens": stats.generated_tokens, "generate_seconds": stats.generate_seconds,
            "wall_seconds": stats.wall_seconds, "tokens_per_s": stats.generated_tokens / stats.wall_seconds,
            "turns": stats.turns, "dtype": str(cfg.engine.dtype)}


# ------------------------------------------------------------------------------------------------ sync
def qwen_shaped(name: str, lora: bool) -> list[tuple[str, torch.Tensor]]:
    hidden, layers, inter, heads, kv, head_dim, vocab = SHAPES[name]
    q, k = heads * head_dim, kv * head_dim
    out: list[tuple[str, torch.Tensor]] = []
    if not lora:
        out.append(("model.embed_tokens.weight", torch.empty(vocab, hidden, dtype=torch.bfloat16)))
    for i in range(layers):
        p = f"model.layers.{i}"
        shapes = {"self_attn.q_proj.weight": (q, hidden), "self_attn.v_proj.weight": (k, hidden)}
        if not lora:
            shapes.update({"self_attn.k_proj.weight": (k, hidden), "self_attn.o_proj.weight": (hidden, q),
                           "mlp.gate_proj.weight": (inter, hidden), "mlp.up_proj.weight": (inter, hidden),
                           "mlp.down_proj.weight": (hidden, inter), "input_layernorm.weight": (hidden,),
                           "post_attention_layernorm.weight": (hidden,)})
        out += [(f"{p}.{n}", torch.empty(*s, dtype=torch.bfloat16).normal_()) for n, s in shapes.items()]
    if not lora:
        out.append(("model.norm.weight", torch.ones(hidden, dtype=torch.bfloat16)))
    return out


class Sink:
    """Receives pushes and keeps nothing: the transport alone, for shapes whose engines do not fit here."""

    def __init__(self) -> None:
        self.group: WeightGroupMember | None = None

    def join(self, port: int, rank: int, world: int) -> None:
        self.group = WeightGroupMember("127.0.0.1", port, rank, world, "gloo", 600)

    def receive(self, manifest: Any) -> int:
        return sum(sum(t.numel() for _, t in bucket) for bucket in self.group.receive(manifest))

    def take(self, named: list[tuple[str, torch.Tensor]]) -> int:
        return sum(t.numel() for _, t in named)


def sync_into_sinks(named: list[tuple[str, torch.Tensor]], repeats: int) -> dict[str, float]:
    import ray

    sinks = [ray.remote(Sink).options(num_cpus=1).remote() for _ in range(2)]
    port = free_port()
    joins = [s.join.remote(port, i + 1, 3) for i, s in enumerate(sinks)]
    sender = WeightGroupMember("127.0.0.1", port, 0, 3, "gloo", 600)
    ray.get(joins)
    manifest = plan_buckets(named, 256 * 2**20, 1)
    group, store = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        refs = [s.receive.remote(manifest) for s in sinks]
        sender.send(manifest, named)
        ray.get(refs)
        group.append(time.perf_counter() - t0)
        if not fits_object_store(manifest.nbytes):
            continue
        t0 = time.perf_counter()
        ref = ray.put(named)
        ray.get([s.take.remote(ref) for s in sinks])
        del ref
        store.append(time.perf_counter() - t0)
    sender.close()
    for s in sinks:
        ray.kill(s)
    out = {"bytes": float(manifest.nbytes), "process_group_s": statistics.median(group)}
    if store:
        out["object_store_s"] = statistics.median(store)
    else:
        out["object_store"] = "skipped: needs ~6x the push in memory here (torch tensors are copied out of the store)"
    return out


def fits_object_store(nbytes: int) -> bool:
    """The object-store push holds the sender's tensors, the stored copy, and per sink the read bytes and the rebuilt
    tensors (Ray does not map torch tensors zero-copy): ~6x the push with two sinks; 1.5B in bf16 ran out of 24 GB."""
    import psutil

    return psutil.virtual_memory().available > 6.5 * nbytes


def sync_into_engines(repeats: int) -> dict[str, float]:
    spec = build_model_spec(compose_config([]))
    dtype = getattr(torch, str(spec.dtype)) if spec.dtype in ("bfloat16", "float32") else torch.float32
    named = [(n, t.to(dtype)) for n, t in checkpoint_tensors(spec.path)]  # what a run's learner exports
    out: dict[str, float] = {}
    for how in ("process_group", "object_store"):
        engine = ReplicatedEngine("hf", spec, {"dtype": spec.dtype, "batch_size": 8},
                                  ReplicaOptions(replicas=2, weight_sync=how))
        try:
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                engine.update_weights(named)
                times.append(time.perf_counter() - t0)
            out[f"{how}_s"] = statistics.median(times)
            out["bytes"] = engine.last_sync["engine/sync_bytes"]
        finally:
            engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-large", action="store_true", help="no 1.5B-shaped sync (3 GB per push)")
    args = parser.parse_args()
    ensure_ray()
    envs = [("sokoban", args.tasks)] + ([] if args.skip_alfworld else [("alfworld", args.alfworld_tasks)])
    runs: dict[str, Any] = {}
    for env, tasks in envs:
        runs[f"{env}/in_process_2_threads"] = rollout(env, None, args, tasks)
        runs[f"{env}/2_replicas_1_thread"] = rollout(env, 2, args, tasks)
    sync: dict[str, Any] = {"smollm2-135m/full (into HF engines)": sync_into_engines(args.repeats)}
    for name in SHAPES:
        if name.endswith("1.5b") and args.skip_large:
            continue
        for lora in (False, True):
            sync[f"{name}/{'lora q,v' if lora else 'full'} (transport)"] = sync_into_sinks(qwen_shaped(name, lora),
                                                                                         args.repeats)
            gc.collect()  # a 1.5B push is 3 GB here and another in the object store: free both before the next
    ratios = {f"{env}_replicas_over_in_process_tokens_per_s": runs[f"{env}/2_replicas_1_thread"]["tokens_per_s"]
              / runs[f"{env}/in_process_2_threads"]["tokens_per_s"] for env, _ in envs}
    for r in sync.values():
        if "object_store_s" in r:
            r["object_store_over_process_group"] = r["object_store_s"] / r["process_group_s"]
    dtype = runs["sokoban/in_process_2_threads"]["dtype"]
    report = {"config": vars(args), "hardware": describe(dtype), "rollout": runs, "sync": sync, **ratios}
    publish("replicas", report,
            f"replicas [{report['hardware']['cpu_kind']}] {dtype}: rollout tokens/s 2 replicas x 1 thread / in-process "
            "2 threads: " + ", ".join(f"{k.split('_')[0]} {v:.2f}x" for k, v in ratios.items())
            + " | sync object store / process group: "
            + ", ".join(f"{k.split(' ')[0]} {v['bytes'] / 2**20:.0f} MiB "
                        + (f"{v['object_store_over_process_group']:.2f}x" if "object_store_s" in v else
                           f"pg {v['process_group_s']:.2f} s (object store skipped: memory)")
                        for k, v in sync.items()))


if __name__ == "__main__":
    main()
