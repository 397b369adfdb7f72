"""One training iteration of the self-play recipe (`recipe=grpo_textarena_selfplay`, TicTacToe, the policy on both
sides) with the tiny model: both sides' turns are trained, each side's trajectories form a group of their own with
their own final reward, and what the learner trained is exactly what the engine generated."""

from __future__ import annotations

import gzip
import json

import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("textarena")

TASKS, GAMES = 2, 2  # trainer.tasks_per_iteration, trainer.group_size


def test_one_self_play_iteration_trains_both_sides(tiny_train_config, tiny_tokenizer, tmp_path) -> None:
    from agentforge.commands.train import build_trainer
    from agentforge.tracking.tracker import read_metrics

    # the tiny model writes no move by itself: it samples 2 tokens, then `<action>4</action>` is forced. Player 0
    # takes the centre; player 1 is refused twice (occupied) and loses: 3 turns per game, 2 sampled tokens each
    ids = tiny_tokenizer.encode("<action>4</action>", add_special_tokens=False)
    force = f"{{kind:force_sequence,params:{{sequence:{[*ids, tiny_tokenizer.eos_token_id]},after_tokens:2}}}}"
    build_trainer(tiny_train_config("grpo_textarena_selfplay", f"trainer.group_size={GAMES}", "agent.max_turns=3",
                              "agent.sampling.max_new_tokens=16", f"agent.intervention={force.replace(' ', '')}",
                              "learner.micro_batch_tokens=1024", "trainer.eval_every=0")).fit()
    row = next(r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["iteration"] == 1)
    assert row["train/samples"] == TASKS * GAMES * 3  # every turn of both sides is a sample
    assert row["train/player0/win_rate"] == 1.0 and row["train/player1/win_rate"] == 0.0
    assert row["train/episodes"] == TASKS * GAMES * 2  # a trajectory per side and game
    with gzip.open(tmp_path / "run" / "trajectories" / "iter_00001.jsonl.gz", "rt") as handle:
        records = [json.loads(line) for line in handle]
    assert row["train/generated_tokens"] == sum(r["response_tokens"] for r in records)  # nothing lost or re-made
    by_side = {side: [r for r in records if r["meta"]["player"] == side] for side in (0, 1)}
    assert [len(by_side[0]), len(by_side[1])] == [TASKS * GAMES] * 2
    assert len({r["group"] for r in by_side[0]} & {r["group"] for r in by_side[1]}) == 0  # a group per side
    assert all(r["length"] == 1 and r["won"] and r["return"] == pytest.approx(0.9) for r in by_side[0])
    assert all(r["length"] == 2 and not r["won"] and r["return"] == pytest.approx(-1.2) for r in by_side[1])
    assert all(t["info"]["player"] == side for side, rs in by_side.items() for r in rs for t in r["turns"])
