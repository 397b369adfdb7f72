"""Rewards from a judge model (`reward.judge`): a rubric, the episode's transcript, a score in <score></score>.

The judge is any OpenAI-compatible endpoint (`reward.judge.endpoint: http://host:port/v1`: vLLM's or SGLang's
server, `agentforge serve`, a hosted API with its key in the environment variable `api_key_env`) or the rollout
engine's own model (`endpoint: engine`). Requests run `concurrency` at a time, each with a timeout and `retries`
more tries (an answer without a readable score is retried too). Answers are cached by the exact request, and the
cache is checkpointed with the run, so a resumed run does not pay twice for an episode it had judged.

What a score does: `granularity: episode` judges the whole episode once and puts its score on the last turn;
`turn` judges each turn with the episode so far (per-turn rewards: GiGPO's step part and PPO's GAE read them
turn by turn, GRPO and TJPO sum them into the episode's return). `mode: add` adds `weight * score / scale` to the
env's reward; `mode: replace` puts it in place of the env's reward (the invalid-action penalty stays). Failure is
never a silent 0: `on_failure: error` stops the run naming the endpoint and what went wrong; `keep_env_reward`
leaves such an episode with the env's reward, marks it (`Trajectory.meta["judge"] = "failed"`) and counts it
(`reward/judge/failed_episodes`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from agentforge.errors import AgentforgeError
from agentforge.rewards.stages import REWARD_STAGES, RewardStage
from agentforge.schema.groups import JudgeRewardSchema
from agentforge.types import Trajectory, Turn

SCORE = re.compile(r"<score>\s*(-?\d+(?:\.\d+)?)\s*</score>", re.IGNORECASE)
SYSTEM = "You are a strict, fair judge of an agent's work. You give one score and nothing else."
REQUEST = ("Rubric: {rubric}\n\nThe task, as first shown to the agent:\n{intro}\n\nThe agent's steps:\n{steps}\n\n"
           "{focus}Answer with a score from 0 to {scale:g} inside <score> </score>, e.g. <score>7</score>.")
TURN_FOCUS = "Score only the agent's last step (step {step}): how much it moved the task forward.\n\n"
MAX_OBSERVATION_CHARS = 1500

Messages = list[dict[str, str]]


class JudgeClient(Protocol):
    def complete(self, conversations: Sequence[Messages]) -> list[str | JudgeError]:
        """One answer per conversation, or the JudgeError of a request that failed (the others still answer)."""


class JudgeError(AgentforgeError):
    """A judge request that failed after its retries."""


class HTTPJudge:
    """An OpenAI-compatible chat-completions endpoint, `concurrency` requests at a time (stdlib HTTP, no extra
    dependency)."""

    def __init__(self, settings: JudgeRewardSchema) -> None:
        self.url = settings.endpoint.rstrip("/") + "/chat/completions"
        self.settings = settings
        key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        if settings.api_key_env and not key:
            raise AgentforgeError(f"reward.judge.api_key_env={settings.api_key_env!r}, but that environment variable "
                                  "is not set; export it, or set api_key_env=null for an endpoint without a key")
        self.headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}

    def complete(self, conversations: Sequence[Messages]) -> list[str | JudgeError]:
        with ThreadPoolExecutor(max_workers=max(1, self.settings.concurrency)) as pool:
            return list(pool.map(self._one, conversations))

    def _one(self, messages: Messages) -> str | JudgeError:
        body = {"messages": messages, "max_tokens": self.settings.max_tokens,
                "temperature": self.settings.temperature, **({"model": self.settings.model} if self.settings.model
                                                             else {})}
        request = urllib.request.Request(self.url, json.dumps(body).encode(), self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                answer = json.loads(response.read())
            return str(answer["choices"][0]["message"]["content"] or "")
        except (urllib.error.URLError, TimeoutError, OSError, ValueError, KeyError, IndexError) as error:
            return JudgeError(f"judge {self.url}: {type(error).__name__}: {error}")


class EngineJudge:
    """The rollout engine's own model as the judge: the chat template applied once, greedy or sampled as set."""

    def __init__(self, engine: Any, settings: JudgeRewardSchema) -> None:
        self.engine, self.settings = engine, settings

    def complete(self, conversations: Sequence[Messages]) -> list[str | JudgeError]:
        from agentforge.agent.chat import chat_prompt_ids
        from agentforge.types import SamplingConfig

        tokenizer = self.engine.tokenizer
        # control-token strings in a transcript (the policy's own text) stay text: they cannot end the judge's turn
        prompts = [chat_prompt_ids(tokenizer, m) for m in conversations]
        # temperature 0 asks for greedy answers: the engines take a tiny temperature as greedy
        sampling = SamplingConfig(temperature=max(self.settings.temperature, 1e-5),
                                  max_new_tokens=self.settings.max_tokens)
        completions = self.engine.generate(prompts, sampling)
        return [str(tokenizer.decode(c.token_ids, skip_special_tokens=True)) for c in completions]


def parse_score(text: str, scale: float) -> float | None:
    """The score inside <score></score>, or None when there is none or it is outside [0, scale]."""
    found = SCORE.search(text or "")
    if found is None:
        return None
    value = float(found.group(1))
    return value if 0.0 <= value <= scale else None


def transcript(trajectory: Trajectory, upto: int | None = None) -> tuple[str, str]:
    """(the first observation, the steps 1..upto as observation -> action lines), observations clipped."""
    turns = trajectory.turns if upto is None else trajectory.turns[:upto]
    clip = lambda text: text if len(text) <= MAX_OBSERVATION_CHARS else text[:MAX_OBSERVATION_CHARS] + " ..."  # noqa: E731
    intro = clip(trajectory.turns[0].observation) if trajectory.turns else "(no turns)"
    steps = "\n".join(f"Step {i}: saw: {clip(t.observation)}\n  did: {t.action or '(no valid action)'}"
                      for i, t in enumerate(turns, start=1))
    return intro, steps or "(none)"


@REWARD_STAGES.register("judge")
class JudgeReward(RewardStage):
    """Scores finished episodes with a judge model; see the module docstring."""

    name = "judge"

    def __init__(self, settings: JudgeRewardSchema, client: JudgeClient) -> None:
        self.settings, self.client = settings, client
        self.cache: OrderedDict[str, float] = OrderedDict()

    def requests(self, trajectory: Trajectory) -> list[tuple[Turn, Messages]]:
        """(the turn that takes the score, the judge's conversation) for each judgment of this episode."""
        s = self.settings
        if not trajectory.turns:
            return []
        if s.granularity == "episode":
            intro, steps = transcript(trajectory)
            return [(trajectory.turns[-1], self._messages(intro, steps, ""))]
        out = []
        for k, turn in enumerate(trajectory.turns, start=1):
            intro, steps = transcript(trajectory, k)
            out.append((turn, self._messages(intro, steps, TURN_FOCUS.format(step=k))))
        return out

    def _messages(self, intro: str, steps: str, focus: str) -> Messages:
        user = REQUEST.format(rubric=self.settings.rubric, intro=intro, steps=steps, focus=focus,
                              scale=self.settings.scale)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def score_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        s = self.settings
        t0 = time.perf_counter()
        jobs = [(trajectory, turn, messages) for trajectory in trajectories
                for turn, messages in self.requests(trajectory)]
        keys = [_key(messages) for _, _, messages in jobs]
        scores: dict[str, float] = {k: self.cache[k] for k in keys if k in self.cache}
        hits = sum(k in scores for k in keys)
        pending = list(dict.fromkeys(k for k in keys if k not in scores))
        by_key = {k: messages for k, (_, _, messages) in zip(keys, jobs, strict=True)}
        errors: dict[str, str] = {}
        calls = 0
        for _attempt in range(s.retries + 1):
            if not pending:
                break
            answers, failures = self._ask([by_key[k] for k in pending])
            calls += len(pending)
            still = []
            for k, answer, failure in zip(pending, answers, failures, strict=True):
                score = parse_score(answer, s.scale) if failure is None else None
                if score is None:
                    errors[k] = failure or f"no score in 0..{s.scale:g} inside <score></score> in {answer[:120]!r}"
                    still.append(k)
                else:
                    scores[k] = score
                    self._remember(k, score)
                    errors.pop(k, None)
            pending = still
        failed = {id(t) for (t, _, _), k in zip(jobs, keys, strict=True) if k not in scores}
        if failed and s.on_failure == "error":
            example = next(iter(errors.values()))
            raise JudgeError(f"the judge ({s.endpoint}) gave no score for {len(failed)} episode(s) after "
                             f"{s.retries + 1} tries each; e.g. {example}. Fix the endpoint, or set "
                             "reward.judge.on_failure=keep_env_reward to train those episodes on the env's reward "
                             "(counted as reward/judge/failed_episodes)")
        judged_scores: list[float] = []
        env_returns: list[float] = []
        for trajectory in trajectories:
            if id(trajectory) in failed:
                trajectory.meta["judge"] = "failed"
                continue
            env_returns.append(sum(t.env_reward for t in trajectory.turns))
            if s.mode == "replace":
                for turn in trajectory.turns:
                    turn.reward -= turn.env_reward
        for (trajectory, turn, _), k in zip(jobs, keys, strict=True):
            if id(trajectory) in failed:
                continue
            turn.reward += s.weight * scores[k] / s.scale
            judged_scores.append(scores[k] / s.scale)
            trajectory.meta.setdefault("judge_scores", []).append(scores[k])
        return {
            "judge/score_mean": sum(judged_scores) / len(judged_scores) if judged_scores else 0.0,
            "judge/env_return_mean": sum(env_returns) / len(env_returns) if env_returns else 0.0,
            "judge/judgments": float(len(jobs)),
            "judge/cache_hits": float(hits),
            "judge/requests": float(calls),
            "judge/failed_episodes": float(len(failed)),
            "judge/seconds": time.perf_counter() - t0,
        }

    def _ask(self, conversations: list[Messages]) -> tuple[list[str], list[str | None]]:
        """Answers and, per conversation, the error that kept it from one (None: answered)."""
        results = self.client.complete(conversations)
        return ([r if isinstance(r, str) else "" for r in results],
                [str(r) if isinstance(r, JudgeError) else None for r in results])

    def _remember(self, key: str, score: float) -> None:
        self.cache[key] = score
        self.cache.move_to_end(key)
        while len(self.cache) > self.settings.cache_size:
            self.cache.popitem(last=False)

    def state_dict(self) -> dict[str, Any]:
        return {"cache": list(self.cache.items())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cache = OrderedDict((str(k), float(v)) for k, v in state.get("cache", []))


def _key(messages: Messages) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def make_judge(settings: JudgeRewardSchema, engine: Any = None,
               client: Callable[[JudgeRewardSchema], JudgeClient] | None = None) -> JudgeReward:
    """The judge stage for these settings: the engine's model (`endpoint: engine`) or an HTTP endpoint."""
    if client is not None:
        return JudgeReward(settings, client(settings))
    if settings.endpoint == "engine":
        if engine is None:
            raise AgentforgeError("reward.judge.endpoint=engine needs the rollout engine; this command builds none: "
                                  "give an OpenAI-compatible URL (http://host:port/v1)")
        return JudgeReward(settings, EngineJudge(engine, settings))
    return JudgeReward(settings, HTTPJudge(settings))
