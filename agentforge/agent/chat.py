"""Turn chat messages into prompt token ids once per turn: the ids the engine sees and the learner trains on.

Conversation history (`agent.history=conversation`) extends a prompt instead of rendering it again:
`continuation_ids` gives the ids that follow a sampled response (the rest of its assistant block, then a user
message and the generation prompt), rendered from the tokenizer's own chat template. Only those template pieces and
the new user text are encoded; the earlier prompt and the sampled ids are kept as they are.

Message text is encoded as text (`agentforge.models.control_text`): an observation that holds a control token's
string (an env echoing the model's `<|im_end|><|im_start|>user`) cannot forge a turn boundary in the prompt.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from agentforge.errors import ConfigError
from agentforge.models.control_text import control_text

SENTINEL = "\u2063agentforge-turn\u2063"  # stands for a response's content while the template's pieces are found


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Apply the tokenizer's chat template with the generation prompt and return plain token ids; control-token
    strings inside the messages stay text."""
    text = control_text(tokenizer)
    if any(text.holds_controls(str(m.get("content") or "")) for m in messages):
        escaped = [{**m, "content": text.escape(str(m.get("content") or ""))} for m in messages]
        return text.encode_marked(tokenizer.apply_chat_template(escaped, tokenize=False, add_generation_prompt=True))
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if hasattr(out, "keys"):  # some tokenizers still return a BatchEncoding
        out = out["input_ids"]
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(t) for t in out]


@lru_cache(maxsize=8)
def _template_pieces(tokenizer: Any) -> tuple[str, str, str]:
    """(assistant tail, user head, user tail + generation prompt) as the chat template writes them, e.g. ChatML's
    (`<|im_end|>\\n`, `<|im_start|>user\\n`, `<|im_end|>\\n<|im_start|>assistant\\n`). Found by rendering a
    conversation whose assistant and user contents are sentinels; refused when the template does not render a
    conversation as a prefix extension (it rewrites earlier turns), since a conversation could not grow by
    appending ids then."""
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    head = tokenizer.apply_chat_template([*base, {"role": "assistant", "content": SENTINEL}], tokenize=False,
                                         add_generation_prompt=False)
    full = tokenizer.apply_chat_template([*base, {"role": "assistant", "content": SENTINEL},
                                          {"role": "user", "content": SENTINEL}], tokenize=False,
                                         add_generation_prompt=True)
    if not full.startswith(head) or head.count(SENTINEL) != 1 or full.count(SENTINEL) != 2:
        raise ConfigError("agent.history=conversation needs a chat template that renders a conversation as an "
                          "extension of its earlier turns (this model's template rewrites them); use "
                          "agent.history=window")
    assistant_tail = head[head.index(SENTINEL) + len(SENTINEL):]
    new = full[len(head):]
    user_head, user_tail = new.split(SENTINEL)
    return assistant_tail, user_head, user_tail


def continuation_ids(tokenizer: Any, response_ids: list[int], user_text: str) -> list[int]:
    """The ids that follow `response_ids` in a conversation: the rest of the assistant block (ChatML: `<|im_end|>`
    unless the response already stopped on it, then `\\n`), a user message holding `user_text`, and the generation
    prompt. A response cut by max_new_tokens gets the whole block end."""
    assistant_tail, user_head, user_tail = _template_pieces(tokenizer)
    if response_ids:
        ending = tokenizer.decode([response_ids[-1]], skip_special_tokens=False)
        if ending and int(response_ids[-1]) in set(tokenizer.all_special_ids) and assistant_tail.startswith(ending):
            assistant_tail = assistant_tail[len(ending):]  # the sampled stop token already closes the block
    text = control_text(tokenizer)
    return text.encode_marked(assistant_tail + user_head + text.escape(user_text) + user_tail)
