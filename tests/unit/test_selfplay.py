"""Self-play on TextArena (`env.opponent=self`): the env hands every side's turn to the agent exactly as TextArena's
own loop plays it, the rollout's split gives each side its own sampled turns and final reward, and advantages are
normalised per role (SPIRAL's role-conditioned estimation), which differs from pooling both sides."""

from __future__ import annotations

import math
import random
from itertools import count

import numpy as np
import pytest

from agentforge.agent.render import AgentConfig
from agentforge.algorithms import GRPO, GiGPO, TurnBatch
from agentforge.envs.base import make_env
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.sides import check_history, split_sides
from agentforge.rollout.workflow import RolloutStats
from agentforge.types import Group, LossRole, Span, Task, Trajectory, Turn

ta = pytest.importorskip("textarena")

pytestmark = pytest.mark.unit

WIN = ["4", "0", "2", "1", "6"]  # player 0 takes the diagonal 2-4-6
DRAW = ["4", "0", "2", "6", "3", "5", "7", "1", "8"]
_ids = count(100)


def selfplay_env():
    return make_env("textarena", {"id": "TicTacToe-v0", "opponent": "self", "action_format": "[{action}]"})


def library_game(seed: int, moves: list[str]) -> tuple[list[tuple[int, str]], dict[int, float]]:
    """TextArena's own loop: (side to move, its observation) before every move, and close()'s rewards."""
    lib = ta.make("TicTacToe-v0")
    lib.reset(num_players=2, seed=seed)
    seen = []
    for move in moves:
        seen.append(lib.get_observation())
        done, _ = lib.step(f"[{move}]")
        if done:
            return seen, lib.close()[0]
    return seen, {}


def random_moves(seed: int) -> list[str]:
    """Moves of two random players (taken from TextArena's own board), one move refused on the way."""
    from agentforge.envs.adapters.textarena import random_move

    rng = random.Random(seed)
    lib = ta.make("TicTacToe-v0")
    lib.reset(num_players=2, seed=seed)
    moves, done = [], False
    while not done:
        _, observation = lib.get_observation()
        move = random_move(observation, rng).strip("[]")
        if len(moves) == 2:
            move = moves[0]  # occupied: refused, the same side moves again
        moves.append(move)
        done, _ = lib.step(f"[{move}]")
    return moves


def play_turns(moves: list[str], seed: int = 0) -> Trajectory:
    """A self-play game on the env, recorded as the rollout records it (`record_turn`): each turn's info is its
    observation's (whose move) plus the step's; distinct response ids stand for what the engine sampled."""
    env = selfplay_env()
    task = Task("textarena", seed)
    observation = env.reset(task)
    trajectory = Trajectory(task=task, rollout_index=0)
    for move in moves:
        result = env.step(move)
        trajectory.turns.append(Turn(
            prompt_ids=[1, 2], response_ids=[next(_ids), next(_ids)], logprobs=[-0.1, -0.2], forced_mask=[False] * 2,
            response_text=f"<action>{move}</action>", action=move, valid=True, reward=result.reward,
            env_reward=result.reward, anchor=observation.anchor, observation=observation.text, done=result.done,
            info={**observation.info, **result.info}, role=LossRole.ACTION))
        observation = result.observation
        if result.done:
            break
    return trajectory


def test_self_play_hands_every_side_its_turn_exactly_as_textarenas_loop() -> None:
    for seed, moves in ((4, random_moves(4)), (5, random_moves(5)), (0, WIN), (0, DRAW)):
        expected, rewards = library_game(seed, moves)
        env = selfplay_env()
        observation = env.reset(Task("textarena", seed))
        for (side, text), move in zip(expected, moves, strict=True):
            assert observation.info == {"player": side, "sides": 2} and observation.text == text
            result = env.step(move)
            assert result.info["player"] == side  # the side that moved
            observation = result.observation
        assert result.done and result.info["rewards"] == rewards
        assert result.reward == rewards[side]  # the final step pays the mover
        winners = [s for s in rewards if rewards[s] > rewards[1 - s]]
        assert result.info["winners"] == winners and result.won == (side in winners)
    refused = selfplay_env()
    refused.reset(Task("textarena", 0))
    refused.step("4")
    again = refused.step("4")
    assert again.info["executable"] is False and "already occupied" in again.info["invalid_action"]
    assert again.observation.info["player"] == 1  # refused: the same side moves again


def test_the_split_gives_each_side_its_sampled_turns_and_its_own_reward() -> None:
    game = play_turns(WIN)
    groups = split_sides([Group(game.task, [game])])
    assert [len(g.trajectories) for g in groups] == [1, 1] and all(g.task == game.task for g in groups)
    first, second = groups[0].trajectories[0], groups[1].trajectories[0]
    assert (first.meta["player"], second.meta["player"]) == (0, 1)
    assert [t.action for t in first.turns] == ["4", "2", "6"] and [t.action for t in second.turns] == ["0", "1"]
    played = {id(t.response_ids): t for t in game.turns}
    for trajectory in (first, second):
        for turn in trajectory.turns:  # the very token ids and log-probs recorded, not copies or re-tokenised text
            original = played[id(turn.response_ids)]
            assert turn.logprobs is original.logprobs and turn.prompt_ids is original.prompt_ids
    assert (first.episode_return, first.won) == (1.0, True)  # paid on its own final move
    assert (second.episode_return, second.won) == (-1.0, False)  # its last turn carries the game's end
    assert second.turns[-1].done and second.turns[-1].info["final_reward"] == -1.0
    assert game.turns[3].reward == 0.0  # the played trajectory is left as it was


def test_advantages_are_normalised_per_role_not_pooled() -> None:
    """Player 0 wins one game and draws the other. Per role, the draw is below player 0's baseline and above player
    1's; pooled over both sides (mean 0) the draw would get no signal at all."""
    win, draw = play_turns(WIN), play_turns(DRAW)
    draw.rollout_index = 1
    task = win.task
    groups = split_sides([Group(task, [win, draw])])
    assert [[t.episode_return for t in g.trajectories] for g in groups] == [[1.0, 0.0], [-1.0, 0.0]]
    advantages = GRPO().advantages(groups)
    a = 1 / (math.sqrt(0.5) + 1e-6)  # (R - mean) / (std + eps) with returns {1, 0}: ±0.5 / 0.7071
    per_turn = [a / 2] * 3 + [-a / 2] * 5 + [-a / 2] * 2 + [a / 2] * 4
    assert advantages == pytest.approx(per_turn)
    pooled = GRPO().advantages([Group(task, [t for g in groups for t in g.trajectories])])
    draw_turns = slice(3, 8)
    assert np.allclose(pooled[draw_turns], 0.0) and not np.allclose(advantages[draw_turns], 0.0)
    gigpo = GiGPO().advantages(groups)  # GiGPO's step groups stay within a side's group
    batch = TurnBatch.from_groups(groups)
    assert gigpo.shape == (batch.n_turns,) and np.isfinite(gigpo).all()
    assert set(batch.step_id[batch.group_id == 0]).isdisjoint(batch.step_id[batch.group_id == 1])


def test_edge_cases_of_the_split() -> None:
    forfeit = play_turns(["9", "9"])  # player 0 is refused twice: it loses before player 1 ever moves
    groups = split_sides([Group(forfeit.task, [forfeit])])
    loser, winner = groups[0].trajectories[0], groups[1].trajectories[0]
    assert loser.length == 2 and loser.episode_return == -1.0 and not loser.won
    assert winner.length == 0 and winner.won  # a member of its role's group with return 0, and no samples
    unfinished = play_turns(WIN[:3])  # cut by agent.max_turns: nobody is paid
    sides = split_sides([Group(unfinished.task, [unfinished])])
    assert [t.trajectories[0].episode_return for t in sides] == [0.0, 0.0]
    assert not any(t.trajectories[0].won for t in sides)
    discarded = Span(LossRole.NOT_TRAINED, "discarded_turn", [1], [2], [-0.3], "x", turn_index=1)
    unfinished.spans = [discarded]
    assert split_sides([Group(unfinished.task, [unfinished])])[1].trajectories[0].spans[0].turn_index == 0
    unfinished.spans = [Span(LossRole.STRATEGY, "strategy", [1], [2], [-0.3], "plan")]
    with pytest.raises(AgentforgeError, match="train self-play with grpo or gigpo.*'strategy' span .* belongs to no"):
        split_sides([Group(unfinished.task, [unfinished])])
    unfinished.spans, unfinished.meta["evolved"] = [], "branch"
    with pytest.raises(AgentforgeError, match="'branch' trajectory .* built from a game rather than played"):
        split_sides([Group(unfinished.task, [unfinished])])
    one_sided = make_env("textarena", {"id": "TicTacToe-v0"}).reset(Task("textarena", 0))
    assert one_sided.info == {"player": 0}  # a fixed opponent: nothing to split
    solo = Trajectory(Task("textarena", 0), 0)
    assert split_sides([Group(solo.task, [solo])])[0].trajectories == [solo]


def test_a_history_that_would_mix_the_sides_is_refused() -> None:
    observation = selfplay_env().reset(Task("textarena", 0))
    check_history(AgentConfig(history_length=0), [observation])
    for config in (AgentConfig(history_length=2), AgentConfig(history="conversation", history_length=0)):
        with pytest.raises(ConfigError, match="set agent.history=window agent.history_length=0"):
            check_history(config, [observation])
    check_history(AgentConfig(history_length=2), [make_env("textarena", {"id": "TicTacToe-v0"}).reset(
        Task("textarena", 0))])


def test_per_side_win_rates_are_reported() -> None:
    win, draw = play_turns(WIN), play_turns(DRAW)
    groups = split_sides([Group(win.task, [win, draw])])
    summary = rollout_summary(groups, RolloutStats())
    assert summary["player0/win_rate"] == 0.5 and summary["player1/win_rate"] == 0.0
    assert summary["success_rate"] == 0.25 and summary["episodes"] == 4  # one trajectory per side and game
    assert summary["player1/mean_return"] == -0.5
    assert "player0/win_rate" not in rollout_summary([Group(win.task, [win])], RolloutStats())
