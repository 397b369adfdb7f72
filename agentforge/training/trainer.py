"""The training loop: rollout → advantages → learner update → weight sync, with eval, checkpoints and resume.

It is handed its parts already built (`commands/train.py` reads the config and builds them) and reads only its
settings (`training/parts.py`).

Reproducibility: each iteration's rollout is seeded from (run seed, iteration), and a checkpoint stores the sampler
position and RNG states, so a resumed run replays the same next iteration as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from agentforge.algorithms.diversity import diversity_summary
from agentforge.cluster.placement import record_placement
from agentforge.errors import AgentforgeError
from agentforge.evaluation.depth import success_by_depth
from agentforge.learner.batch import policy_samples
from agentforge.reliability.checkpoint import Checkpoint, CheckpointMismatchError
from agentforge.reliability.closing import close_all
from agentforge.reliability.interrupt import Preempted, critical, preemption_requested
from agentforge.reliability.safe_state import set_rng_state
from agentforge.rollout.metrics import episode_outcomes, rollout_summary
from agentforge.tasks import iteration_seed
from agentforge.tracking.progress import TrainProgress, console
from agentforge.training.advantages import compute_advantages
from agentforge.training.asynchronous import (
    PlayedBatch,
    RolloutProducer,
    lag_clip_fractions,
    lag_metrics,
    mark_lags,
    oldest_lag,
    staleness,
)
from agentforge.training.curriculum import CurriculumSampler
from agentforge.training.parts import TrainerParts, TrainerSettings
from agentforge.training.run_report import TestEvals, final_report
from agentforge.training.sampling_rounds import play_with_signal
from agentforge.training.updates import UpdateLedger
from agentforge.types import Group

log = logging.getLogger("agentforge.training.trainer")


def sample_records(groups: list[Group], count: int) -> list[dict[str, Any]]:
    """A few whole trajectories, as text, for the samples log."""
    trajectories = [t for g in groups for t in g.trajectories][:count]
    return [t.to_json(with_tokens=False) for t in trajectories]


class Trainer:
    """Drives one run's parts (engine, env pool, learner, algorithm) through `iterations` updates, with evals,
    checkpoints and resume. Built by `commands.train.build_trainer(cfg)`; it reads only its settings."""

    def __init__(self, settings: TrainerSettings, parts: TrainerParts) -> None:
        self.settings = settings
        self.tcfg = settings.trainer
        self.run_dir, self.resuming = parts.run_dir, parts.resuming
        self.stack = parts.stack
        self.engine, self.pool, self.ctx = parts.stack.engine, parts.stack.pool, parts.stack.ctx
        self.learner, self.algorithm, self.eval_ctx = parts.learner, parts.algorithm, parts.eval_ctx
        self.train_workflow, self.eval_workflow = parts.stack.workflow("train"), parts.stack.workflow("eval")
        self.eval_descriptors = parts.eval_descriptors
        self.sampler, self.eval_tasks = parts.sampler, parts.eval_tasks
        self.test_tasks = parts.test_tasks or []  # the claim's tasks: evaluated at the start and at the end
        self.held_out, self.streams, self.earlier_trained = parts.held_out, parts.streams, parts.earlier_trained
        self.closers = parts.closers
        self.privileged_context = parts.privileged_context
        self.task_depth = parts.task_depth
        self.checkpoints, self.tracker = parts.checkpoints, parts.tracker
        self.rewards, self.dynamic_sampling = parts.stack.ctx.rewards, parts.dynamic_sampling
        self.warm_starts, self.floor = parts.warm_start, parts.floor
        self.max_staleness = settings.max_staleness  # 0: synchronous; k >= 1: rollout ahead (training/asynchronous.py)
        self.start_iteration = 0
        self.history: dict[str, dict[str, float]] = {}
        self.eval_outcomes: dict[str, dict[str, list[bool]]] = {}  # per eval, per task: won? (paired verdicts)
        self.test_history: dict[str, dict[str, float]] = {}  # the same for the test split (the claim), by iteration
        self.test_outcomes: dict[str, dict[str, list[bool]]] = {}
        self.clock = {"train_seconds": 0.0, "episodes": 0}  # time-to-success: training time (no eval), episodes
        self.producer: RolloutProducer | None = None
        self._pending: list[PlayedBatch] = []  # played, not yet trained (from a checkpoint)
        self.updates = UpdateLedger()  # weight versions (one per push) and the iterations that trained nothing

    # ------------------------------------------------------------------------------------------------ resume
    def _restore(self) -> None:
        for checkpoint in reversed(self.checkpoints.complete()):
            try:
                self._load(checkpoint)
                return
            except CheckpointMismatchError:
                raise  # another model or LoRA shape: earlier checkpoints would not fit either; starting over is wrong
            except (AgentforgeError, OSError, RuntimeError, KeyError) as error:
                log.warning("checkpoint %s could not be loaded (%s); trying the previous one", checkpoint.path, error)
                console.print(f"[yellow]checkpoint {checkpoint.path} is unusable ({error}); trying the previous one")
        console.print("[yellow]no usable checkpoint found: starting from scratch")

    def _load(self, checkpoint: Checkpoint) -> None:
        self.learner.load(str(checkpoint.learner_dir))
        state = checkpoint.trainer_state
        self.sampler.load_state_dict(state["sampler"])
        self.history = state.get("history", {})
        self.eval_outcomes = state.get("eval_outcomes", {})
        self.test_history = state.get("test_history", {})
        self.test_outcomes = state.get("test_outcomes", {})
        if self.streams is not None and self.streams.filter is not None and "held_out" in state:
            self.streams.filter.load_state_dict(state["held_out"])
        self.clock.update(state.get("clock", {}))
        if self.rewards is not None:  # a checkpoint from before the reward stages kept KL's beta as kl_penalty
            self.rewards.load_state_dict(state.get("rewards") or {"kl": state.get("kl_penalty", {})})
        self.algorithm.load_state_dict(checkpoint.algorithm_state)
        self._pending = checkpoint.pending_rollouts
        self.updates.load_state_dict(state, checkpoint.iteration)
        rng = checkpoint.rng
        if rng is not None:
            set_rng_state(rng)
        self.start_iteration = checkpoint.iteration
        continue_from = getattr(self.engine, "continue_from", None)  # replicas: engine/version goes on, not from 1
        if continue_from is not None and state.get("engine_version") is not None:
            continue_from(int(state["engine_version"]))
        self._sync_weights()
        self.tracker.truncate_after(checkpoint.iteration)
        console.print(f"resumed from {checkpoint.path} (iteration {checkpoint.iteration})")

    # ------------------------------------------------------------------------------------------------ steps
    def _sync_weights(self) -> float:
        t0 = time.perf_counter()
        # the engine starts from the base weights and LoRA changes only the adapted modules: push just those
        push_from = getattr(self.engine, "update_weights_from", None)
        if push_from is not None and self.learner.actors and self.settings.push_from_learner_ranks:
            from agentforge.engines.replicas.senders import LearnerRankZeroSender

            push_from(LearnerRankZeroSender(self.learner.actors))  # rank 0 → replicas, not via the driver
        else:
            self.engine.update_weights(self.learner.export_weights(only_changed=True, copy=False))
        return time.perf_counter() - t0

    def _engine_sleep(self) -> None:
        """After the rollout: the engine frees its memory for the update (vLLM's sleep mode; a no-op on CPU)."""
        if self.settings.engine_sleeps:
            self.engine.sleep()

    def _engine_wake(self) -> None:
        """Before the weight push: the engine takes its memory back."""
        if self.settings.engine_sleeps:
            self.engine.wake()

    def evaluate(self, iteration: int, progress: TrainProgress | None = None, split: str = "eval",
                 key: str | None = None) -> dict[str, float]:
        """Held-out tasks of `split` (eval: choosing; test: the claim) at the eval temperature, always sampled from
        the same seed (comparable across evals); recorded under `key` (default: the iteration)."""
        started = time.perf_counter()
        self.engine.reseed(iteration_seed(self.settings.seed, 0, salt=1))  # the same eval samples every time
        callback = progress.rollout_callback(split) if progress else None
        tasks = self.test_tasks if split == "test" else self.eval_tasks
        result = self.eval_workflow.run(self.eval_ctx, tasks, self.tcfg.eval_group_size, callback)
        groups = result.groups
        summary = {f"{split}/{k}": v for k, v in rollout_summary(groups, result.stats, result.metrics).items()}
        summary.update({f"{split}/{k}": v for k, v in diversity_summary(groups, self.eval_descriptors).items()})
        if self.task_depth is not None:  # success by the length of the plan a task needs
            summary.update({f"{split}/{k}": v for k, v in success_by_depth(groups, self.task_depth).items()})
        summary.update(self._clock_metrics())
        summary[f"time/{split}"] = time.perf_counter() - started
        history, outcomes = (self.test_history, self.test_outcomes) if split == "test" else \
            (self.history, self.eval_outcomes)
        history[key or str(iteration)] = summary
        outcomes[key or str(iteration)] = episode_outcomes(groups)
        return summary

    def test(self, key: str, progress: TrainProgress | None = None) -> dict[str, float]:
        """The test split (trainer.test_tasks; none: nothing), for the claim: at the start and at the end only."""
        if not self.test_tasks:
            return {}
        return self.evaluate(0, progress, "test", key)

    def _clock_metrics(self) -> dict[str, float]:
        """Where the run stands in training time (rollout, update, sync and warm start; evals not counted) and in
        episodes played for training: the x axes of time-to-success."""
        return {"time/train_elapsed": round(self.clock["train_seconds"], 3),
                "train/episodes_total": float(self.clock["episodes"])}

    def play(self, iteration: int, progress: TrainProgress | None = None) -> tuple[Any, list[Group], dict[str, float]]:
        """The iteration's groups: one batch of tasks, or with DAPO's dynamic sampling as many batches as it takes
        (within `max_rounds`) to fill the batch with groups whose rewards differ. Also every group played (the
        rollout summary's) and the dynamic-sampling counts."""
        def one_round(round_index: int) -> Any:
            # round 0 is seeded as a plain iteration, so dynamic sampling off and on share the first batch
            self.engine.reseed(iteration_seed(self.settings.seed, iteration, salt=1000 * round_index))
            tasks = self.sampler.sample(self.tcfg.tasks_per_iteration)
            label = f"rollout {iteration + 1}" + (f" (round {round_index + 1})" if round_index else "")
            callback = progress.rollout_callback(label) if progress else None
            return self.train_workflow.run(self.ctx, tasks, self.tcfg.group_size, callback)

        if not self.dynamic_sampling.enabled:
            result = one_round(0)
            return result, result.groups, {}
        return play_with_signal(one_round, self.tcfg.tasks_per_iteration, self.dynamic_sampling)

    def _curriculum_step(self, groups: list[Group]) -> dict[str, float]:
        """The curriculum's level these groups were played at, and (schedule `success`) their success fed back:
        a promotion applies to the next tasks drawn."""
        if not isinstance(self.sampler, CurriculumSampler):
            return {}
        metrics = self.sampler.metrics()
        episodes = [t for g in groups for t in g.trajectories]
        if episodes and self.sampler.observe(sum(t.won for t in episodes) / len(episodes)):
            console.print(f"curriculum: training success reached {self.sampler.settings.promote_at:.0%}; next tasks at "
                          f"env.{self.sampler.settings.option}={self.sampler.value!r}")
        return metrics

    def train_iteration(self, iteration: int, progress: TrainProgress | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        async_metrics: dict[str, float] = {}
        version = self.updates.version  # the weights this batch trains: one version per push, not per iteration
        kept = next((b for b in self._pending if b.iteration == iteration), None) if self.producer is None else None
        if self.producer is not None:  # played ahead while the learner trained; at most k versions old
            if progress:
                progress.phase(f"waiting for rollout {iteration + 1} (played ahead)")
            batch, waited = self.producer.take(iteration)
            result, played, dynamic_metrics = batch.result, batch.played, batch.dynamic_metrics
            groups, async_metrics = staleness(result.groups, version, self.max_staleness)
            async_metrics.update({"async/learner_wait_s": waited, "async/rollout_seconds": batch.seconds,
                                  "async/batches_ahead": float(len(self.producer.ready))})
            t_rollout = waited
        elif kept is not None:  # resumed with max_staleness=0 from an asynchronous checkpoint: its tasks are drawn
            self._pending.remove(kept)
            result, played, dynamic_metrics = kept.result, kept.played, kept.dynamic_metrics
            groups, async_metrics = staleness(result.groups, version, oldest_lag(result.groups, version))
            message = (f"iteration {iteration + 1}: training the batch an asynchronous run played before its "
                       f"checkpoint (turns up to {int(async_metrics['async/staleness_max'])} version(s) old) although "
                       "trainer.asynchronous.max_staleness=0: its tasks were already drawn, and playing new ones "
                       "would skip them for good")
            log.warning(message)
            console.print(f"[yellow]{message}")
            t_rollout = 0.0
        else:
            result, played, dynamic_metrics = self.play(iteration, progress)
            groups = result.groups
            t_rollout = time.perf_counter() - started
        summary = rollout_summary(played, result.stats, result.metrics)  # env rewards, before any KL penalty
        curriculum_metrics = self._curriculum_step(played)

        self._engine_sleep()
        t0 = time.perf_counter()
        name = f"algorithm {self.algorithm.name!r}"
        samples, owners = policy_samples(groups, name)
        if progress:
            progress.phase(f"learner update ({len(samples)} samples, {sum(s.length for s in samples)} tokens)")
        prepare_metrics = self.learner.prepare(samples)  # old log-probs fixed (recompute), correction, reference
        if async_metrics:  # played ahead: the staleness's cost, behaviour vs proximal policy, per version lag
            async_metrics.update(lag_metrics(samples, owners, version))
            mark_lags(samples, owners, version)
        kl_metrics = self.rewards.score_samples(samples, owners) if self.rewards is not None else {}
        t_prepare = time.perf_counter() - t0

        t0 = time.perf_counter()
        computed = compute_advantages(self.algorithm, self.learner, samples, owners, groups, name,
                                      self.privileged_context, self.ctx.tokenizer)
        advantages, span_advantages, scoring = computed.per_turn, computed.spans, computed.metrics
        t_adv = time.perf_counter() - t0

        t0 = time.perf_counter()
        warming = self.learner.config.critic.enabled and iteration < self.learner.config.critic.warmup_iterations
        if samples:  # during the critic's warm-up only the critic trains: no new policy, nothing to push
            learner_metrics = self.learner.update(samples, prepared=True, train_policy=not warming)
        else:  # e.g. dynamic sampling found no group with signal within its rounds
            learner_metrics = {"skipped": 1.0, "samples": 0.0, "tokens": 0.0}
        async_metrics.update(lag_clip_fractions(learner_metrics))
        # the learner's other raw counts (summed over micro-batches and ranks) are logged by their plain names
        learner_metrics = {k.removeprefix("count/"): v for k, v in learner_metrics.items()}
        t_update = time.perf_counter() - t0 + t_prepare

        self._engine_wake()
        updated = bool(samples) and not learner_metrics.get("skipped") and not warming
        t_sync = self._sync_weights() if updated else 0.0  # a refused update pushes nothing: no new version
        stalled = None if warming else self.updates.record(iteration + 1, updated)
        if self.producer is not None:
            self.producer.updated(iteration + 1)  # the next batch within the bound may start
        if not samples:
            console.print(f"[yellow]iteration {iteration + 1}: nothing to train (no trained turn in "
                          f"{len(groups)} group(s)); update skipped")
        elif learner_metrics.get("skipped"):
            console.print(f"[yellow]iteration {iteration + 1}: update skipped (non-finite values; the learner's "
                          f"warning names them): {learner_metrics}")
        if stalled:
            console.print(f"[bold red]{stalled}")

        self.clock["train_seconds"] += time.perf_counter() - started
        self.clock["episodes"] += int(sum(len(g.trajectories) for g in played))
        metrics: dict[str, Any] = {f"train/{k}": v for k, v in summary.items()}
        metrics.update(self._clock_metrics())
        metrics.update({(k if k.startswith("critic/") else f"train/{k}"): v for k, v in learner_metrics.items()})
        metrics.update({(k if "/" in k else f"train/{k}"): v for k, v in
                        {**prepare_metrics, **kl_metrics, **dynamic_metrics}.items()})
        metrics.update({f"adv/{k}": v for k, v in self.algorithm.last_metrics.items()})
        metrics.update(async_metrics)
        metrics.update(scoring)
        metrics.update(curriculum_metrics)
        metrics.update(self.updates.metrics())
        metrics.update({
            "time/rollout": t_rollout, "time/advantages": t_adv, "time/update": t_update, "time/sync": t_sync,
            "time/iteration": time.perf_counter() - started, "train/samples": len(samples),
            "train/input_tokens": sum(len(s.input_ids) for s in samples),
        })
        metrics.update({f"env/{k}": v for k, v in self.pool.take_fault_counts().items()})  # faults survived
        metrics.update(getattr(self.engine, "last_sync", {}) if t_sync else {})  # replicas: bytes, version
        self.tracker.log_samples(iteration + 1, sample_records(groups, self.tcfg.log_samples))
        # ---- whole trajectories with advantages, for `agentforge view` and wandb tables (trainer.save_trajectories)
        if self.tcfg.save_trajectories:
            from agentforge.tracking.trajectories import trajectory_records

            self.tracker.log_trajectories(iteration + 1, trajectory_records(
                groups, advantages, span_advantages, self.engine.tokenizer,
                with_tokens=self.tcfg.trajectory_tokens))
        # ---- end of trajectories
        return metrics

    def _start(self, progress: TrainProgress) -> None:
        """Iteration 0: evaluate the model as given, warm-start it on expert data if asked, evaluate again."""
        first: dict[str, Any] = {}
        if self.warm_starts is not None:
            if self.tcfg.eval_before:
                base = self.evaluate(0, progress, key="base")
                first.update({k.replace("eval/", "base/"): v for k, v in base.items() if k.startswith("eval/")})
                first["time/base_eval"] = base["time/eval"]
            # the claim's "model as given" row: on test whenever the run has one (eval_before is the eval split's)
            base_test = self.test("base", progress)
            first.update({k.replace("test/", "test_base/"): v for k, v in base_test.items() if k.startswith("test/")})
            if base_test:
                first["time/test_base"] = base_test["time/test"]
            started = time.perf_counter()
            first.update(self.warm_start(progress))
            self.clock["train_seconds"] += time.perf_counter() - started
        if self.tcfg.eval_before:
            first.update(self.evaluate(0, progress))
        first.update(self.test("0", progress))  # the claim's start: always, even without eval_before
        if first:
            self.tracker.log(0, first)

    def warm_start(self, progress: TrainProgress | None = None) -> dict[str, float]:
        """The warm starts `trainer.warm_start` names, in order (expert SFT, RFT), each followed by a weight sync."""
        if self.warm_starts is None:
            return {}
        return self.warm_starts.run(self.learner, self.engine, self.ctx, self._sync_weights, progress)

    def save_checkpoint(self, iteration: int) -> None:
        with self._producer_paused(), critical():  # a Ctrl-C waits for the checkpoint: complete or absent
            state = {"sampler": self.sampler.state_dict(), "history": self.history,
                     "eval_outcomes": self.eval_outcomes, "test_history": self.test_history,
                     "test_outcomes": self.test_outcomes, "clock": self.clock, **self.updates.state_dict(),
                     "engine_version": getattr(self.engine, "version", None)}
            if self.streams is not None and self.streams.filter is not None:
                state["held_out"] = self.streams.filter.state_dict()
            if self.rewards is not None:
                state["rewards"] = self.rewards.state_dict()
            # played, not trained: the producer's, or (resumed with max_staleness=0) those still kept from before
            pending = self.producer.pending() if self.producer is not None else \
                [b for b in self._pending if b.iteration >= iteration]
            if pending:
                state["pending_rollouts"] = [b.iteration + 1 for b in pending]  # readable; the batches: their own file
            self.checkpoints.save(iteration, self.learner, state, self.algorithm.state_dict(), pending)

    def _producer_paused(self) -> Any:
        return self.producer.paused() if self.producer is not None else contextlib.nullcontext()

    def _start_producer(self, first: int, last: int) -> RolloutProducer:
        """Asynchronous training: rollout from `first` on, in a thread, beside the learner."""
        base = int(getattr(self.engine, "version", 0))  # the engine's push counter now = weight version `start`
        start = self.updates.version  # each later push is one version more (a refused update pushes nothing)
        pending, self._pending = [b for b in self._pending if b.iteration >= first], []
        console.print(f"asynchronous training: rollout runs up to {self.max_staleness} version(s) ahead of the "
                      f"learner{f' ({len(pending)} batch(es) played before the checkpoint)' if pending else ''}")
        return RolloutProducer(lambda i: self.play(i, None), first, self.tcfg.iterations, self.max_staleness,
                               lambda version: start + int(version) - base, pending).start()

    # ------------------------------------------------------------------------------------------------ loop
    def fit(self) -> dict[str, Any]:
        """Run all iterations; returns the before/after eval summary."""
        iterations = self.tcfg.iterations
        if self.resuming:
            self._restore()
        try:
            with TrainProgress(iterations, self.start_iteration, self.settings.max_turns) as progress:
                if self.start_iteration == 0:
                    self._start(progress)
                progress.iterations_begin()
                for iteration in range(self.start_iteration, iterations):
                    if self.max_staleness and self.producer is None:
                        self.producer = self._start_producer(iteration, iterations)
                    metrics = self.train_iteration(iteration, progress)
                    step = iteration + 1
                    every = self.tcfg.eval_every
                    if every and (step % every == 0 or step == iterations):
                        with self._producer_paused():  # eval plays on the same engine and env pool
                            metrics.update(self.evaluate(step, progress))
                    if step == iterations:
                        with self._producer_paused():
                            metrics.update(self.test(str(step), progress))
                    self.tracker.log(step, metrics)
                    progress.iteration_done(step, metrics)
                    if step == self.start_iteration + 1:  # every actor is up now: say where each one runs
                        record_placement(self.run_dir)
                    saved = bool(self.tcfg.checkpoint_every) and (
                        step % self.tcfg.checkpoint_every == 0 or step == iterations)
                    if saved:
                        progress.phase("checkpoint")
                        self.save_checkpoint(step)
                    signum = preemption_requested()  # a scheduler's SIGUSR1/SIGTERM: keep this iteration, then stop
                    if signum is not None and step < iterations:
                        if not saved:
                            progress.phase("checkpoint (preempted)")
                            self.save_checkpoint(step)
                        raise Preempted(signum)
        except KeyboardInterrupt:
            self._say_how_to_resume()
            raise
        finally:
            self.close()
        return self.report()

    def _say_how_to_resume(self) -> None:
        complete = self.checkpoints.complete()
        if complete:
            console.print(f"[yellow]stopped: the last complete checkpoint is {complete[-1].path} (iteration "
                          f"{complete[-1].iteration}); continue with `agentforge train ... resume={self.run_dir}`")
        else:
            console.print("[yellow]stopped before the first checkpoint: nothing to resume from")

    def report(self) -> dict[str, Any]:
        """The curves, the eval and test tables with their paired verdicts, the held-out record, summary.json
        (training/run_report.py)."""
        floor = self._floor(self.eval_tasks) if self.history else None
        test = None
        if self.test_history:
            test = TestEvals(self.test_history, self.test_outcomes, self._floor(self.test_tasks))
        record = self._held_out_record()
        return final_report(self.run_dir, self.settings.title, self.history, self.eval_outcomes, floor,
                            list(self.updates.untrained), self.updates.summary_line(self.tcfg.iterations), test,
                            record, method=self.algorithm.name, warm_started=self.warm_starts is not None,
                            closing_hint=self.tcfg.closing_hint)

    def _held_out_record(self) -> dict[str, Any] | None:
        """How the held-out sets were built, what training skipped, and the overlap measured (held_out.json)."""
        if self.held_out is None or self.streams is None:
            return None
        from agentforge.tasks.held_out import run_record, write_record

        record = run_record(self.held_out, self.streams, {"eval": self.eval_tasks, "test": self.test_tasks},
                            self.earlier_trained)
        write_record((self.run_dir,), record)
        return record

    def _floor(self, tasks: list[Any]) -> dict[str, list[bool]] | None:
        """The random-admissible-action floor on held-out tasks (trainer.eval_floor), None where the env lists no
        admissible actions or the floor cannot be played (said once, never fatal: it is a reference row)."""
        if self.floor is None:
            return None
        from agentforge.evaluation.floor import NoFloor

        try:
            return self.floor(tasks)
        except NoFloor as reason:
            log.info("no random floor: %s", reason)
        except Exception as error:  # a reference row must not fail a finished run
            log.warning("the random floor could not be played: %s", error)
        return None

    def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()
        # the rollout stack's own parts close by the same policy (reliability/closing.py)
        close_all((self.tracker.close, self.learner.close, self.stack.close, *self.closers))
