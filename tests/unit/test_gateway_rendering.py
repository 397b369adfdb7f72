"""The gateway's prompt building and tool-call parsing with the real SmolLM2 tokenizer (ChatML, no tool support in
its template): token-exact extension of a session, re-encoding detected, Hermes tool calls read and rendered back."""

from __future__ import annotations

import json

import pytest

from agentforge.gateway.errors import RequestError
from agentforge.gateway.rendering import ChatRenderer, normalise_messages
from agentforge.gateway.sessions import CallRecord, Session, build_prompt
from agentforge.gateway.tools import check_tools, parse_reply
from agentforge.rollout.workflow import Episode, EpisodePlan
from agentforge.types import Completion, Observation, Task, Trajectory

pytestmark = pytest.mark.unit

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def session() -> Session:
    task = Task("agent", 0)
    episode = Episode(0, EpisodePlan(task, 0, 0), Trajectory(task, 0), Observation("", ""))
    return Session("s", episode, max_calls=8)


def record(renderer, s: Session, messages, tools, response_text: str, stop: bool = True):
    """A call as the gateway records it, with a response 'sampled' as ids that no text re-encoding would give:
    each character encoded on its own."""
    normalised = normalise_messages(messages)
    prompt = build_prompt(renderer, s, normalised, tools)
    ids = [i for c in response_text for i in renderer.encode(c)]
    if stop:
        ids.append(renderer.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    completion = Completion(token_ids=ids, logprobs=[-1.0] * len(ids), text=response_text,
                            finish_reason="stop" if stop else "length")
    parsed = parse_reply(response_text, tools, "call")
    from agentforge.gateway.rendering import normalise_call

    reply = {"role": "assistant", "content": parsed.content,
             "tool_calls": [normalise_call(c, "r") for c in parsed.tool_calls]}
    s.calls.append(CallRecord(normalised, tools, prompt, completion, reply, "stop"))
    return prompt, completion, parsed


def test_a_later_call_is_the_earlier_prompt_plus_the_sampled_ids_plus_only_the_new_text(renderer):
    s = session()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    first, completion, _ = record(renderer, s, messages, [], "hello")
    assert first.ids == renderer.encode(renderer.render(normalise_messages(messages), [], True))
    later = [*messages, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "Again"}]
    built = build_prompt(renderer, s, normalise_messages(later), [])
    assert built.base == 0 and built.reencoded is None
    head = [*first.ids, *completion.token_ids]
    assert built.ids[:len(head)] == head  # the sampled ids, not the re-encoded "hello"
    assert renderer.encode("hello") != completion.token_ids[:-1]  # (a re-encoding would differ here)
    # what follows is the template's text after the assistant block and the new user turn, nothing else
    rest = renderer.tokenizer.decode(built.ids[len(head):])
    assert rest == "\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
    # the whole prompt decodes to exactly what the chat template renders
    assert renderer.tokenizer.decode(built.ids) == renderer.render(normalise_messages(later), [], True)


def test_a_reply_cut_by_max_tokens_gets_the_templates_end_of_turn(renderer):
    s = session()
    messages = [{"role": "user", "content": "Hi"}]
    first, completion, _ = record(renderer, s, messages, [], "hel", stop=False)
    built = build_prompt(renderer, s, normalise_messages([*messages, {"role": "assistant", "content": "hel"},
                                                          {"role": "user", "content": "?"}]), [])
    rest = renderer.tokenizer.decode(built.ids[len(first.ids) + len(completion.token_ids):])
    assert rest.startswith("<|im_end|>\n<|im_start|>user\n?")


def test_edited_or_reordered_history_is_rendered_from_scratch_and_flagged(renderer):
    s = session()
    messages = [{"role": "user", "content": "Hi"}]
    record(renderer, s, messages, [], "hello")
    edited = normalise_messages([*messages, {"role": "assistant", "content": "HELLO"},
                                 {"role": "user", "content": "x"}])
    built = build_prompt(renderer, s, edited, [])
    assert built.base is None and "edited" in built.reencoded
    assert built.ids == renderer.encode(renderer.render(edited, [], True))
    other_tools = build_prompt(renderer, s, normalise_messages([*messages, {"role": "assistant", "content": "hello"},
                                                                {"role": "user", "content": "x"}]), TOOLS)
    assert other_tools.reencoded is not None  # the tools changed: the rendered system prompt changed


def test_tool_calls_round_trip_through_the_session(renderer):
    s = session()
    messages = [{"role": "user", "content": "Who founded Acme?"}]
    text = '<tool_call>\n{"name": "search", "arguments": {"query": "Acme"}}\n</tool_call>'
    first, completion, parsed = record(renderer, s, messages, TOOLS, text)
    assert parsed.error is None and parsed.content == ""
    call = parsed.tool_calls[0]
    assert call["function"]["name"] == "search" and json.loads(call["function"]["arguments"]) == {"query": "Acme"}
    assert "<tools>" in renderer.tokenizer.decode(first.ids)  # the Hermes tool prompt in the system message
    # the client sends the reply back as the SDK gives it: content None, arguments re-serialised, extra fields
    sent = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"id": call["id"], "type": "function", "function": {"name": "search", "arguments": '{"query":"Acme"}'}}]}
    later = [*messages, sent, {"role": "tool", "tool_call_id": call["id"], "content": "Doc 1: Acme ..."}]
    built = build_prompt(renderer, s, normalise_messages(later), TOOLS)
    assert built.base == 0 and built.reencoded is None
    assert built.ids[:len(first.ids) + len(completion.token_ids)] == [*first.ids, *completion.token_ids]
    assert "<|im_start|>tool\nDoc 1: Acme ...<|im_end|>" in built.new_text


@pytest.mark.parametrize("text,error", [
    ('<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>', "not JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
    ('<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>', "not among the request's tools"),
    ('<tool_call>{"name": "search", "arguments": [1]}</tool_call>', "not a JSON object"),
])
def test_unparseable_tool_calls_become_plain_text_with_the_reason(text, error):
    parsed = parse_reply(text, TOOLS, "c")
    assert parsed.tool_calls == [] and parsed.content == text and error in parsed.error


def test_text_without_tools_is_never_parsed():
    assert parse_reply('<tool_call>{"name": "search"}</tool_call>', [], "c").tool_calls == []


@pytest.mark.parametrize("tools,param", [
    ("search", "tools"),
    ([{"type": "function"}], "tools[0]"),
    ([{"type": "function", "function": {"name": ""}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}], "tools[0].function.parameters"),
])
def test_bad_tool_definitions_are_refused_naming_the_field(tools, param):
    with pytest.raises(RequestError) as caught:
        check_tools(tools)
    assert caught.value.param == param and caught.value.status == 400


@pytest.mark.parametrize("messages,message", [
    ([], "non-empty list"),
    ([{"role": "wizard", "content": "x"}], "needs a role"),
    ([{"role": "user", "content": [{"type": "image_url"}]}], "not a text part"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}], "must be"),
])
def test_bad_messages_are_refused(messages, message):
    with pytest.raises(RequestError, match=message):
        normalise_messages(messages)


# ----------------------------------------------------------------------------------- expert replies (warm start)

def expert_replier(renderer, expert):
    from agentforge.gateway.expert import ExpertReplier

    return ExpertReplier(expert, renderer, task_of=lambda s: s)


def test_an_expert_reply_is_the_templates_tool_format_ending_in_the_stop_token(renderer):
    from agentforge.gateway.expert import tool_call

    replier = expert_replier(renderer, lambda task, messages, tools: {"tool_calls": [tool_call("search",
                                                                                                query="Acme")]})
    messages = normalise_messages([{"role": "user", "content": "Who founded Acme?"}])
    completion = replier.reply(session(), messages, TOOLS)
    eos = renderer.tokenizer.eos_token_id
    assert completion.token_ids[-1] == eos and eos not in completion.token_ids[:-1]
    assert completion.text == '<tool_call>\n{"name": "search", "arguments": {"query": "Acme"}}\n</tool_call>'
    assert completion.token_ids[:-1] == renderer.encode(completion.text)
    parsed = parse_reply(completion.text, TOOLS, "call")  # the agent gets exactly the expert's call back
    assert parsed.error is None and json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"query": "Acme"}
    # the prompt + reply render the conversation as the template does, with the reply as the assistant turn
    prompt = renderer.render(messages, TOOLS, generation_prompt=True)
    whole = renderer.tokenizer.decode([*renderer.encode(prompt), *completion.token_ids])
    assert whole == renderer.render([*messages, {"role": "assistant", "content": completion.text}], TOOLS,
                                    generation_prompt=False).rstrip("\n")


def test_the_next_call_extends_an_expert_reply_token_exactly(renderer):
    from agentforge.gateway.expert import tool_call

    s = session()
    replier = expert_replier(renderer, lambda task, messages, tools: {"tool_calls": [tool_call("search",
                                                                                                query="Acme")]})
    messages = normalise_messages([{"role": "user", "content": "Who founded Acme?"}])
    prompt = build_prompt(renderer, s, messages, TOOLS)
    completion = replier.reply(s, messages, TOOLS)
    parsed = parse_reply(completion.text, TOOLS, "call_s_0")
    from agentforge.gateway.rendering import normalise_call

    reply = {"role": "assistant", "content": parsed.content,
             "tool_calls": [normalise_call(c, "r") for c in parsed.tool_calls]}
    s.calls.append(CallRecord(messages, TOOLS, prompt, completion, reply, "tool_calls"))
    later = normalise_messages([*messages, {"role": "assistant", "content": None, "tool_calls": parsed.tool_calls},
                                {"role": "tool", "tool_call_id": parsed.tool_calls[0]["id"], "content": "Doc 1"}])
    built = build_prompt(renderer, s, later, TOOLS)
    assert built.reencoded is None and built.base == 0
    assert built.ids[:len(prompt.ids) + len(completion.token_ids)] == [*prompt.ids, *completion.token_ids]


@pytest.mark.parametrize("reply,expected", [
    (None, {"role": "assistant", "content": ""}),
    ("Paris", {"role": "assistant", "content": "Paris"}),
    ({"tool_calls": [{"type": "function", "function": {"name": "answer", "arguments": '{"answer": "1912"}'}}]},
     {"role": "assistant", "content": "", "tool_calls": [{"id": "", "name": "answer",
                                                          "arguments": '{"answer": "1912"}'}]}),
])
def test_expert_messages_take_text_our_form_or_openais(reply, expected):
    from agentforge.gateway.expert import expert_message

    assert expert_message(reply, "env.expert") == expected


def test_an_expert_returning_something_else_is_named():
    from agentforge.errors import ConfigError
    from agentforge.gateway.expert import expert_message

    with pytest.raises(ConfigError, match="env.expert returned list"):
        expert_message(["search"], "env.expert")


@pytest.mark.parametrize("choice,must_call", [(None, None), ("auto", None), ("required", ""),
                                              ({"type": "function", "function": {"name": "search"}}, "search")])
def test_tool_choice_names_the_call_a_reply_must_make(choice, must_call):
    from agentforge.gateway.tools import read_tool_choice

    assert read_tool_choice(choice, TOOLS) == (TOOLS, must_call)
    assert read_tool_choice("none", TOOLS) == ([], None)


@pytest.mark.parametrize("choice,tools,message", [
    ("required", [], "needs `tools`"),
    ({"type": "function", "function": {"name": "delete_all"}}, TOOLS, "not among the request's tools (search)"),
    ("always", TOOLS, 'must be "none", "auto", "required"'),
])
def test_bad_tool_choice_is_refused(choice, tools, message):
    from agentforge.gateway.tools import read_tool_choice

    with pytest.raises(RequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_tool_choice(choice, tools)


def test_the_forced_opening_is_how_the_tool_call_is_written():
    from agentforge.gateway.tools import forced_call_prefix, render_tool_calls

    written = render_tool_calls([{"function": {"name": "search", "arguments": '{"query": "Acme"}'}}])
    assert written.startswith(forced_call_prefix("search")) and written.startswith(forced_call_prefix(""))
    assert parse_reply(written, TOOLS, "c").tool_calls[0]["function"]["name"] == "search"
