"""What the client is given for a completion, and what is trained, kept consistent with each other.

Stop strings: the engine (vLLM's rule, `include_stop_str_in_output=True`) returns the ids up to the token that
completed the stop string and the text cut right after it. OpenAI's content omits the stop string, and the token
that completed it may hold text after it (`stop=["e"]`: the last token `er` of ` ins|er` completes it, the text is
` inse`, the client must get ` ins`). So the client's text is the engine's text before the stop string; the trained
ids are the longest prefix of the sampled ids whose decoding is a prefix of that text (the tokens after it are
dropped: sampled, but the client never saw them; their log-probs are not trained), and the rest of the client's text
beyond those ids (`carry`, here empty; `stop=["r"]` on ` ins|er` carries `e`) is recorded with the call: the next
call that extends it encodes `carry` as prompt text after the kept ids. The next prompt then decodes to exactly the
text the client was given, and every trained id is a sampled id the client saw.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentforge.engines.stops import first_stop
from agentforge.types import Completion


@dataclass
class ClientReply:
    """`completion`: what is trained and recorded (the kept ids); `text`: what the client is given; `carry`: the
    client's text beyond the kept ids' decoding; `cut`: how a stop string cut the reply (None: it did not);
    `sampled`: how many tokens the engine generated."""

    completion: Completion
    text: str
    carry: str = ""
    cut: dict[str, Any] | None = None
    sampled: int = 0


def client_reply(tokenizer: Any, completion: Completion, stops: list[str], special_ids: set[int]) -> ClientReply:
    """The reply as OpenAI returns it (the stop string omitted), and the completion cut to match it."""
    ids = completion.token_ids
    whole = ClientReply(completion, completion.text, sampled=len(ids))
    stops = [s for s in stops if s]
    if completion.finish_reason != "stop" or not stops or not ids or ids[-1] in special_ids:
        return whole
    text = completion.text
    end = first_stop(text, stops)
    if end is None:
        return whole
    # the longest stop ending there (an absent one's find() is -1: it must not match by its length alone)
    stop = max((s for s in stops if s in text and text.find(s) + len(s) == end), key=len)
    content = text[: end - len(stop)]
    keep = len(ids)
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    while keep > 0 and not content.startswith(decoded):
        keep -= 1
        decoded = tokenizer.decode(ids[:keep], skip_special_tokens=True)
    cut = replace(completion, token_ids=ids[:keep], logprobs=completion.logprobs[:keep], text=content,
                  forced_mask=completion.forced_mask[:keep],
                  entropy=completion.entropy[:keep] if completion.entropy is not None else None,
                  top_prob=completion.top_prob[:keep] if completion.top_prob is not None else None,
                  version_switches=[s for s in completion.version_switches if s[0] < keep])
    carry = content[len(decoded):]
    return ClientReply(cut, content, carry, {"stop": stop, "dropped_ids": list(ids[keep:]), "carried_text": carry},
                       sampled=len(ids))


def chat_logprobs(renderer: Any, completion: Completion) -> dict[str, Any]:
    """OpenAI's chat `logprobs`: each kept token, its log-prob and its own bytes (`ChatRenderer.token_bytes`)."""
    decode = renderer.tokenizer.decode
    return {"content": [{"token": decode([t]), "logprob": float(lp), "bytes": list(renderer.token_bytes(t)),
                         "top_logprobs": []} for t, lp in zip(completion.token_ids, completion.logprobs, strict=True)]}


def text_logprobs(renderer: Any, completion: Completion) -> dict[str, Any]:
    """The legacy completions `logprobs`: the kept tokens and their log-probs."""
    decode = renderer.tokenizer.decode
    return {"tokens": [decode([t]) for t in completion.token_ids],
            "token_logprobs": [float(x) for x in completion.logprobs], "top_logprobs": None}
