"""The whole training loop on the tiny model: artifacts, checkpoints, resume reproducibility, bad configs."""

import gzip
import json
import shutil

import pytest

from agentforge.commands.train import build_trainer
from agentforge.errors import ConfigError
from agentforge.schema.compose import compose_config

pytestmark = pytest.mark.integration

FAST = [
    "recipe=debug", "command=train", "logger.wandb=false", "env_pool.kind=local",
    "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_tasks=2", "trainer.eval_every=2",
    "agent.max_turns=2", "agent.sampling.max_new_tokens=16", "learner.lr=1e-3",
]


def losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["iteration"]: r["train/loss"] for r in rows if "train/loss" in r}


def test_debug_run_writes_artifacts_and_checkpoints(tmp_path):
    # with a curriculum on Sokoban's generation steps: iteration 1's tasks at 3 steps, iteration 2's at 6
    curriculum = ["trainer.curriculum.option=num_gen_steps", "trainer.curriculum.levels=[3,6]"]
    # held-out test tasks (the claim) beside the eval split; a small reserve keeps the keying cheap
    cfg = compose_config([*FAST, "trainer.iterations=2", "trainer.checkpoint_every=1", "trainer.keep_checkpoints=1",
                          "logger.wandb=true", "trainer.test_tasks=2", "held_out.reserve=16", *curriculum],
                         run_dir=str(tmp_path / "run"))
    summary = build_trainer(cfg).fit()
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert "eval/success_rate" in rows[0] and "eval/success_rate" in rows[2]
    for key in ("train/loss", "train/grad_norm", "train/logprob_mismatch", "time/rollout", "time/sync"):
        assert key in rows[1], key
    assert (run / "training_curves.png").stat().st_size > 10_000
    assert (run / "samples.jsonl").exists() and (run / "config.yaml").exists()
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["iter_000002"]  # keep_checkpoints=1
    assert summary["before"]["iteration"] == 0 and summary["after"]["iteration"] == 2
    assert any((run / "wandb").glob("offline-run-*"))
    assert [rows[i]["train/curriculum_value"] for i in (1, 2)] == [3.0, 6.0]
    for iteration, steps in ((1, 3), (2, 6)):
        with gzip.open(run / "trajectories" / f"iter_{iteration:05d}.jsonl.gz", "rt") as f:
            tasks = [json.loads(line)["task"] for line in f]
        assert tasks and all(t["options"] == [["num_gen_steps", steps]] for t in tasks), tasks[:1]
    state = json.loads((run / "checkpoints" / "iter_000002" / "trainer_state.json").read_text())
    assert state["sampler"]["curriculum"]["level"] == 1
    # the claim on test: its start and its end, paired; the eval split stays for choosing
    assert summary["claim_split"] == "test"
    assert [row["name"] for row in summary["test"]["evals"]][:2] == ["iteration 0", "iteration 2"]
    assert set(summary["test"]["outcomes"]) == {"0", "2"} and len(summary["test"]["outcomes"]["2"]) == 2
    assert "test/success_rate" in rows[0] and "test/success_rate" in rows[2]
    # and in plain words, on the claim split: where the policy started, what RL did (no warm start, no base eval)
    assert summary["plain_verdict"][0].startswith("The policy at iteration 0 solved")
    assert summary["plain_verdict"][1].startswith("RL (2 grpo iterations) took it to")
    # held out by content: the overlap is measured (0); no room the streams trained on is a reserved one
    record = json.loads((run / "held_out.json").read_text())
    assert summary["held_out"]["overlap"] == {"eval": {"tasks": 2, "trained_on": 0},
                                              "test": {"tasks": 2, "trained_on": 0}}
    assert "trained" not in summary["held_out"] and len(record["trained"]) == record["training"]["distinct_tasks"]
    reserved = {d for by_env in record["reserved"].values() for digests in by_env.values() for d in digests}
    assert reserved and not reserved & set(record["trained"])
    assert state["held_out"]["trained"] == record["trained"]


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    common = [*FAST, "trainer.eval_before=false", "trainer.eval_every=0", "trainer.checkpoint_every=1",
              "trainer.test_tasks=1", "held_out.reserve=8"]
    build_trainer(compose_config([*common, "trainer.iterations=3"], run_dir=str(tmp_path / "full"))).fit()
    build_trainer(compose_config([*common, "trainer.iterations=1"], run_dir=str(tmp_path / "part"))).fit()
    resumed = compose_config([*common, "trainer.iterations=3", f"resume={tmp_path / 'part'}"],
                             run_dir=str(tmp_path / "ignored"))
    summary = build_trainer(resumed).fit()
    assert set(summary["test"]["outcomes"]) == {"0", "1", "3"}  # the claim's start survives the resume
    full_record = json.loads((tmp_path / "full" / "held_out.json").read_text())
    assert json.loads((tmp_path / "part" / "held_out.json").read_text())["trained"] == full_record["trained"]
    full, part = losses(tmp_path / "full"), losses(tmp_path / "part")
    assert sorted(part) == [1, 2, 3]
    for iteration in (1, 2, 3):
        assert part[iteration] == pytest.approx(full[iteration], rel=1e-5, abs=1e-7), iteration


def test_partial_checkpoint_falls_back_to_the_previous_one(tmp_path):
    common = [*FAST, "trainer.eval_before=false", "trainer.eval_every=0", "trainer.checkpoint_every=1",
              "trainer.keep_checkpoints=3"]
    run = tmp_path / "run"
    build_trainer(compose_config([*common, "trainer.iterations=2"], run_dir=str(run))).fit()
    (run / "checkpoints" / "iter_000002" / "COMPLETE").unlink()  # as if killed while writing
    trainer = build_trainer(compose_config([*common, "trainer.iterations=2", f"resume={run}"],
                                           run_dir=str(tmp_path / "x")))
    trainer._restore()
    assert trainer.start_iteration == 1
    trainer.close()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.group_size=1", "group_size"),
        ("learner.num_ranks=3", "not divisible"),
        ("engine.max_model_len=64", "max_model_len"),
    ],
)
def test_bad_configs_fail_before_start(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        build_trainer(compose_config([*FAST, override], run_dir=str(tmp_path)))


def test_resume_true_without_runs_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="resume=<run dir>"):
        build_trainer(compose_config([*FAST, "resume=true"], run_dir=str(tmp_path / "a" / "b")))
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_start_that_fails_part_way_closes_what_it_had_started(tmp_path, monkeypatch):
    """The learner failing to start (made to raise here) leaves no engine or env pool running behind the error."""
    import agentforge.commands.builders as builders
    import agentforge.commands.train as assembly

    started, closed = [], []
    real_engine, real_pool = builders.build_engine, builders.build_pool

    def engine_of_the_run(*args):
        started.append(real_engine(*args))
        return started[-1]

    def pool_of_the_run(*args):
        pool = real_pool(*args)
        close = pool.close
        pool.close = lambda: (closed.append("pool"), close())
        return pool

    def learner_that_fails(*args, **kwargs):
        raise RuntimeError("the learner could not start")

    monkeypatch.setattr(builders, "build_engine", engine_of_the_run)  # what build_rollout_stack starts
    monkeypatch.setattr(builders, "build_pool", pool_of_the_run)
    monkeypatch.setattr(assembly, "Learner", learner_that_fails)
    with pytest.raises(RuntimeError, match="the learner could not start"):
        build_trainer(compose_config([*FAST, "engine=hf"], run_dir=str(tmp_path)))
    assert started and started[0].model is None, "the engine was left loaded"
    assert closed == ["pool"]


def test_sft_writes_a_model_that_init_from_loads(tmp_path):
    from agentforge.commands.builders import build_model_spec
    from agentforge.commands.sft import run_sft

    cfg = compose_config(["recipe=debug", "command=sft", "logger.wandb=false", "sft.num_tasks=4", "sft.epochs=3",
                          "sft.batch_size=4", "sft.lr=1e-2", "agent.max_turns=8"], run_dir=str(tmp_path / "sft"))
    summary = run_sft(cfg)
    model_dir = tmp_path / "sft" / "model"
    assert summary["steps"] == 3 and (model_dir / "config.json").exists()
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[2]["sft/loss"] < rows[0]["sft/loss"] - 0.5  # three passes over the same expert batch
    spec = build_model_spec(compose_config(["recipe=debug", f"model.init_from={model_dir}"]))
    assert spec.path == str(model_dir)
    with pytest.raises(ConfigError, match="init_from"):
        build_model_spec(compose_config(["recipe=debug", f"model.init_from={tmp_path}"]))
