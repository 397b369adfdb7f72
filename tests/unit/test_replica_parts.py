"""The engine replicas' parts that need no Ray: the router, the weight group's buckets and broadcast (gloo, in
threads), the resource check, the options and the config checks."""

from __future__ import annotations

import threading

import pytest
import torch

from agentforge.commands.config_check import config_problems
from agentforge.engines.replicas.engine import replica_resources
from agentforge.engines.replicas.options import ReplicaOptions, check_replica_config
from agentforge.engines.replicas.router import Router
from agentforge.engines.replicas.weight_group import WeightGroupMember, free_port, plan_buckets
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.schema.compose import compose_config


def test_an_episode_stays_on_its_replica_and_new_episodes_go_to_the_least_loaded():
    router = Router(2)
    first = router.route(["a", "b", "c", "d"])
    assert sorted(first) == [0, 0, 1, 1]
    for r in (0, 1):
        router.done(r, 2)
    assert router.route(["a", "b", "c", "d"]) == first  # sticky: the same replica holds each prefix
    router.done(0, 2)
    router.done(1, 2)
    again = router.route(["a", "c", "x"])
    assert again[:2] == [first[0], first[2]] and sum(router.in_flight) == 3
    router.done(0, router.in_flight[0])
    router.done(1, router.in_flight[1])
    router.route(["a"])  # replica first[0] is busy now: a new episode goes to the other one
    assert router.route(["new"]) == [1 - first[0]]


def test_stickiness_gives_way_when_one_replica_would_take_the_whole_call():
    router = Router(2, slack=0)
    keys = [f"e{i}" for i in range(8)]
    on_zero = [k for k, r in zip(keys, router.route(keys), strict=True) if r == 0]
    router.done(0, 4)
    router.done(1, 4)
    # only the episodes that were on replica 0 play on: they must not all stay there
    chosen = router.route(on_zero)
    assert sorted(chosen) == [0, 0, 1, 1] and router.moved == 2


def test_per_episode_lanes_are_sticky_and_balanced_by_episode_count():
    router = Router(3)
    lanes = [router.assign(slot) for slot in range(7)]
    assert lanes == [0, 1, 2, 0, 1, 2, 0]
    assert [router.assign(slot) for slot in (4, 0, 6)] == [1, 0, 0]  # an episode keeps its lane
    router.forget()  # new weights: prefixes are gone, lanes are dealt again
    assert router.assign(6) == 0 and router.assigned == [1, 0, 0]


def test_buckets_hold_one_dtype_and_respect_the_size():
    named = [("a", torch.zeros(10)), ("b", torch.zeros(10)), ("c", torch.zeros(4, dtype=torch.bfloat16)),
             ("d", torch.zeros(100)), ("e", torch.zeros(3))]
    manifest = plan_buckets(named, bucket_bytes=80, version=7)
    assert [[e.name for e in b.entries] for b in manifest.buckets] == [["a", "b"], ["c"], ["d"], ["e"]]
    assert [b.dtype for b in manifest.buckets] == ["torch.float32", "torch.bfloat16", "torch.float32",
                                                    "torch.float32"]
    assert manifest.nbytes == sum(t.numel() * t.element_size() for _, t in named) and manifest.version == 7


def test_a_broadcast_over_gloo_delivers_every_tensor_bit_exactly():
    generator = torch.Generator().manual_seed(0)
    named = [(f"w{i}", torch.randn(17, 5, generator=generator)) for i in range(5)]
    named += [("half", torch.randn(33, generator=generator).to(torch.bfloat16)), ("ids", torch.arange(9))]
    manifest = plan_buckets(named, bucket_bytes=600, version=1)
    port, received, errors = free_port(), {}, []

    def replica(rank: int) -> None:
        try:
            member = WeightGroupMember("127.0.0.1", port, rank, 3, "gloo", 30)
            received[rank] = {n: t.clone() for bucket in member.receive(manifest) for n, t in bucket}
            member.close()
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=replica, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    sender = WeightGroupMember("127.0.0.1", port, 0, 3, "gloo", 30)
    sender.send(manifest, named)
    for t in threads:
        t.join(30)
    sender.close()
    assert not errors and len(manifest.buckets) > 2
    for rank in (1, 2):
        for name, tensor in named:
            assert torch.equal(received[rank][name], tensor), (rank, name)


def test_a_group_that_cannot_form_names_the_setting():
    with pytest.raises(AgentforgeError, match="engine.sync_port"):
        WeightGroupMember("127.0.0.1", free_port(), 1, 2, "gloo", 1)  # nobody listens there


CPU_NODE = [{"Alive": True, "Resources": {"CPU": 2.0}}]
GPU_NODES = [{"Alive": True, "Resources": {"CPU": 16.0, "GPU": 8.0}}] * 2


def test_replicas_that_do_not_fit_the_cluster_are_refused_before_start():
    cpu = {"CPU": 2.0}
    assert replica_resources(ReplicaOptions(replicas=2), 1, cpu, CPU_NODE) == {"CPU": 1.0}
    with pytest.raises(ConfigError, match="needs 3 CPU slots; the Ray cluster has 2"):
        replica_resources(ReplicaOptions(replicas=3), 1, cpu, CPU_NODE)
    with pytest.raises(ConfigError, match="tensor_parallel_size=2 needs GPUs"):
        replica_resources(ReplicaOptions(replicas=1), 2, cpu, CPU_NODE)
    assert replica_resources(ReplicaOptions(replicas=4, colocate=True), 1, cpu, CPU_NODE) == {"CPU": 0.01}
    gpus = {"CPU": 32.0, "GPU": 16.0}
    assert replica_resources(ReplicaOptions(replicas=4), 4, gpus, GPU_NODES) == {"CPU": 1.0, "GPU": 4.0}
    with pytest.raises(ConfigError, match="needs 20 GPUs; the Ray cluster has 16"):
        replica_resources(ReplicaOptions(replicas=5), 4, gpus, GPU_NODES)
    with pytest.raises(ConfigError, match="does not divide the GPUs of a node"):
        replica_resources(ReplicaOptions(replicas=2), 3, gpus, GPU_NODES)
    with pytest.raises(ConfigError, match="colocate=true is not built on GPUs"):
        replica_resources(ReplicaOptions(replicas=2, colocate=True), 1, gpus, GPU_NODES)
    with pytest.raises(ConfigError, match="need 2 CPU; 1 of the cluster's 2 are free"):
        replica_resources(ReplicaOptions(replicas=2), 1, cpu, CPU_NODE, free={"CPU": 1.0})


def test_replica_options_are_split_from_the_engine_group_and_checked():
    options, rest = ReplicaOptions.split({"replicas": 2, "weight_sync": "object_store", "dtype": "float32"})
    assert options.replicas == 2 and options.weight_sync == "object_store" and rest == {"dtype": "float32"}
    assert not ReplicaOptions.split({"dtype": None})[0].enabled
    with pytest.raises(ConfigError, match="engine.replicas=0"):
        ReplicaOptions.split({"replicas": 0})


def test_bad_replica_settings_are_config_problems():
    cfg = compose_config(["command=train", "recipe=debug", "engine.replicas=0", "engine.weight_sync=nccl_ipc"])
    text = "\n".join(config_problems(cfg))
    assert "engine.replicas=0: must be >= 1" in text and "engine.weight_sync='nccl_ipc'" in text


def test_an_intervention_only_this_process_knows_is_refused_with_replicas():
    from agentforge.engines.interventions import INTERVENTIONS, ForceSequence

    class LocalOnly(ForceSequence):
        """Registered here only: a replica process could not build it."""

    if "local_only_test" not in INTERVENTIONS.names():
        INTERVENTIONS.register("local_only_test")(LocalOnly)
    bad = compose_config(["command=train", "recipe=debug", "engine.replicas=2",
                          "agent.intervention={kind:local_only_test,params:{}}"])
    with pytest.raises(ConfigError, match="dotted path"):
        check_replica_config(bad)
    fine = compose_config(["command=train", "recipe=debug", "engine.replicas=2",
                           "agent.intervention={kind:force_sequence,params:{}}"])
    check_replica_config(fine)


class CountingLanes:
    """Engine replicas as the per-episode scheduler sees them (`lane_of`, `submit_lane`), counting lookups: the real
    Router assigns the lanes."""

    def __init__(self, lanes: int) -> None:
        self.lanes, self.router, self.lookups, self.submitted = lanes, Router(lanes), 0, []

    def lane_of(self, key):
        self.lookups += 1
        return self.router.assign(key)

    def submit_lane(self, lane, prompts, sampling, interventions):
        self.submitted.append((lane, len(prompts)))
        return f"ref-{lane}"


def test_per_episode_dispatch_looks_each_episode_up_once():
    """One dispatch over 450 episodes on 300 lanes: each episode's lane is looked up once (it was once per lane and
    episode at its env step: 34,125 lookups here), and a lane with an episode still at its env step waits for it
    while the others are sent."""
    from types import SimpleNamespace

    from agentforge.rollout.per_episode import PerEpisodeScheduler, _TurnInProgress
    from agentforge.types import SamplingConfig

    engine = CountingLanes(300)
    hooks = SimpleNamespace(name="default", max_turn_attempts=3, turn_intervention=lambda episode, ctx: None,
                            turn_sampling=lambda ctx: SamplingConfig())
    ctx = SimpleNamespace(engine=engine, config=SimpleNamespace(straggler_wait=1.0))
    scheduler = PerEpisodeScheduler(hooks, ctx, [])
    for slot in range(600):  # dealt round-robin: slot s on lane s % 300
        engine.router.assign(slot)
    scheduler.ready = [_TurnInProgress(SimpleNamespace(slot=slot), 1, [1]) for slot in range(300)]
    scheduler.at_env = {slot: None for slot in range(301, 600, 2)}  # an episode of each odd lane at its env step
    scheduler.call_seconds = {lane: 60.0 for lane in range(300)}  # a call takes long: a stepping lane waits
    engine.lookups = 0
    scheduler._dispatch()
    assert engine.lookups == 300 + 150
    assert engine.submitted == [(lane, 1) for lane in range(0, 300, 2)]
    assert sorted(t.episode.slot for t in scheduler.ready) == list(range(1, 300, 2))  # odd lanes wait
