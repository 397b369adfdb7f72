"""Asynchronous training on real parts (an engine replica in a Ray actor, the DeepSpeed learner, GRPO on the letter
bandit): rollout runs ahead of the learner within the staleness bound, the policy still learns with k = 1 and 2,
a resumed run trains the batches its checkpoint kept (nothing lost, nothing beyond the bound), bad settings fail
before start."""

from __future__ import annotations

import logging
import math
import shutil

import pytest

from agentforge.commands.config_check import check_config
from agentforge.commands.train import build_trainer
from agentforge.errors import ConfigProblems
from agentforge.reliability.checkpoint import CheckpointManager
from agentforge.schema.compose import compose_config
from agentforge.tracking.trajectories import iteration_files, read_records
from agentforge.training.updates import STALL_ITERATIONS
from tests.integration import letter_bandit
from tests.integration.letter_bandit import metric_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ray_runtime(ray_with_module_classes):
    """Replicas and env classes of this module in Ray."""


def bandit_config(tmp_path, k: int, *overrides: str):
    """The letter bandit on one engine replica, rollout up to `k` versions ahead, decoupled PPO (proximal policy =
    the learner before the update, behaviour -> proximal weights truncated)."""
    return letter_bandit.bandit_config(
        tmp_path, "engine.replicas=1", "engine.replica_cpus=1", f"trainer.asynchronous.max_staleness={k}",
        "learner.old_logprobs=recompute", "learner.rollout_correction.is_level=token",
        # every sample computed, so the per-lag token counts cover every loss token (with the skip on they cover
        # the computed ones: docs/learner.md)
        "learner.skip_zero_advantage=false", *overrides)


# Staler data learns less per update: with k = 2 (every batch two versions old, rollout being far faster than the
# update here) the bandit needs lr 5e-2 and 10 updates (at 3e-2 it reached 0.55 after 8; without the TIS weight it
# did not learn within 10).
SCHEDULES = {1: ["trainer.iterations=8"], 2: ["trainer.iterations=10", "learner.lr=5e-2"]}
# The tests below that assert bookkeeping, not learning, run the replica on the transformers engine: a vLLM replica
# costs every run a fresh vLLM import and engine start in its actor (measured 2.3x the refused-update test's time).
# The learning runs above and the GiGPO run keep vLLM replicas in make test (with test_engine_replicas.py).
BOOKKEEPING_ENGINE = "engine=hf"


@pytest.mark.parametrize("k", [1, 2])
def test_asynchronous_grpo_learns_within_the_staleness_bound(ray_runtime, tmp_path, k):
    build_trainer(bandit_config(tmp_path, k, *SCHEDULES[k])).fit()
    rows = [r for r in metric_rows(tmp_path) if "train/mean_return" in r]
    rewards = [r["train/mean_return"] for r in rows]
    iterations = int(SCHEDULES[k][0].split("=")[1])
    assert len(rewards) == iterations
    early, late = sum(rewards[:2]) / 2, sum(rewards[-2:]) / 2
    assert late > early + 0.25, rewards
    assert all(r["async/staleness_max"] <= k and r["async/dropped_groups"] == 0 for r in rows)
    # rollout really ran ahead: trained turns sampled by older weights than the learner's
    assert sum(r.get("async/turns_lag_1", 0) for r in rows) > 0
    assert sum(r[f"async/turns_lag_{lag}"] for r in rows for lag in range(k + 1)) == iterations * 32  # every turn
    # the mismatch per lag: none at lag 0 beyond float noise (fp32 engine and learner), visible at lag >= 1
    lagged = [r for r in rows if f"async/lag_{k}/mismatch_abs_mean" in r]
    assert lagged and all(r[f"async/lag_{k}/mismatch_abs_mean"] > 1e-4 for r in lagged)
    assert all(r["async/lag_0/mismatch_abs_mean"] < 1e-3 for r in rows if "async/lag_0/mismatch_abs_mean" in r)
    # the learner's clip counts per lag cover every trained token (one optimizer step per update here)
    for r in rows:
        per_lag = {lag: r[f"async/lag_{lag}/trained_tokens"] for lag in range(k + 1)
                   if f"async/lag_{lag}/trained_tokens" in r}
        assert per_lag and sum(per_lag.values()) == r["train/tokens"], r
        assert all(0.0 <= r[f"async/lag_{lag}/clip_fraction"] <= 1.0 for lag in per_lag)
        assert not any(key.startswith("train/count/") for key in r)


def test_a_resumed_asynchronous_run_trains_the_batches_its_checkpoint_kept(ray_runtime, tmp_path, caplog):
    """Resumed with k = 1, and with max_staleness=0 (the kept batch is trained first, with a warning naming it,
    not dropped for the next tasks, which would then be skipped for good); engine/version goes on from the
    checkpoint's rather than from 1."""
    run = tmp_path / "run"
    options = ["trainer.iterations=4", "trainer.checkpoint_every=2", "trainer.trajectory_tokens=true",
               BOOKKEEPING_ENGINE]
    build_trainer(bandit_config(run, 1, *options)).fit()
    checkpoints = CheckpointManager(run / "checkpoints", 2).complete()
    assert [c.iteration for c in checkpoints] == [2, 4]
    kept = checkpoints[0].pending_rollouts  # played ahead at the iteration-2 checkpoint, not trained yet
    assert kept and kept[0].iteration == 2
    before = {r["iteration"]: r for r in metric_rows(run)}

    def trained(iteration: int, key: str = "response_ids") -> list:
        records = read_records(iteration_files(run)[iteration])
        return sorted(turn[key] for r in records for turn in r["turns"]) if key == "response_ids" else \
            sorted(r["task"]["seed"] for r in records)

    original, original_tasks = trained(3), trained(4, "task")
    played = sorted(list(t.response_ids) for g in kept[0].result.groups for tr in g.trajectories for t in tr.turns)
    assert original == played
    for k in (1, 0):
        shutil.rmtree(CheckpointManager(run / "checkpoints", 2).complete()[-1].path)  # died after iteration 2
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="agentforge.training.trainer"):
            build_trainer(bandit_config(run, k, *options, f"resume={run}")).fit()
        assert trained(3) == played, k  # the kept batch itself trained, not played again, nor dropped
        assert trained(4, "task") == original_tasks, k  # iteration 4 trains the tasks the first run drew for it
        rows = {r["iteration"]: r for r in metric_rows(run)}
        assert rows[3]["async/staleness_max"] <= 1 and rows[3]["async/dropped_groups"] == 0, k
        assert [rows[i]["engine/version"] for i in (3, 4)] == [before[i]["engine/version"] for i in (3, 4)], k
        warned = [r.getMessage() for r in caplog.records if "played before its checkpoint" in r.getMessage()]
        assert len(warned) == (0 if k else len(kept)), warned  # each kept batch named (iterations 3, 4 here)
        assert k or warned[0].startswith("iteration 3: training the batch an asynchronous run played"), warned


def test_a_refused_update_makes_no_version_and_a_stalled_run_says_so(ray_runtime, tmp_path, caplog):
    """NaN advantages at iterations 2-4 (k = 1): the learner refuses those updates and nothing is pushed, so the
    turns sampled meanwhile are as fresh as the weights that train them (lag 0; counted per update they were one
    version staler per refusal and iterations 5-6 dropped every group as beyond the bound); training resumes at
    iteration 5, and three refusals in a row are reported loudly (warning, metric, summary)."""
    cfg = bandit_config(tmp_path, 1, "trainer.iterations=6", "trainer.tasks_per_iteration=2", "trainer.group_size=4",
                        BOOKKEEPING_ENGINE)
    trainer = build_trainer(cfg)
    compute, calls = trainer.algorithm.advantages, []

    def advantages(groups):
        calls.append(len(calls) + 1)
        out = compute(groups)
        return [math.nan] * len(out) if calls[-1] in (2, 3, 4) else out

    trainer.algorithm.advantages = advantages
    with caplog.at_level(logging.WARNING, logger="agentforge.training.trainer"):
        summary = trainer.fit()
    rows = {r["iteration"]: r for r in metric_rows(tmp_path) if "async/staleness_max" in r}
    assert [bool(rows[i].get("train/skipped")) for i in range(1, 7)] == [False, True, True, True, False, False]
    assert [rows[i]["train/weight_version"] for i in range(1, 7)] == [1, 1, 1, 1, 2, 3]
    assert [rows[i]["train/iterations_without_update"] for i in range(1, 7)] == [0, 1, 2, 3, 0, 0]
    for i in (3, 4, 5):  # played after the last push before the refusals: sampled by the weights that train them
        assert rows[i]["async/staleness_max"] == 0 and rows[i]["async/turns_lag_0"] == 8, rows[i]
    assert all(rows[i]["async/dropped_groups"] == 0 and rows[i]["async/staleness_max"] <= 1 for i in rows)
    assert all(rows[i]["train/samples"] > 0 for i in (5, 6))
    assert [rows[i]["engine/version"] for i in (1, 5, 6)] == [1, 2, 3]  # one push per applied update
    assert STALL_ITERATIONS == 3
    assert any("3 iterations in a row trained nothing" in r.getMessage() for r in caplog.records)
    assert summary["untrained_iterations"] == [2, 3, 4]


@pytest.mark.parametrize(("overrides", "message"), [
    (["engine.replicas=null"], "set engine.replicas=1 or more"),
    (["algorithm=strata"], "algorithm 'strata' cannot train asynchronously"),
    (["trainer.dynamic_sampling.enabled=true"], "set trainer.dynamic_sampling.enabled=false"),
    (["engine.colocate=true"], "cannot roll out beside it"),
])
def test_settings_asynchronous_training_cannot_run_with_are_refused_before_start(tmp_path, overrides, message):
    with pytest.raises(ConfigProblems, match=message):
        check_config(bandit_config(tmp_path, 1, *overrides))


def test_a_negative_staleness_is_a_config_problem(tmp_path):
    with pytest.raises(ConfigProblems, match="max_staleness"):
        check_config(bandit_config(tmp_path, -1))  # (composition itself may already refuse it)


@pytest.mark.parametrize("algorithm", ["gigpo", "tjpo", "t2po",
                                       pytest.param("ppo", marks=pytest.mark.long)])  # make test-long: suite budget
def test_group_algorithms_train_asynchronously_on_sokoban(ray_runtime, tmp_path, algorithm):
    """GiGPO (anchor groups), TJPO (trajectory descriptors), T2PO (uncertainty through the replica, TDS) and PPO (the
    critic's values read at update time on turns played a version earlier, as verl's async PPO) train with rollout
    one version ahead."""
    cfg = compose_config([
        "recipe=debug", "command=train", "logger.wandb=false", "env_pool.kind=local", f"algorithm={algorithm}",
        "trainer.iterations=3", "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_every=0",
        "trainer.eval_before=false", "trainer.checkpoint_every=0", "agent.max_turns=2",
        "agent.sampling.max_new_tokens=16", "env.dim_room=[6,6]", "env.max_steps=4", "engine.replicas=1",
        "engine.replica_cpus=1", "trainer.asynchronous.max_staleness=1", "learner.old_logprobs=recompute",
    ], run_dir=str(tmp_path))
    build_trainer(cfg).fit()
    rows = [r for r in metric_rows(tmp_path) if "async/staleness_max" in r]
    assert len(rows) == 3 and all(r["async/staleness_max"] <= 1 for r in rows)
    assert sum(r["async/turns_lag_1"] for r in rows) > 0
    assert all(r["train/samples"] > 0 for r in rows)
    if algorithm == "ppo":
        assert all(r["critic/value_loss"] == r["critic/value_loss"] for r in rows)  # the critic trains on them too


def test_gigpo_trains_asynchronously_with_pushes_landing_inside_generation(ray_runtime, tmp_path):
    """`engine.interrupt_tokens`: the replica generates in 4-token chunks and takes each push between two; a turn
    that spans versions lists them, counts as its oldest for the bound, and is trained like any other. GiGPO (anchor
    groups over the episodes' states) with rollout one version ahead: the group algorithms' asynchronous path in
    `make test` (TJPO and T2PO are its `long` variants above)."""
    cfg = compose_config([
        "recipe=debug", "command=train", "logger.wandb=false", "env_pool.kind=local", "algorithm=gigpo",
        "trainer.iterations=3", "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_every=0",
        "trainer.eval_before=false", "trainer.checkpoint_every=0", "agent.max_turns=2",
        "agent.sampling.max_new_tokens=48", "env.dim_room=[6,6]", "env.max_steps=4", "engine.replicas=1",
        "engine.replica_cpus=1", "engine.interrupt_tokens=4", "trainer.asynchronous.max_staleness=1",
        "learner.old_logprobs=recompute", "learner.rollout_correction.is_level=token",
    ], run_dir=str(tmp_path))
    build_trainer(cfg).fit()
    rows = [r for r in metric_rows(tmp_path) if "async/staleness_max" in r]
    assert len(rows) == 3 and all(r["async/staleness_max"] <= 1 and r["train/samples"] > 0 for r in rows)
    assert sum(r["async/turns_lag_1"] for r in rows) > 0  # rollout really ran a version ahead
    turns = [turn for path in iteration_files(tmp_path).values() for record in read_records(path)
             for turn in record["turns"]]
    spanning = [t for t in turns if t["info"].get("policy_version_switches")]
    assert len(spanning) == sum(r["async/turns_spanning_versions"] for r in rows)
    for turn in spanning:  # pushes only move forward, each at a chunk boundary inside the response
        versions = [turn["info"]["policy_version"]] + [v for _, v in turn["info"]["policy_version_switches"]]
        assert versions == sorted(set(versions))
        assert all(0 < at < turn["response_tokens"] and at % 4 == 0
                   for at, _ in turn["info"]["policy_version_switches"])
    print(f"{len(spanning)} of {len(turns)} turns spanned two versions")
