"""Bad model output through every parser and prompt template (issue 14, item 4): arbitrary text, unicode, huge
outputs and tag soup give a valid action or an invalid turn, never an exception, and the next prompt renders.

Properties are checked with hypothesis (profiles in tests/fuzz_text.py). The env side (stepping real envs with
what these parsers return) is tests/integration/test_fuzz_env_step.py.
"""

from __future__ import annotations

import re
import time

import pytest
from fuzz_text import ODD_TEXT, TAG_FRAGMENTS, any_text, huge_text, model_output, tag_soup, wrap
from hypothesis import assume, given
from hypothesis import strategies as st

from agentforge.agent.parsing import ParsedResponse, find_tags, parse_response, think_token_count
from agentforge.agent.prompts import HistoryEntry, prompt_for
from agentforge.agent.render import AgentConfig, render_turn_prompt
from agentforge.agent.strategy import (
    NO_STRATEGY,
    judgment_messages,
    parse_judgment,
    parse_strategy,
    strategy_messages,
    strategy_prompt_for,
)
from agentforge.envs.search_qa.env import parse_action as search_qa_action
from agentforge.envs.sokoban import ACTIONS as SOKOBAN_ACTIONS
from agentforge.envs.webshop.env import parse_action as webshop_action
from agentforge.types import Observation, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

ENVS = ("sokoban", "alfworld", "alfworld_intervention", "webshop", "scienceworld", "search_qa")
ADMISSIBLE = {
    "sokoban": list(SOKOBAN_ACTIONS),
    "alfworld": ["go to cabinet 1", "go to countertop 1", "open fridge 1", "take apple 1 from countertop 1",
                 "inventory", "look"],
    "webshop": ["click[back to search]", "click[next >]", "click[b0123456789]", "click[buy now]"],
}
admissible_lists = st.one_of(st.none(), st.sampled_from(list(ADMISSIBLE.values())),
                             st.lists(st.text(min_size=1, max_size=20), max_size=6))
action_tags = st.sampled_from(["action", "search|answer", "answer"])


def check_parsed(parsed: ParsedResponse, admissible: list[str] | None, action_tag: str) -> None:
    """What the rollout loop relies on: an action to execute only when admissible, a reason when invalid."""
    assert isinstance(parsed, ParsedResponse)
    if parsed.valid:
        assert parsed.format_ok and parsed.admissible and not parsed.error
    else:
        assert parsed.error
    if parsed.action is not None and parsed.admissible:
        if admissible is not None:
            assert parsed.action in admissible
        else:
            assert parsed.action and parsed.action == " ".join(parsed.action.split())
            if "|" in action_tag:  # `<search>q</search>` → `search[q]`, which the search QA env reads back
                kind = search_qa_action(parsed.action)
                assert kind is not None and kind[0] in action_tag.split("|")
    if parsed.action is None:
        assert not parsed.valid


# ---- parse_response ---------------------------------------------------------------------------------------------
@given(text=model_output, admissible=admissible_lists, action_tag=action_tags, require_think=st.booleans())
def test_any_output_parses_to_an_action_or_an_invalid_turn(text, admissible, action_tag, require_think):
    check_parsed(parse_response(text, admissible, action_tag, require_think), admissible, action_tag)


@given(body=st.one_of(any_text, tag_soup), env=st.sampled_from(sorted(ADMISSIBLE)))
def test_well_formed_response_around_any_body(body, env):
    admissible = ADMISSIBLE[env]
    parsed = parse_response(f"<think>{body}</think>\n<action>{body}</action>", admissible)
    check_parsed(parsed, admissible, "action")


@given(action=st.sampled_from(ADMISSIBLE["alfworld"]), think=st.one_of(any_text, tag_soup),
       junk=st.sampled_from(["", " ", "\n\n", "\u200b", "\t"]))
def test_a_clean_action_survives_any_thinking(action, think, junk):
    """Whatever the model thinks (tags included), a closed think followed by an admissible action is executed."""
    assume("</think>" not in think.lower() and "<action>" not in think.lower())
    parsed = parse_response(f"{junk}<think>{think}</think>{junk}<action>{action.upper()}</action>{junk}",
                            ADMISSIBLE["alfworld"])
    assert parsed.action == action and parsed.admissible


# The regex parser this module replaced (quadratic on unclosed tags): the reference for the linear one.
def _reference_parse(text, admissible, action_tag="action", require_think=True):
    think_re = r"<think>(?P<think>.*?)</think>\s*" if require_think else r"(?:<think>(?P<think>.*?)</think>\s*)?"
    strict_re = re.compile(rf"^\s*{think_re}<(?P<tag>{action_tag})>(?P<action>.*?)</(?P=tag)>\s*$",
                           re.DOTALL | re.IGNORECASE)

    def tag_re(tag):
        return re.compile(rf"<(?P<tag>{tag})>(?P<action>.*?)</(?P=tag)>", re.DOTALL | re.IGNORECASE)

    def tagged(tag, content):  # one deliberate change: an empty alternative tag is no action (was `search[]`)
        if "|" not in action_tag:
            return content
        return f"{tag.lower()}[{content.strip()}]" if content.strip() else ""

    def canonical(action):
        cleaned = " ".join(action.strip().split())
        if admissible is None:
            return cleaned, bool(cleaned)
        match = {" ".join(a.lower().split()): a for a in admissible}.get(cleaned.lower())
        return (match, True) if match is not None else (cleaned, False)

    strict = strict_re.match(text)
    if strict:
        action, ok = canonical(tagged(strict.group("tag"), strict.group("action")))
        return action or None, strict.group("think"), True, ok
    found = list(tag_re(action_tag).finditer(text))
    think = tag_re("think").search(text)
    if found:
        action, ok = canonical(tagged(found[-1].group("tag"), found[-1].group("action")))
        return action or None, think.group("action") if think else None, False, ok
    return None  # free-text fallback: unchanged code, not compared


ascii_soup = st.lists(st.sampled_from([f for f in TAG_FRAGMENTS if f.isascii()]
                                      + ["up", " ", "\n", "x", "left", "go to cabinet 1"]), max_size=25).map("".join)


@given(text=ascii_soup, admissible=st.sampled_from([None, ADMISSIBLE["sokoban"], ADMISSIBLE["alfworld"]]),
       action_tag=st.sampled_from(["action", "search|answer"]), require_think=st.booleans())
def test_linear_parser_agrees_with_the_regex_it_replaced(text, admissible, action_tag, require_think):
    expected = _reference_parse(text, admissible, action_tag, require_think)
    if expected is None:
        return
    parsed = parse_response(text, admissible, action_tag, require_think)
    assert (parsed.action, parsed.think, parsed.format_ok, parsed.admissible) == expected


@given(text=ascii_soup, tags=st.sampled_from(["think", "action", "search|answer"]))
def test_find_tags_agrees_with_regex_finditer(text, tags):
    pattern = re.compile(rf"<(?P<tag>{tags})>(?P<body>.*?)</(?P=tag)>", re.DOTALL | re.IGNORECASE)
    expected = [(m.group("tag").lower(), m.group("body"), m.start(), m.end()) for m in pattern.finditer(text)]
    assert [(s.name, s.body, s.start, s.end) for s in find_tags(text, tags)] == expected


@pytest.mark.parametrize("piece", ["<action>", "<think>", "<search>", "<think>a</think><action>up</action>x",
                                   "<think>a</think> <action>up</action>", "<strategy>", "<flagged>", " "])
def test_huge_unclosed_output_parses_in_linear_time(piece):
    """Bug fixed: the regex parser scanned to the end once per unclosed tag, ~5 s per 100k-character response."""
    text = piece * (120_000 // len(piece))
    started = time.perf_counter()
    for action_tag in ("action", "search|answer"):
        parse_response(text, ADMISSIBLE["sokoban"] if action_tag == "action" else None, action_tag)
    parse_strategy(text)
    parse_judgment(text, 5)
    assert time.perf_counter() - started < 1.0  # linear: ~0.05 s here; the old parser took 10-20 s


@given(text=huge_text())
def test_huge_output_of_any_shape_parses(text):
    check_parsed(parse_response(text, ADMISSIBLE["sokoban"]), ADMISSIBLE["sokoban"], "action")
    check_parsed(parse_response(text, None, "search|answer"), None, "search|answer")


def test_empty_alternative_tag_is_no_action():
    """Bug fixed: `<search> </search>` gave the well formed, valid action `search[]`, which the env refuses."""
    parsed = parse_response("<think>t</think><search>  </search>", None, "search|answer")
    assert parsed.action is None and not parsed.valid


def test_casefold_tag_names_come_back_canonical():
    """`<ſearch>` matches `search` case-insensitively; the action must still say `search[...]` for the env."""
    parsed = parse_response("<think>t</think><ſearch>capital</ſearch>", None, "search|answer")
    assert parsed.action == "search[capital]" and parsed.valid
    assert search_qa_action("ſearch[x]") == ("search", "x")
    assert webshop_action("ſearch[Red Shoes]") == ("search", "red shoes")
    assert webshop_action("clic\u212a[buy now]") == ("click", "buy now")


# ---- think tokens -----------------------------------------------------------------------------------------------
@given(text=st.one_of(tag_soup, any_text))
def test_think_token_count_is_within_the_response(tiny_tokenizer, text):
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    count = think_token_count(tiny_tokenizer, ids, text)
    assert 0 <= count <= len(ids)
    if "<think>" not in text.lower() and "</think>" not in text.lower():  # a lone `</think>` closes a prompt's think
        assert count == 0


# ---- StraTA: strategy and judgment ----------------------------------------------------------------------------------
@given(text=model_output)
def test_any_strategy_answer_gives_text_to_show(text):
    parsed = parse_strategy(text)
    assert parsed.text and parsed.text == " ".join(parsed.text.split())
    assert not parsed.format_ok or (parsed.text != NO_STRATEGY and "<strategy>" in text.lower())


@given(text=st.one_of(model_output, wrap(tag_soup, "flagged"), wrap(any_text, "flagged")),
       num_steps=st.integers(0, 60))
def test_any_judgment_flags_steps_of_the_episode_or_nothing(text, num_steps):
    parsed = parse_judgment(text, num_steps)
    if parsed.flagged is not None:
        assert list(parsed.flagged) == sorted(set(parsed.flagged))
        assert all(1 <= n <= num_steps for n in parsed.flagged)
    assert parsed.out_of_range >= 0


@pytest.mark.parametrize("body", ["²", "1, ²", "1 ²", "9" * 5000, "step " + "1" * 4400, "٣, 1"])
def test_judgment_with_odd_digits_does_not_raise(body):
    """Bugs fixed: `'²'.isdigit()` is True but int('²') raises; int() refuses numbers over 4300 digits."""
    parsed = parse_judgment(f"<flagged>{body}</flagged>", 5)
    assert parsed.flagged is None or all(1 <= n <= 5 for n in parsed.flagged)


# ---- prompt templates ---------------------------------------------------------------------------------------------
observations = st.builds(Observation, text=st.one_of(any_text, tag_soup), anchor=st.just("a"),
                         admissible=st.one_of(st.none(), st.lists(any_text, max_size=5)))
histories = st.lists(st.builds(HistoryEntry, observation=st.one_of(any_text, tag_soup),
                               action=st.one_of(any_text, tag_soup)), max_size=4)


@given(env=st.sampled_from(ENVS), observation=observations, history=histories, step=st.integers(1, 50),
       few_shot=st.booleans(), notes=st.lists(st.one_of(any_text, tag_soup), max_size=2))
def test_every_template_renders_any_observation_and_history(env, observation, history, step, few_shot, notes):
    template = prompt_for(env)
    intro = history[0].observation if history else observation.text
    messages = template.messages(observation, history, step, few_shot, intro, notes)
    assert messages[0]["role"] == "system" and messages[-1]["role"] == "user"
    assert all(isinstance(m["content"], str) for m in messages)
    user = messages[-1]["content"]
    prepared = template.prepare(observation, history, intro)
    assert prepared.observation.text in user
    assert all(h.action in user for h in history)


@given(env=st.sampled_from(ENVS), observation=observations)
def test_strategy_prompt_renders_any_observation(env, observation):
    messages = strategy_messages(prompt_for(env), strategy_prompt_for(env), observation)
    assert messages[-1]["content"]


def _turn(response: str, action: str | None, observation: str) -> Turn:
    return Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], forced_mask=[False], response_text=response,
                action=action, valid=action is not None, reward=0.0, env_reward=0.0, anchor="a",
                observation=observation)


@given(turns=st.lists(st.tuples(model_output, st.one_of(st.none(), any_text), any_text), max_size=5),
       strategy=model_output, observation_chars=st.one_of(st.none(), st.integers(0, 500)))
def test_judgment_prompt_renders_any_episode(turns, strategy, observation_chars):
    trajectory = Trajectory(task=Task("sokoban", 0), rollout_index=0, turns=[_turn(*t) for t in turns])
    messages = judgment_messages(trajectory, parse_strategy(strategy).text, observation_chars)
    assert messages[-1]["content"]


# ---- the next prompt's token ids ----------------------------------------------------------------------------------
@given(env=st.sampled_from(ENVS), action=st.one_of(any_text, tag_soup, huge_text(20_000)),
       text=st.one_of(any_text, tag_soup))
def test_a_huge_action_in_the_history_is_dropped_not_fatal(tiny_tokenizer, env, action, text):
    """The window drops the oldest entries until the prompt fits: a 20k-character action from the model must not
    stop the run (only an observation too long on its own is a ConfigError)."""
    config = AgentConfig(history_length=2, max_prompt_tokens=2048)
    observation = Observation(text, anchor="a", admissible=ADMISSIBLE.get(env))
    history = [HistoryEntry("an earlier observation", action), HistoryEntry(text, action)]
    ids = render_turn_prompt(prompt_for(env), tiny_tokenizer, config, observation, history, 3, Task(env, 0))
    assert 0 < len(ids) <= config.max_prompt_tokens


@pytest.mark.parametrize("odd", ODD_TEXT)
def test_odd_characters_tokenize_into_a_prompt(tiny_tokenizer, odd):
    config = AgentConfig()
    observation = Observation(f"obs {odd} obs", anchor="a", admissible=[f"go {odd}", "up"])
    history = [HistoryEntry(odd, odd)]
    ids = render_turn_prompt(prompt_for("sokoban"), tiny_tokenizer, config, observation, history, 2,
                             Task("sokoban", 0))
    assert odd.strip() == "" or odd in tiny_tokenizer.decode(ids)
