"""StraTA's rollout hooks: N strategies × M rollouts per task, a strategy turn before turn 1, a judgment pass.

Where each piece enters the default multi-turn workflow:
- `plan`: per task, N·M episodes; episode (i, j) is rollout j of strategy i (`Trajectory.meta`: `strategy_index`,
  `strategy_rollout`). For eval/rollout every episode gets a strategy of its own (N = group size, M = 1).
- `before_first_turn`: one batched generation of σ·N candidate strategies per task (the env's strategy prompt on the
  initial observation), farthest-point selection of N in embedding space when σ·N > N, then each episode shows its
  strategy at the top of every action prompt (`Episode.notes`). The strategy's engine tokens and log-probs are kept
  once per strategy, as a trained STRATEGY span on the strategy's first rollout (so a strategy is trained once, not
  M times); the other rollouts carry its text in `meta["strategy"]`.
- `after_episodes`: the same engine judges every finished episode in one batched call (a NOT_TRAINED `judgment`
  span); flagged step numbers go to `meta["flagged_steps"]`. Rewards and advantages are the algorithm's
  (`algorithms.strata`), computed from what these hooks recorded.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from agentforge.agent.chat import chat_prompt_ids
from agentforge.agent.strategy import (
    NO_STRATEGY,
    StrategyPrompt,
    judgment_messages,
    parse_judgment,
    parse_strategy,
    strategy_messages,
    strategy_note,
    strategy_prompt_for,
)
from agentforge.algorithms.necessity import label_necessity
from agentforge.algorithms.strategy_selection import (
    BUNDLED_MODEL,
    StrategyEmbedder,
    embedding_available,
    farthest_point_selection,
    mean_pairwise_cosine,
)
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.metrics import ratio
from agentforge.rollout.workflow import Episode, EpisodePlan, RolloutContext
from agentforge.types import Completion, LossRole, Span, Task

log = logging.getLogger("agentforge.algorithms.strata")


@dataclass(frozen=True)
class StrategyRolloutOptions:
    """What the hooks need to know. `hierarchical`: N×M groups with selection and judgment (training); otherwise a
    strategy per episode, nothing else (eval, `agentforge rollout`)."""

    num_strategies: int
    rollouts_per_strategy: int
    candidates: int
    judgment: bool
    hierarchical: bool = True
    strategy_max_tokens: int = 96
    judge_max_tokens: int = 48
    judge_observation_chars: int = 300
    embedding_model: str = BUNDLED_MODEL
    embedding_device: str = "cpu"
    log_diversity: bool = True
    judge_replay_agreement: bool = False
    strategy_tag_required: bool = True


class StraTAHooks(RolloutHooks):
    """StraTA's strategy turn, hierarchical plan and critical self-judgment (see the module doc)."""

    name = "strata"

    def __init__(self, options: StrategyRolloutOptions, embedder: StrategyEmbedder | None = None) -> None:
        self.options = options
        self.embedder = embedder or StrategyEmbedder(options.embedding_model, options.embedding_device)
        self._counts: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------------ plan
    def plan(self, tasks: Sequence[Task], group_size: int) -> list[EpisodePlan]:
        self._counts = defaultdict(float)
        o = self.options
        n, m = (o.num_strategies, o.rollouts_per_strategy) if o.hierarchical else (group_size, 1)
        if n * m != group_size:
            raise ConfigError(f"algorithm 'strata': a group of {group_size} rollouts cannot be split into "
                              f"num_strategies × rollouts_per_strategy = {n} × {m}; set trainer.group_size={n * m} "
                              "or change algorithm.num_strategies / algorithm.rollouts_per_strategy")
        return [EpisodePlan(task, rollout_index=i * m + j, group=g, meta={"strategy_index": i, "strategy_rollout": j})
                for g, task in enumerate(tasks) for i in range(n) for j in range(m)]

    # ------------------------------------------------------------------------------------------------ strategy
    def before_first_turn(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        by_task: dict[int, list[Episode]] = defaultdict(list)
        for episode in episodes:
            by_task[episode.plan.group].append(episode)
        sampling = replace(ctx.config.sampling, max_new_tokens=self.options.strategy_max_tokens, stop=[])
        groups = sorted(by_task)
        prompts: dict[int, list[int]] = {}
        wanted: dict[int, int] = {}
        for g in groups:
            first = by_task[g][0]
            prompts[g] = self._strategy_prompt(ctx, strategy_prompt_for(first.plan.task.env), first)
            strategies = 1 + max(e.plan.meta["strategy_index"] for e in by_task[g])
            wanted[g] = self._candidates(strategies)
        flat = [prompts[g] for g in groups for _ in range(wanted[g])]
        completions = ctx.generate(flat, sampling=sampling, extra=True)
        offset = 0
        for g in groups:
            candidates = completions[offset: offset + wanted[g]]
            offset += wanted[g]
            strategies = 1 + max(e.plan.meta["strategy_index"] for e in by_task[g])
            chosen = self._select(candidates, strategies)
            for episode in by_task[g]:
                i = episode.plan.meta["strategy_index"]
                self._assign(ctx, episode, prompts[g], candidates[chosen[i]], chosen[i])
        self._counts["strategies"] += sum(1 + max(e.plan.meta["strategy_index"] for e in by_task[g]) for g in groups)
        self._counts["strategy_candidates"] += len(flat)

    def _candidates(self, strategies: int) -> int:
        """σ·N candidates when training (never fewer than N); one per episode otherwise."""
        return max(strategies, self.options.candidates) if self.options.hierarchical else strategies

    def _strategy_prompt(self, ctx: RolloutContext, prompt: StrategyPrompt, episode: Episode) -> list[int]:
        """The strategy prompt ids; the admissible list is left out when the prompt is over the prompt budget."""
        limit = ctx.config.max_prompt_tokens
        template = ctx.template_for(episode.plan.task.env)
        for show_admissible in (True, False):
            messages = strategy_messages(template, prompt, episode.observation, show_admissible)
            ids = chat_prompt_ids(ctx.tokenizer, messages)
            if len(ids) <= limit:
                return ids
        raise ConfigError(f"StraTA's strategy prompt for {episode.plan.task.describe()} has {len(ids)} tokens, over "
                          f"agent.max_prompt_tokens={limit}; raise it (and engine.max_model_len)")

    def _select(self, candidates: list[Completion], n: int) -> list[int]:
        """Which candidates become the task's N strategies (farthest-point selection when there are more)."""
        texts = [parse_strategy(c.text).text for c in candidates]
        self._counts["distinct_strategy_fraction_sum"] += len(set(texts)) / len(texts)
        self._counts["tasks"] += 1
        need_embeddings = len(candidates) > n
        embeddings = None
        if need_embeddings or (self.options.log_diversity and embedding_available(self.options.embedding_model)):
            t0 = time.perf_counter()
            embeddings = self.embedder.encode(texts)
            self._counts["embed_seconds"] += time.perf_counter() - t0
        if need_embeddings:
            t0 = time.perf_counter()
            chosen = farthest_point_selection(embeddings, n)
            self._counts["selection_ms_sum"] += 1000 * (time.perf_counter() - t0)
        else:
            chosen = list(range(n))
        if embeddings is not None and len(chosen) >= 2:  # diversity needs two strategies (eval often has one)
            self._counts["diversity_tasks"] += 1
            self._counts["cosine_chosen_sum"] += mean_pairwise_cosine(embeddings[chosen])
            self._counts["cosine_candidates_sum"] += mean_pairwise_cosine(embeddings)
        return chosen

    def _assign(self, ctx: RolloutContext, episode: Episode, prompt_ids: list[int], completion: Completion,
                candidate: int) -> None:
        parsed = parse_strategy(completion.text)
        if not self.options.strategy_tag_required:  # any text is a strategy; only an empty answer is a format failure
            parsed = replace(parsed, format_ok=parsed.text != NO_STRATEGY)
        truncated = completion.finish_reason == "length"
        meta = episode.trajectory.meta
        meta.update(strategy=parsed.text, strategy_format_ok=parsed.format_ok, strategy_truncated=truncated,
                    action_token_limit=int(ctx.config.sampling.max_new_tokens))
        episode.notes.append(self._fitting_note(ctx, episode, parsed.text))
        if episode.plan.meta["strategy_rollout"] == 0:
            episode.trajectory.spans.append(Span.from_completion(
                completion, prompt_ids, LossRole.STRATEGY, "strategy", strategy_index=episode.plan.meta[
                    "strategy_index"], candidate=candidate, format_ok=parsed.format_ok, truncated=truncated,
                token_limit=self.options.strategy_max_tokens))
            self._counts["strategy_tokens_sum"] += len(completion.token_ids)
            self._counts["strategy_truncated"] += truncated
            self._counts["strategy_format_failures"] += not parsed.format_ok

    def _fitting_note(self, ctx: RolloutContext, episode: Episode, strategy: str) -> str:
        """The strategy note, shortened (and marked) until turn 1's prompt fits agent.max_prompt_tokens: a long
        strategy is cut and penalised by the length term, never a crash."""
        words = strategy.split()
        while True:
            note = strategy_note(" ".join(words) + (" ..." if len(words) < len(strategy.split()) else ""))
            episode.notes.append(note)
            try:
                ctx.render(episode, 1)
                return note
            except ConfigError:
                if not words:
                    raise
                words = words[: len(words) // 2]
                self._counts["strategy_notes_shortened"] += 1
            finally:
                episode.notes.pop()

    # ------------------------------------------------------------------------------------------------ judgment
    def after_episodes(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        if not (self.options.hierarchical and self.options.judgment):
            return
        judged: list[Episode] = []
        prompts: list[list[int]] = []
        for episode in episodes:
            trajectory = episode.trajectory
            if not trajectory.turns:
                continue
            ids = self._judgment_prompt(ctx, episode)
            if ids is None:
                trajectory.meta.update(judgment="skipped", flagged_steps=[])
                self._counts["judgment_skipped"] += 1
                continue
            judged.append(episode)
            prompts.append(ids)
        if not judged:
            return
        sampling = replace(ctx.config.sampling, max_new_tokens=self.options.judge_max_tokens, stop=[])
        for episode, ids, completion in zip(judged, prompts, ctx.generate(prompts, sampling=sampling, extra=True),
                                            strict=True):
            trajectory = episode.trajectory
            parsed = parse_judgment(completion.text, trajectory.length)
            flagged = list(parsed.flagged or ())
            trajectory.meta.update(judgment="ok" if parsed.ok else "unparseable", flagged_steps=flagged)
            for number in flagged:
                trajectory.turns[number - 1].info["flagged"] = True
            trajectory.spans.append(Span.from_completion(completion, ids, LossRole.NOT_TRAINED, "judgment",
                                                         flagged=flagged, parsed=parsed.ok,
                                                         out_of_range=parsed.out_of_range))
            self._counts["judged"] += 1
            self._counts["judged_steps"] += trajectory.length
            self._counts["flagged_steps"] += len(flagged)
            self._counts["judgment_parse_failures"] += not parsed.ok
            self._counts["judgment_out_of_range"] += parsed.out_of_range
            self._counts["judgment_tokens_sum"] += len(completion.token_ids)
        if self.options.judge_replay_agreement:
            self._replay_agreement(judged, ctx)

    def _replay_agreement(self, judged: list[Episode], ctx: RolloutContext) -> None:
        """Beyond the paper (which audited judgments with an external model): counterfactual necessity labels on
        won episodes whose judgment parsed, and how often a flag agrees with "redundant".

        Labels from `algorithms.necessity` (TrajEvolve's procedure, shared): walk t = 1..T; drop step t (and the
        steps already found redundant) and replay the remaining executed actions from the task's initial state; if
        the task is still won, t is redundant, and so are the later steps that replay could not carry out (Dep(t)).
        A turn the env never executed (an invalid response) or did not carry out is redundant without replay.
        Replays run on the pool's scratch envs, batched across episodes. The logged observations are not checked
        against a verification replay here (`verify=False`: the audit is a metric, not a training signal).
        """
        items = [e for e in judged if e.trajectory.won and e.trajectory.meta.get("judgment") == "ok"
                 and not e.plan.prefix]
        if not items:
            return
        try:
            results = label_necessity(ctx.pool, [e.trajectory for e in items], verify=False,
                                      fallback="set algorithm.judge_replay_agreement=false")
        except AgentforgeError as error:  # an env that cannot replay: no labels, the rollout goes on
            self._counts["replay_label_failures"] += len(items)
            log.warning("StraTA: no replay labels for %d won episode(s): %s", len(items), error)
            return
        for episode, result in zip(items, results, strict=True):
            trajectory = episode.trajectory
            redundant = {k + 1 for k in result.redundant}
            labels = sorted(redundant)
            trajectory.meta["replay_redundant_steps"] = labels
            flagged = set(trajectory.meta.get("flagged_steps", ()))
            numbers = range(1, trajectory.length + 1)
            self._counts["replay_labelled_steps"] += trajectory.length
            self._counts["replay_agreeing_steps"] += sum((n in flagged) == (n in redundant) for n in numbers)
            self._counts["replay_flagged_steps"] += sum(n in flagged for n in numbers)
            self._counts["replay_redundant_steps"] += len(labels)
            self._counts["replays"] += result.replays

    def _judgment_prompt(self, ctx: RolloutContext, episode: Episode) -> list[int] | None:
        """Judgment prompt ids within agent.max_prompt_tokens: with clipped observations, else actions only, else
        None (the episode is not judged, and counted)."""
        strategy = str(episode.trajectory.meta.get("strategy", ""))
        for chars in (self.options.judge_observation_chars, None):
            messages = judgment_messages(episode.trajectory, strategy, chars)
            ids = chat_prompt_ids(ctx.tokenizer, messages)
            if len(ids) <= ctx.config.max_prompt_tokens:
                return ids
        return None

    # ------------------------------------------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, float]:
        c = self._counts
        if not c:
            return {}
        out = {
            "strata/strategies": c["strategies"],
            "strata/strategy_candidates": c["strategy_candidates"],
            "strata/strategy_tokens_mean": ratio(c["strategy_tokens_sum"], c["strategies"]),
            "strata/strategy_truncated_fraction": ratio(c["strategy_truncated"], c["strategies"]),
            "strata/strategy_format_failure_fraction": ratio(c["strategy_format_failures"], c["strategies"]),
            "strata/strategy_distinct_fraction": ratio(c["distinct_strategy_fraction_sum"], c["tasks"]),
        }
        if c["strategy_notes_shortened"]:
            out["strata/strategy_notes_shortened"] = c["strategy_notes_shortened"]
        if c["diversity_tasks"]:
            out.update({
                "strata/strategy_cosine_chosen": c["cosine_chosen_sum"] / c["diversity_tasks"],
                "strata/strategy_cosine_candidates": c["cosine_candidates_sum"] / c["diversity_tasks"],
                "strata/embed_seconds": c["embed_seconds"],
            })
        if c["strategy_candidates"] > c["strategies"]:
            out["strata/selection_ms_per_task"] = ratio(c["selection_ms_sum"], c["tasks"])
        if self.options.hierarchical and self.options.judgment:
            out.update({
                "strata/judged_episodes": c["judged"],
                "strata/judgment_flag_rate": ratio(c["flagged_steps"], c["judged_steps"]),
                "strata/judgment_parse_failures": c["judgment_parse_failures"],
                "strata/judgment_parse_failure_rate": ratio(c["judgment_parse_failures"], c["judged"]),
                "strata/judgment_out_of_range": c["judgment_out_of_range"],
                "strata/judgment_skipped": c["judgment_skipped"],
                "strata/judgment_tokens_mean": ratio(c["judgment_tokens_sum"], c["judged"]),
            })
        if self.options.hierarchical and self.options.judgment and self.options.judge_replay_agreement:
            out.update({
                "strata/replay_labelled_steps": c["replay_labelled_steps"],
                "strata/replay_label_failures": c["replay_label_failures"],
                "strata/replays": c["replays"],
            })
            if c["replay_labelled_steps"]:  # no won, parsed episode: no agreement to report (not a 0)
                out.update(replay_agreement_metrics(c["replay_labelled_steps"], c["replay_redundant_steps"],
                                                    c["replay_flagged_steps"], c["replay_agreeing_steps"]))
        return {k: float(v) for k, v in out.items()}


def replay_agreement_metrics(labelled: float, redundant: float, flagged: float, agreeing: float) -> dict[str, float]:
    """The judgment's agreement with the replay labels over `labelled` steps, and the agreement flags at the same
    rate but at random would reach in expectation (f·r + (1 − f)(1 − r)): the bar the judgment has to clear."""
    r, f = redundant / labelled, flagged / labelled
    return {"strata/replay_redundant_fraction": r, "strata/judgment_replay_agreement": agreeing / labelled,
            "strata/judgment_replay_agreement_chance": f * r + (1 - f) * (1 - r)}
