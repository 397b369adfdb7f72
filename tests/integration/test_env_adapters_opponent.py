"""TextArena's model opponent with the tiny model: greedy, so an episode replays exactly, and a checkpoint folder
is loaded like a named model (the one adapter test that runs a model)."""

from __future__ import annotations

import random

import pytest

from agentforge.envs.base import make_env
from agentforge.types import Task

pytestmark = pytest.mark.integration
pytest.importorskip("textarena")

def test_textarena_model_opponent_is_greedy_the_same_from_a_name_or_a_folder(tiny_model_dir) -> None:
    from agentforge.envs.adapters.textarena import ModelOpponent

    def episode(model: str) -> list[tuple]:
        env = make_env("textarena", {"id": "TicTacToe-v0", "player": 1, "opponent": "model", "opponent_model": model,
                                     "opponent_max_new_tokens": 8})
        first = env.reset(Task("textarena", 5))  # player 0 (the model) moves first
        record: list[tuple] = [("reset", first.text)]
        for move in ["4", "0", "8", "2", "6", "1", "3"]:
            result = env.step(move)
            record.append((result.observation.text, result.reward, result.done, result.won))
            if result.done:
                break
        return record

    by_name = episode("tiny")
    assert episode("tiny") == by_name  # greedy: a replay sees the same opponent
    assert episode(str(tiny_model_dir)) == by_name  # a checkpoint folder is loaded the same way
    assert "[Player 0]" in by_name[0][1] or "Player 0" in by_name[0][1]
    reply = ModelOpponent("tiny", 8)("[GAME] Your move.", random.Random(0))
    assert isinstance(reply, str) and reply == ModelOpponent("tiny", 8)("[GAME] Your move.", random.Random(1))
