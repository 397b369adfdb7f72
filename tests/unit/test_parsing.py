import pytest

from agentforge.agent.parsing import parse_response

pytestmark = pytest.mark.unit

MOVES = ["up", "down", "left", "right"]


def test_strict_format_is_valid_and_canonical():
    parsed = parse_response("<think>box is right</think>\n<action> Right </action>", MOVES)
    assert parsed.valid and parsed.format_ok and parsed.action == "right" and parsed.think == "box is right"


def test_strict_format_with_inadmissible_action_is_invalid():
    parsed = parse_response("<think>hm</think><action>jump</action>", MOVES)
    assert parsed.format_ok and not parsed.admissible and not parsed.valid
    assert "not admissible" in parsed.error


def test_missing_think_falls_back_to_relaxed_and_is_invalid():
    parsed = parse_response("<action>left</action>", MOVES)
    assert parsed.action == "left" and parsed.admissible and not parsed.format_ok and not parsed.valid


def test_text_after_action_breaks_strict_format():
    parsed = parse_response("<think>a</think><action>up</action> and then down", MOVES)
    assert not parsed.format_ok and parsed.action == "up"


def test_free_text_relaxed_picks_last_mentioned_action():
    parsed = parse_response("I could go up but I think I should move left.", MOVES)
    assert parsed.action == "left" and not parsed.valid


def test_free_text_does_not_match_inside_words():
    parsed = parse_response("Upward thinking, downright.", MOVES)
    assert parsed.action is None and not parsed.valid
    assert "no action" in parsed.error


def test_no_admissible_list_takes_tag_content():
    parsed = parse_response("<think>x</think><action>go to  cabinet 1</action>", None)
    assert parsed.valid and parsed.action == "go to cabinet 1"


def test_custom_action_tag_without_think():
    parsed = parse_response("<answer>Paris</answer>", None, action_tag="answer", require_think=False)
    assert parsed.valid and parsed.action == "Paris"


def test_empty_action_is_invalid():
    parsed = parse_response("<think>x</think><action>  </action>", MOVES)
    assert parsed.action is None and not parsed.valid
