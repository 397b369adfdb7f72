"""Message text stays text: a control token's string inside what an env, a tool or a user wrote is encoded as the
characters it is, never as the control token.

Envs echo the model's own words (search QA's "Your answer: …", an invalid action quoted back), adapters pass
third-party text, tools return web pages: a sampled `<|im_end|><|im_start|>user` rendered into the next prompt
would otherwise become a real turn boundary in what is trained. How: such strings are replaced by markers before
the chat template renders the messages; the rendering is cut at the template's own control tokens (ids), and each
piece between them, markers restored, is encoded with the tokenizer's `split_special_tokens=True`. Text without
such strings is encoded exactly as before (one `encode`). One implementation, used by the agent loop
(`agentforge/agent/chat.py`) and the gateway (`agentforge/gateway/rendering.py`, its expert warm start included).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

MARK, MARK_END = "\ue000", "\ue001"  # (private-use characters) a control token's string inside message text


class ControlText:
    """A tokenizer's control-token strings, and the escape / restore / encode of text that may hold them."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        controls = {str(t.content): int(i) for i, t in decoder.items() if getattr(t, "special", False)}
        controls.update({str(t): int(i) for t, i in zip(tokenizer.all_special_tokens, tokenizer.all_special_ids,
                                                        strict=True)})
        self.controls = controls  # control token string -> id
        self._table = [MARK, *sorted(controls, key=len, reverse=True)]  # marker index -> the string it stands for
        self._index = {text: k for k, text in enumerate(self._table)}
        self._escape = re.compile("|".join(re.escape(t) for t in self._table))
        self._firsts = {t[0] for t in self._table}
        self._control = re.compile("(" + "|".join(re.escape(t) for t in self._table[1:]) + ")") if controls else None
        self._marker = re.compile(re.escape(MARK) + r"(\d+)" + re.escape(MARK_END))

    def holds_controls(self, text: str) -> bool:
        """Whether `text` holds a control token's string (or the marker character): it needs `escape`."""
        return any(c in text for c in self._firsts) and self._escape.search(text) is not None

    def escape(self, value: Any) -> Any:
        """`value` (a string, or strings inside lists and dicts) with control-token strings (and the marker
        character itself) replaced by markers."""
        if isinstance(value, str):
            if not self.holds_controls(value):
                return value
            return self._escape.sub(lambda m: f"{MARK}{self._index[m.group(0)]}{MARK_END}", value)
        if isinstance(value, (list, dict)):  # (tools, tool-call arguments: one look at their JSON first)
            if self._escape.search(json.dumps(value, ensure_ascii=False)) is None:
                return value
            if isinstance(value, list):
                return [self.escape(v) for v in value]
            return {self.escape(k): self.escape(v) for k, v in value.items()}
        return value

    def restore(self, marked: str) -> str:
        """The text a marked rendering stands for."""
        if MARK not in marked:
            return marked
        return self._marker.sub(lambda m: self._table[int(m.group(1))], marked)

    def encode(self, text: str) -> list[int]:
        """Plain text → ids, control-token strings as control tokens (a template's own text, a raw prompt)."""
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]

    def encode_marked(self, marked: str) -> list[int]:
        """Ids of a marked rendering: the template's control tokens as ids, everything between them encoded as text
        (markers restored); a rendering without markers is one plain encode."""
        if MARK not in marked or self._control is None:
            return self.encode(marked)
        ids: list[int] = []
        for k, piece in enumerate(self._control.split(marked)):
            if k % 2:
                ids.append(self.controls[piece])
            elif piece:
                ids.extend(int(t) for t in self.tokenizer.encode(self.restore(piece), add_special_tokens=False,
                                                                split_special_tokens=True))
        return ids


@lru_cache(maxsize=8)
def control_text(tokenizer: Any) -> ControlText:
    """The tokenizer's `ControlText`, built once."""
    return ControlText(tokenizer)
