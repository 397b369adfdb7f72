"""Rewards from a judge (agentforge/rewards/judge.py) against a real OpenAI-compatible HTTP server on loopback: the
score lands where the settings say, answers are cached and checkpointed, unreadable answers and timeouts are
retried, and a judge that fails is never a silent 0."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentforge.errors import AgentforgeError
from agentforge.rewards import RewardPipeline
from agentforge.rewards.judge import JudgeError, make_judge, parse_score
from agentforge.schema.compose import compose_config
from agentforge.schema.groups import JudgeRewardSchema, RewardSchema
from agentforge.types import Task, Trajectory, Turn


class JudgeServer:
    """A chat-completions endpoint whose answer is `answer(request body, headers)`; counts the requests."""

    def __init__(self, answer: Callable[[dict, dict], str]) -> None:
        self.answer, self.requests, self.lock = answer, [], threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append((self.path, body, dict(self.headers)))
                text = server.answer(body, dict(self.headers))
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True  # a request still sleeping does not hold up close()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers: list[JudgeServer] = []

    def start(answer: Callable[[dict, dict], str]) -> JudgeServer:
        servers.append(JudgeServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def moves_right(body: dict, headers: dict) -> str:
    """Scores an episode by how many of its steps went right (the transcript the judge sees)."""
    return f"<score>{body['messages'][1]['content'].count('did: right')}</score>"


def episode(actions: list[str], env_rewards: list[float], seed: int = 0) -> Trajectory:
    turns = [Turn(prompt_ids=[1], response_ids=[2], logprobs=[-1.0], forced_mask=[False], response_text="",
                  action=a, valid=True, reward=r, env_reward=r, anchor=str(i), observation=f"room {seed} step {i}")
             for i, (a, r) in enumerate(zip(actions, env_rewards, strict=True))]
    return Trajectory(task=Task(env="sokoban", seed=seed), rollout_index=0, turns=turns)


def test_an_episode_score_lands_on_its_last_turn_beside_the_env_reward(serve):
    server = serve(moves_right)
    judge = make_judge(JudgeRewardSchema(endpoint=server.url, weight=2.0))
    a, b = episode(["right", "right", "up"], [0.0, 0.0, 1.0]), episode(["left"], [0.0], seed=1)
    metrics = judge.score_episodes([a, b])
    assert [t.reward for t in a.turns] == [0.0, 0.0, pytest.approx(1.0 + 2.0 * 2 / 10)]
    assert [t.env_reward for t in a.turns] == [0.0, 0.0, 1.0] and b.turns[0].reward == 0.0
    assert a.meta["judge_scores"] == [2.0] and b.meta["judge_scores"] == [0.0]
    assert metrics["judge/score_mean"] == pytest.approx(0.1) and metrics["judge/env_return_mean"] == 0.5
    assert metrics["judge/requests"] == 2 and metrics["judge/failed_episodes"] == 0
    assert {path for path, _, _ in server.requests} == {"/v1/chat/completions"}
    assert all(body["temperature"] == 0.0 for _, body, _ in server.requests)
    assert sorted("room 0 step 0" in str(body) for _, body, _ in server.requests) == [False, True]


def test_per_turn_judgments_replace_the_env_reward_turn_by_turn(serve):
    server = serve(lambda body, headers: "<score>10</score>" if "step 2" in body["messages"][1]["content"].split(
        "Score only")[-1] else "<score>5</score>")
    judge = make_judge(JudgeRewardSchema(endpoint=server.url, mode="replace", granularity="turn"))
    a = episode(["right", "up"], [0.3, 1.0])
    a.turns[0].reward = 0.3 - 0.1  # the invalid-action penalty, applied before: it stays
    judge.score_episodes([a])
    assert [t.reward for t in a.turns] == [pytest.approx(-0.1 + 0.5), pytest.approx(1.0)]
    shown = sorted("Step 2" in body["messages"][1]["content"] for _, body, _ in server.requests)
    assert shown == [False, True]  # turn 1 is judged on the episode up to turn 1, turn 2 on the whole


def test_answers_are_cached_by_request_and_the_cache_is_checkpointed(serve):
    server = serve(moves_right)
    settings = JudgeRewardSchema(endpoint=server.url)
    judge = make_judge(settings)
    judge.score_episodes([episode(["right"], [0.0])])
    again = episode(["right"], [0.0])
    metrics = judge.score_episodes([again])
    assert len(server.requests) == 1 and metrics["judge/cache_hits"] == 1 and again.turns[0].reward == 0.1
    resumed = make_judge(settings)
    resumed.load_state_dict(judge.state_dict())
    resumed.score_episodes([episode(["right"], [0.0])])
    assert len(server.requests) == 1


def test_an_answer_without_a_score_is_asked_again(serve):
    answers = iter(["I think it went well", "<score>11</score>", "<score>4</score>"])
    server = serve(lambda body, headers: next(answers))
    metrics = make_judge(JudgeRewardSchema(endpoint=server.url, retries=2)).score_episodes([episode(["up"], [0.0])])
    assert len(server.requests) == 3 and metrics["judge/score_mean"] == pytest.approx(0.4)
    assert parse_score("<SCORE> 7.5 </score>", 10) == 7.5 and parse_score("<score>-1</score>", 10) is None


def test_a_judge_that_fails_stops_the_run_or_leaves_the_env_reward_counted(serve):
    server = serve(lambda body, headers: time.sleep(1.0) or "<score>9</score>")
    failing = JudgeRewardSchema(endpoint=server.url, timeout_s=0.3, retries=1)
    with pytest.raises(JudgeError, match=r"gave no score for 1 episode.*keep_env_reward"):
        make_judge(failing).score_episodes([episode(["right"], [1.0])])
    kept = episode(["right"], [1.0])
    metrics = make_judge(JudgeRewardSchema(**{**failing.__dict__, "on_failure": "keep_env_reward"})).score_episodes(
        [kept])
    assert kept.turns[0].reward == 1.0 and kept.meta["judge"] == "failed" and metrics["judge/failed_episodes"] == 1
    with pytest.raises(JudgeError, match="URLError|ConnectionRefused"):
        unreachable = JudgeRewardSchema(endpoint="http://127.0.0.1:9/v1", retries=0)
        make_judge(unreachable).score_episodes([episode(["up"], [0])])


def test_the_api_key_comes_from_the_environment_never_the_config(serve, monkeypatch):
    server = serve(moves_right)
    with pytest.raises(AgentforgeError, match="JUDGE_KEY.*not set"):
        make_judge(JudgeRewardSchema(endpoint=server.url, api_key_env="JUDGE_KEY"))
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    make_judge(JudgeRewardSchema(endpoint=server.url, api_key_env="JUDGE_KEY", model="judge-1")).score_episodes(
        [episode(["right"], [0.0])])
    _, body, headers = server.requests[0]
    assert headers["Authorization"] == "Bearer sk-test" and body["model"] == "judge-1"


def test_the_reward_group_turns_the_judge_on_after_the_penalty_for_every_command(serve):
    server = serve(moves_right)
    cfg = compose_config(["command=eval", "recipe=debug", "reward.judge.enabled=true",
                          f"reward.judge.endpoint={server.url}", "reward.judge.weight=0.5"])
    from agentforge.commands.builders import build_rewards

    pipeline = build_rewards(cfg)
    assert [s.name for s in pipeline.stages] == ["invalid_action", "judge"]
    metrics = pipeline.score_episodes([episode(["right", "right"], [0.0, 1.0])])
    assert metrics["reward/judge/score_mean"] == pytest.approx(0.2)
    assert [s.name for s in RewardPipeline.from_settings(RewardSchema(judge=JudgeRewardSchema())).stages] == [
        "invalid_action"]
    with pytest.raises(AgentforgeError, match="endpoint=engine needs the rollout engine"):
        RewardPipeline.from_settings(RewardSchema(judge=JudgeRewardSchema(enabled=True)))
    assert re.search(r"Judge whether", JudgeRewardSchema().rubric)
