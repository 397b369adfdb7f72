"""TrajEvolve's hindsight credit against hand-worked groups, and its config checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from agentforge.algorithms import GiGPO, make_algorithm
from agentforge.algorithms.necessity import NECESSARY, REDUNDANT
from agentforge.algorithms.trajevolve import hindsight_credit
from agentforge.errors import ConfigError
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit


def make_group(trajectories: Sequence[tuple[bool, Sequence[tuple[float, str, str | None]]]]) -> Group:
    """One group; each trajectory is (won, [(reward, anchor, necessity label or None), ...])."""
    task = Task(env="test", seed=0)
    out = []
    for i, (won, turns) in enumerate(trajectories):
        out.append(Trajectory(task=task, rollout_index=i, won=won, turns=[
            Turn([1], [2], [-0.1], [False], "<action>a", "a", True, r, r, anchor, anchor,
                 info={} if label is None else {"necessity": label}) for r, anchor, label in turns]))
    return Group(task=task, trajectories=out)


# a won trajectory with a redundant detour (turns 2 and 3) and a lost one; no anchor repeats across them, so GiGPO's
# step part is 0 and every turn carries the episode advantage A_E = R_i - mean R: (+0.45, -0.45)
WON = (True, [(0.0, "s0", NECESSARY), (0.0, "s1", REDUNDANT), (0.0, "s2", REDUNDANT), (0.9, "s3", NECESSARY)])
LOST = (False, [(0.0, "t0", None), (0.0, "t1", None)])


@pytest.mark.parametrize(("credit", "redundant_value"), [("zero", 0.0), ("negate", -0.45), ("scale", -0.225)])
def test_redundant_steps_of_a_positive_trajectory_get_a_non_positive_advantage(credit, redundant_value):
    groups = [make_group([WON, LOST])]
    algorithm = make_algorithm({"name": "trajevolve", "redundant_credit": credit, "redundant_scale": 0.5})
    advantages = algorithm.advantages(groups)
    np.testing.assert_allclose(advantages, [0.45, redundant_value, redundant_value, 0.45, -0.45, -0.45], atol=1e-9)
    assert algorithm.last_metrics["hindsight_credited_turns"] == 2
    assert algorithm.last_metrics["redundant_turn_fraction"] == pytest.approx(2 / 6)


def test_without_labels_or_a_positive_trajectory_it_is_gigpo():
    """Unlabelled groups, and a group where every rollout wins (A_E = 0 everywhere): exactly GiGPO's advantages."""
    unlabelled = make_group([(True, [(r, a, None) for r, a, _ in WON[1]]), LOST])
    all_won = make_group([WON, WON])
    for groups in ([unlabelled], [all_won]):
        expected = GiGPO().advantages(groups)
        np.testing.assert_array_equal(make_algorithm({"name": "trajevolve", "redundant_credit": "negate"})
                                      .advantages(groups), expected)


def test_hindsight_credit_touches_only_redundant_turns_with_a_positive_episode_advantage():
    advantages = np.array([0.5, -0.2, 0.3, 0.7])
    episode = np.array([0.4, 0.4, -0.1, 0.0])
    redundant = np.array([False, True, True, True])
    np.testing.assert_allclose(hindsight_credit(advantages, episode, redundant, 1.0), [0.5, -0.2, 0.3, 0.7])
    np.testing.assert_allclose(hindsight_credit(np.array([0.5, 0.2]), np.array([0.4, 0.4]), np.array([False, True]),
                                                0.5), [0.5, -0.1])


@pytest.mark.parametrize(("scale", "expected"), [(0.0, [-0.6, 0.0]), (0.5, [-0.6, -0.15]), (1.0, [-0.6, -0.3])])
def test_hindsight_credit_never_raises_a_redundant_step_gigpo_already_pushed_down(scale, expected):
    """A redundant wall bump with GiGPO advantage −0.6 in a won trajectory keeps −0.6 under every mapping (replacing
    it by 0 or −s·0.6 pushed it down less than GiGPO alone); a redundant step at +0.3 becomes min(0.3, −s·0.3)."""
    credited = hindsight_credit(np.array([-0.6, 0.3]), np.array([0.4, 0.4]), np.array([True, True]), scale)
    np.testing.assert_allclose(credited, expected)


@pytest.mark.parametrize(("options", "message"), [
    ({"redundant_credit": "half"}, "redundant_credit='half' is not one of zero, negate, scale"),
    ({"redundant_scale": 1.5}, "redundant_scale=1.5"),
    ({"counterfactual": "yes"}, "counterfactual='yes' must be true or false"),
    ({"evolve": True, "evolve_strategies": ["prune", "graft"]}, "distinct strategies from"),
    ({"evolve": True, "evolve_max_per_group": 0}, "evolve_max_per_group must be an integer >= 1"),
    ({"evolve": True, "evolve_reasoning": "invent"}, "evolve_reasoning='invent' is not one of"),
    ({"evolve": True, "counterfactual": False, "evolve_strategies": ["prune"]}, "prune strategy needs the replay"),
    ({"gamma": 2.0}, "gamma=2.0"),
])
def test_bad_options_are_refused_with_the_reason(options, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        make_algorithm({"name": "trajevolve", **options})


def test_the_recipes_compose_with_trajevolve_on_their_env():
    from agentforge.schema.compose import compose_config

    for recipe, env in (("trajevolve_sokoban", "sokoban"), ("trajevolve_alfworld", "alfworld"),
                        ("trajevolve_webshop", "webshop")):
        cfg = compose_config([f"recipe={recipe}", "command=train"])
        assert (cfg.algorithm.name, cfg.env.name) == ("trajevolve", env)
        assert cfg.algorithm.evolve is True and cfg.algorithm.discriminator is False
        make_algorithm(cfg.algorithm)


# ------------------------------------------------------------------------------------------------ evolution
def _turn(text: str, ids: list[int], action: str | None, **info: object) -> Turn:
    return Turn([1], ids, [0.0] * len(ids), [False] * len(ids), text, action, action is not None, 0.0, 0.0, "s", "o",
                info=dict(info))


def test_compose_response_keeps_the_engine_reasoning_ids_and_refuses_what_it_cannot_use(tiny_tokenizer):
    """The regenerated reasoning's ids, then the original action text (and EOS when the original ended with it);
    refused: no </think>, a last token running past </think> into other text, another action, an empty reasoning."""
    from agentforge.agent.prompts import prompt_for
    from agentforge.algorithms.evolution import compose_response
    from agentforge.types import Completion

    tok, template = tiny_tokenizer, prompt_for("sokoban")
    original_text = "<think>old reason</think><action>left</action>"
    original = _turn(original_text, tok.encode(original_text, add_special_tokens=False) + [tok.eos_token_id], "left")

    def completion(text: str) -> Completion:
        return Completion(tok.encode(text, add_special_tokens=False), [0.0], text, "stop")

    fresh = completion("<think>The box is left of me, so I push it left.</think>")
    ids, text = compose_response(tok, template, fresh, original)
    assert ids[: len(fresh.token_ids)] == fresh.token_ids and ids[-1] == tok.eos_token_id
    assert text == fresh.text + "<action>left</action>"
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert compose_response(tok, template, completion("<think>no end"), original) is None
    assert compose_response(tok, template, completion("<think></think>"), original) is None
    # a last token running past </think> (SmolLM2 merges `><`): the engine's text stops at the stop string, its ids
    # do not; kept when the extra characters start the action text, refused otherwise
    merged = tok.encode("<think>ok</think><", add_special_tokens=False)
    assert tok.decode(merged[-1:]) == "><"
    ids, text = compose_response(tok, template, Completion(merged, [0.0], "<think>ok</think>", "stop"), original)
    assert text == "<think>ok</think><action>left</action>" and ids[: len(merged)] == merged
    assert tok.decode(ids, skip_special_tokens=True) == text
    stray = tok.encode("<think>ok</think>x", add_special_tokens=False)
    assert compose_response(tok, template, Completion(stray, [0.0], "<think>ok</think>", "stop"), original) is None
    sneaky = completion("<think>go</think><action>right</action><think>x</think>")
    assert compose_response(tok, template, sneaky, original) is None
    no_think = _turn("<action>left</action>", [5, 6], "left")
    assert compose_response(tok, template, fresh, no_think) is None


def test_branch_points():
    """A win branches at its first redundant step; another episode at its first step not carried out (invalid or a
    no-op) or called redundant; the prefix is what the env carried out before it."""
    from agentforge.algorithms.evolution import branch_point, branch_prefix

    win = Trajectory(Task("sokoban", 1), 0, [
        _turn("", [1], "up", executed=True, necessity=NECESSARY),
        _turn("", [1], None, executed=False, necessity=REDUNDANT),
        _turn("", [1], "left", executed=True, necessity=REDUNDANT)], won=True)
    assert branch_point(win) == 1 and branch_prefix(win, 1) == ["up"]
    loss = Trajectory(Task("sokoban", 1), 1, [
        _turn("", [1], "up", executed=True), _turn("", [1], "down", executed=True),
        _turn("", [1], "left", executed=True, executable=False)], meta={"prefix": ["right"]})
    assert branch_point(loss) == 2 and branch_prefix(loss, 2) == ["right", "up", "down"]
    clean = Trajectory(Task("sokoban", 1), 2, [_turn("", [1], "up", executed=True)])
    assert branch_point(clean) is None
