"""T2PO without an engine: the self-calibrated signal, the TTI state machine on hand-made logits, TDS decisions against
the authors' loop on hand-computed score sequences, config validation, warm-start modes and the efficiency metrics."""

from __future__ import annotations

import math

import pytest
import torch

from agentforge.algorithms import make_algorithm
from agentforge.algorithms.t2po import T2PO, tds_regenerates
from agentforge.algorithms.t2po_rollout import T2POHooks, turn_score
from agentforge.engines.interventions import (
    TOKEN_PIECES,
    ThinkPlateauStop,
    build_intervention,
    next_token_uncertainty,
    register_token_pieces,
    self_calibrated_uncertainty,
)
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.workflow import RolloutStats
from agentforge.types import Completion, Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

ALPHA = 0.4


# ---------------------------------------------------------------------------------------------- the signal
def test_self_calibrated_uncertainty_by_hand():
    vocab = 4
    uniform = torch.zeros(vocab)  # H = log 4, p_max = 1/4 -> M = 0.4 * 1 + 0.6 * 0.75
    h, p = next_token_uncertainty(uniform)
    assert self_calibrated_uncertainty(float(h), float(p), vocab, ALPHA) == pytest.approx(0.4 + 0.6 * 0.75)
    certain = torch.tensor([0.0, -1e4, -1e4, -1e4])  # H = 0, p_max = 1 -> M = 0
    h, p = next_token_uncertainty(certain)
    assert self_calibrated_uncertainty(float(h), float(p), vocab, ALPHA) == pytest.approx(0.0, abs=1e-6)
    # the paper's point: the same p_max, different residual allocation -> different M (entropy tells them apart)
    a = torch.log(torch.tensor([0.5, 0.5, 1e-9, 1e-9]))
    b = torch.log(torch.tensor([0.5, 0.25, 0.125, 0.125]))
    ma = self_calibrated_uncertainty(*map(float, next_token_uncertainty(a)), vocab, ALPHA)
    mb = self_calibrated_uncertainty(*map(float, next_token_uncertainty(b)), vocab, ALPHA)
    assert ma < mb
    assert ma == pytest.approx(ALPHA * math.log(2) / math.log(4) + 0.6 * 0.5, abs=1e-6)


# ---------------------------------------------------------------------------------------------- TTI
QUEUE = [13, 14, 15]
CLOSE = [7, 8]  # "</", "think><": a BPE merge of `</think><action>` (SmolLM2 writes it so)
VOCAB = 16
TOKEN_PIECES["unit-test"] = ["x"] * 7 + ["</", "think><", "action>"] + ["y"] * 6


def row(m_target: float) -> torch.Tensor:
    """A logits row whose M is about `m_target` (entropy from a two-level distribution)."""
    # p_max = 1 - m_target (roughly), rest spread evenly
    top = max(1e-3, min(1 - 1e-3, 1 - m_target))
    probs = torch.full((VOCAB,), (1 - top) / (VOCAB - 1))
    probs[0] = top
    return probs.log()


def tti(**overrides) -> ThinkPlateauStop:
    params = {"queue": QUEUE, "vocab_size": VOCAB, "alpha": ALPHA, "epsilon": 0.05, "window": 3,
              "min_think_tokens": 5, "stop_texts": ["</think>", "<action>"], "pieces": "unit-test"}
    return ThinkPlateauStop(**{**params, **overrides})


def drive(intervention: ThinkPlateauStop, signal: list[float], first_ids: list[int] | None = None) -> list[int | None]:
    """Step the intervention through `signal` (one M per step); the output grows by the forced or a dummy token."""
    out: list[int] = list(first_ids or [])
    forced = []
    for m in signal:
        logits = row(m)
        fired = intervention.step(out, logits)
        token = int(logits.argmax()) if fired else 1
        forced.append(token if fired else None)
        out.append(token)
    return forced


def test_tti_fires_after_the_window_of_small_changes_and_forces_the_queue():
    signal = [0.9, 0.1, 0.8, 0.2, 0.5, 0.51, 0.52, 0.5, 0.3, 0.4, 0.9, 0.2]
    forced = drive(tti(), signal)
    # positions 5, 6, 7 are small changes from 4 -> streak 3 at position 7 (>= min 5): queue at 7, 8, 9
    assert forced == [None] * 7 + QUEUE + [None, None]


def test_tti_waits_for_the_minimum_prefix():
    signal = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    forced = drive(tti(min_think_tokens=6), signal)
    assert forced.index(QUEUE[0]) == 6  # the streak is long enough at position 3, the prefix only at 6
    forced = drive(tti(min_think_tokens=0, window=1), signal)
    assert forced.index(QUEUE[0]) == 1  # first position with a previous M


def test_tti_stops_watching_once_the_model_closed_its_thinking():
    intervention = tti(min_think_tokens=0)
    out = [1, 1] + CLOSE
    for _ in range(6):
        assert not intervention.step(out, row(0.5))
        out.append(1)
    assert not intervention.fired and intervention.forced_positions == set()


def test_tti_decides_again_on_a_repeated_call_for_the_firing_position():
    intervention = tti(min_think_tokens=0, window=2)
    out = [1]
    for m in (0.5, 0.5):
        intervention.step(out, row(m))
        out.append(1)
    assert intervention.step(out, row(0.5))  # fires at position 3
    assert not intervention.step(out, row(0.95))  # vLLM re-evaluates position 3 with another row: no plateau
    assert 3 not in intervention.forced_positions and not intervention.fired


def test_tti_is_built_from_a_spec_and_rejects_bad_params():
    built = build_intervention({"kind": "think_plateau_stop", "params": {"queue": QUEUE, "vocab_size": VOCAB}})
    assert isinstance(built, ThinkPlateauStop) and built.wants_uncertainty
    for bad in ({"alpha": 1.5}, {"epsilon": -0.1}, {"window": 0}, {"min_think_tokens": -1}, {"queue": []}):
        with pytest.raises(ConfigError):
            tti(**bad)


# ---------------------------------------------------------------------------------------------- TDS
def authors_tds(previous: float | None, attempts: list[float], eta: float, max_try: int) -> list[bool]:
    """The authors' loop (WillDreamer/T2PO, rollout_loop.py, T2PO_multi_turn_loop) for one env, as decisions per
    attempt (True = regenerate): Γ = |score − previous|; while 0 < Γ < η and regen_attempt < max_try, regenerate."""
    if previous is None:  # `if _step > 0`: the first turn is never checked
        return [False]
    decisions, attempt = [], 0
    while True:
        gamma = abs(attempts[attempt] - previous)
        if 0 < gamma < eta and attempt < max_try:
            decisions.append(True)
            attempt += 1
        else:
            decisions.append(False)
            return decisions


CASES = [  # previous score, the scores of successive attempts, eta, max_try, hand-computed decisions
    (None, [0.5], 0.3, 2, [False]),                       # first turn: never checked
    (0.5, [0.9], 0.3, 2, [False]),                        # Γ = 0.4 >= η: kept
    (0.5, [0.6, 0.9], 0.3, 2, [True, False]),             # Γ = 0.1 < η: regenerated; then Γ = 0.4: kept
    (0.5, [0.55, 0.52, 0.51], 0.3, 2, [True, True, False]),  # max_try reached: the last attempt is kept anyway
    (0.5, [0.5], 0.3, 2, [False]),                        # Γ = 0 is kept (the authors test Γ > 0)
    (0.5, [0.6], 0.3, 0, [False]),                        # max_try 0: TDS never regenerates
    (0.2, [0.25, 0.1, 0.3], 0.06, 2, [True, False]),      # Γ = 0.05 < 0.06, then 0.1: kept
]


def completion_with_score(score: float) -> Completion:
    """A 3-token completion whose T2PO turn score is `score` (entropy 0, so M = (1 − α)(1 − p_max))."""
    p = 1 - score / (1 - ALPHA)
    return Completion(token_ids=[1, 2, 3], logprobs=[0.0] * 3, text="x", finish_reason="stop",
                      entropy=[0.0] * 3, top_prob=[p] * 3)


class _Ctx:
    """What review_turns reads from a rollout context: the engine's vocabulary size."""

    class engine:  # noqa: N801 - mirrors RolloutContext.engine
        vocab_size = VOCAB

    tokenizer = None


class _Episode:
    def __init__(self, slot: int) -> None:
        self.slot = slot


@pytest.mark.parametrize(("previous", "attempts", "eta", "max_try", "expected"), CASES)
def test_tds_makes_the_authors_decisions(previous, attempts, eta, max_try, expected):
    assert authors_tds(previous, attempts, eta, max_try) == expected
    algorithm = make_algorithm({"name": "t2po", "eta": eta, "max_try": max_try, "alpha": ALPHA})
    hooks = T2POHooks(algorithm.config, tds=True)
    episode = _Episode(0)
    hooks.before_first_turn([episode], _Ctx())
    if previous is not None:
        assert hooks.review_turns([episode], [completion_with_score(previous)], 0, _Ctx()) == [True]
    decisions = []
    for attempt, score in enumerate(attempts):
        keep = hooks.review_turns([episode], [completion_with_score(score)], attempt, _Ctx())[0]
        decisions.append(not keep)
        if keep:
            break
    assert decisions == expected
    assert hooks.counts["regenerated"] == sum(expected)
    assert hooks.previous[0] == pytest.approx(attempts[len(expected) - 1])  # the kept attempt's score is remembered
    if previous is not None:  # the rule itself, attempt by attempt
        for attempt, (score, decision) in enumerate(zip(attempts, expected, strict=False)):
            assert tds_regenerates(abs(score - previous), eta, attempt, max_try) == decision


def test_tds_is_off_outside_training_and_turn_scores_skip_forced_tokens():
    algorithm = make_algorithm({"name": "t2po"})
    assert algorithm.rollout_hooks("train").tds and not algorithm.rollout_hooks("eval").tds
    assert not make_algorithm({"name": "t2po", "tds": False}).rollout_hooks("train").tds
    c = completion_with_score(0.3)
    c.top_prob = [c.top_prob[0], c.top_prob[0], 0.0]  # the last token (forced) had a flat distribution
    c.forced_mask = [False, False, True]
    assert turn_score(c, VOCAB, ALPHA) == pytest.approx(0.3)
    with pytest.raises(AgentforgeError, match="uncertainty"):
        turn_score(Completion([1], [0.0], "x", "stop"), VOCAB, ALPHA)


# ---------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(("options", "message"), [
    ({"alpha": -0.1}, "alpha"), ({"alpha": 1.01}, "alpha"), ({"tti_epsilon": -1e-3}, "tti_epsilon"),
    ({"eta": -0.5}, "eta"), ({"max_try": -1}, "max_try"), ({"tti_window": 0}, "tti_window"),
    ({"tti": "yes"}, "tti"), ({"lambda": 0.3}, "unknown option"),
])
def test_bad_t2po_options_are_rejected_with_the_option_named(options, message):
    with pytest.raises(ConfigError, match=message):
        make_algorithm({"name": "t2po", **options})


def test_tti_needs_the_in_process_engine():
    algorithm = make_algorithm({"name": "t2po"})
    run = {"trainer": {}, "agent": {}, "engine": {"name": "vllm", "in_process": False}}
    with pytest.raises(ConfigError, match="in_process=true"):
        algorithm.check_run(run)
    make_algorithm({"name": "t2po", "tti": False}).check_run(run)  # without TTI it is fine


def test_one_intervention_per_turn_and_the_queue_follows_the_template(tiny_spec):
    from agentforge.algorithms.t2po_rollout import action_openings, think_queue

    algorithm = make_algorithm({"name": "t2po"})
    with pytest.raises(ConfigError, match="agent.intervention=null"):
        algorithm.check_run({"trainer": {}, "agent": {"intervention": {"kind": "force_sequence"}}, "engine": {}})
    assert think_queue("action") == "</think>\n<action>"
    assert think_queue("search|answer") == "</think>\n<"  # the model writes which tag it means
    assert action_openings("search|answer") == ["<search>", "<answer>"]
    model = {"name": "tiny", "path": tiny_spec.path}
    for env in ("sokoban", "search_qa", "webshop"):  # the tokenizer round-trips each env's queue: accepted
        algorithm.check_run({"trainer": {}, "agent": {}, "engine": {"name": "vllm"}, "model": model,
                             "env": {"name": env}})


def test_t2po_keeps_gigpo_advantages():
    from agentforge.algorithms.gigpo import GiGPO

    assert issubclass(T2PO, GiGPO)
    assert make_algorithm({"name": "t2po", "epsilon": 1e-4}).config.epsilon == 1e-4  # GiGPO's std floor


def test_tti_sees_the_closing_tag_through_bpe_merges(tiny_tokenizer):
    """`</think><action>` is `</`, `think`, `><`, ... in this tokenizer: no id sequence of `</think>` appears, the text
    does. TTI must stop watching there, not force `</think>` into the action."""
    text = "<think>Next move: up.</think><action>up</action>"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    plain = tiny_tokenizer.encode("</think>", add_special_tokens=False)
    assert not any(ids[i : i + len(plain)] == plain for i in range(len(ids)))  # the merge this guards against
    key = register_token_pieces(tiny_tokenizer)
    assert register_token_pieces(tiny_tokenizer) == key  # built once per tokenizer
    closed_at = next(k for k in range(1, len(ids)) if "</think>" in tiny_tokenizer.decode(ids[:k]))
    queue = tiny_tokenizer.encode("</think>\n<action>", add_special_tokens=False)
    flat = torch.zeros(len(tiny_tokenizer))
    # ε = 1: the plateau holds at every step, so from `closed_at` on TTI would fire unless it sees the tag
    blind = tti(min_think_tokens=closed_at, window=1, epsilon=1.0, queue=queue, stop_texts=(), pieces=None)
    watching = tti(min_think_tokens=closed_at, window=1, epsilon=1.0, queue=queue, pieces=key)
    for k in range(1, len(ids)):
        assert blind.step(ids[:k], flat.clone()) == (closed_at <= k < closed_at + len(queue))
        assert not watching.step(ids[:k], flat.clone())
    assert blind.fired and not watching.fired and watching.stopped


def test_think_token_count_on_real_token_ids(tiny_tokenizer):
    from agentforge.agent.parsing import think_token_count

    text = "<think>Next move: up.</think><action>up</action>"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    close = tiny_tokenizer.encode("<think>Next move: up.</think>", add_special_tokens=False)
    assert think_token_count(tiny_tokenizer, ids, text) == len(close)
    unclosed = "<think>still thinking about it"
    ids = tiny_tokenizer.encode(unclosed, add_special_tokens=False)
    assert think_token_count(tiny_tokenizer, ids, unclosed) == len(ids)
    assert think_token_count(tiny_tokenizer, [5, 6], "<action>up</action>") == 0


# ---------------------------------------------------------------------------------------------- trainer and metrics
def test_warm_start_modes():
    from agentforge.commands.train_checks import warm_start_modes

    assert warm_start_modes(False) == [] and warm_start_modes(True) == ["expert"]
    assert warm_start_modes("rft") == ["rft"] and warm_start_modes(["expert", "rft"]) == ["expert", "rft"]
    with pytest.raises(AgentforgeError, match="unknown mode"):
        warm_start_modes(["expert", "rtf"])


def test_efficiency_metrics_by_hand():
    def turn(n_tokens: int, think: int, forced: int) -> Turn:
        return Turn(prompt_ids=[1], response_ids=[2] * n_tokens, logprobs=[0.0] * n_tokens,
                    forced_mask=[True] * forced + [False] * (n_tokens - forced), response_text="", action="up",
                    valid=True, reward=0.0, env_reward=0.0, anchor="a", observation="o",
                    info={"think_tokens": think})

    won = Trajectory(task=Task("sokoban", 0), rollout_index=0, turns=[turn(10, 4, 0), turn(6, 2, 3)], won=True)
    lost = Trajectory(task=Task("sokoban", 1), rollout_index=1, turns=[turn(20, 20, 0)])
    stats = RolloutStats(turns=3, regenerated_turns=2)
    summary = rollout_summary([Group(task=won.task, trajectories=[won, lost])], stats)
    assert summary["tokens_per_success"] == 16
    assert summary["mean_success_length"] == 2
    assert summary["think_tokens_per_turn"] == pytest.approx(26 / 3)
    assert summary["forced_turn_rate"] == pytest.approx(1 / 3)
    assert summary["regeneration_rate"] == pytest.approx(2 / 3)
    # no success: the means over successes are undefined, so they are left out (tables show "–"), not 0
    nothing = rollout_summary([Group(task=lost.task, trajectories=[lost])], stats)
    assert "tokens_per_success" not in nothing and "mean_success_length" not in nothing
    # evolved samples (TrajEvolve) are trained but not counted as played episodes
    evolved = Trajectory(task=won.task, rollout_index=2, turns=[turn(4, 1, 0)], won=True, meta={"evolved": "prune"})
    with_evolved = rollout_summary([Group(task=won.task, trajectories=[won, lost, evolved])], stats)
    assert with_evolved["episodes"] == 2 and with_evolved["success_rate"] == 0.5
