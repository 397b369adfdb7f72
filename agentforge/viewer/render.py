"""The page: a run's sections, groups, trajectories and turns rendered into one self-contained HTML file.

Everything the page needs is inside it (CSS, JS, drawings as inline SVG), so it opens from disk, from a CI artifact
or an e-mail attachment, with no server and no network. The HTML is built here in Python (drawings included, so they
are testable without a browser); the page's script only filters and expands what is already there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from agentforge.viewer import drawings
from agentforge.viewer.descriptors import descriptor_html
from agentforge.viewer.load import GroupView, RunView, Section
from agentforge.viewer.response import forced_char_ranges, forced_token_count, marked, split_response

HIDDEN_INFO = frozenset({"visited_locations"})  # long and repeated every turn; the route graph shows it


@dataclass
class TurnCard:
    number: int
    turn: dict[str, Any]
    drawing: Markup | None
    reasoning: Markup | None
    response: Markup
    forced_tokens: int
    advantage: float | None
    strata_reward: float | None
    info: str
    discarded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def action(self) -> str | None:
        return self.turn.get("action")

    @property
    def executed(self) -> bool:
        return bool((self.turn.get("info") or {}).get("executed"))


@dataclass
class SpanCard:
    kind: str
    role: str
    text: Markup
    advantage: float | None
    info: dict[str, Any]
    turn_index: int | None


@dataclass
class TrajectoryCard:
    uid: str
    record: dict[str, Any]
    turns: list[TurnCard]
    spans: list[SpanCard]
    drawing: tuple[str, Markup] | None
    descriptors: list[tuple[str, Markup]]
    drawing_first: bool = False  # a route is read before the turns; a final position after them

    @property
    def won(self) -> bool:
        return bool(self.record.get("won"))

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.record.get("meta") or {})

    @property
    def forced_tokens(self) -> int:
        return sum(t.forced_tokens for t in self.turns)


@dataclass
class GroupCard:
    group: GroupView
    trajectories: list[TrajectoryCard]
    strategies: list[dict[str, Any]]


@dataclass
class SectionCard:
    section: Section
    groups: list[GroupCard]
    metrics: dict[str, Any]


# ---- cards ---------------------------------------------------------------------------------------------------------
def turn_card(env: str | None, record: dict[str, Any], number: int, turn: dict[str, Any]) -> TurnCard:
    text = str(turn.get("response_text", ""))
    forced = forced_char_ranges(turn)
    parts = split_response(text)
    reasoning = marked(text, forced, *parts.reasoning) if parts.reasoning else None
    info = {k: v for k, v in (turn.get("info") or {}).items() if k not in HIDDEN_INFO}
    strata = (record.get("meta") or {}).get("strata_rewards")
    return TurnCard(
        number=number, turn=turn, drawing=drawings.turn_drawing(env, turn), reasoning=reasoning,
        response=marked(text, forced), forced_tokens=forced_token_count(turn), advantage=turn.get("advantage"),
        strata_reward=strata[number - 1] if isinstance(strata, list) and len(strata) >= number else None,
        info=json.dumps(info, indent=1, sort_keys=True, default=str))


def span_card(span: dict[str, Any]) -> SpanCard:
    text = str(span.get("text", ""))
    return SpanCard(kind=str(span.get("kind", "span")), role=str(span.get("role", "")),
                    text=marked(text, forced_char_ranges(span)), advantage=span.get("advantage"),
                    info=dict(span.get("info") or {}), turn_index=span.get("turn_index"))


def trajectory_card(env: str | None, record: dict[str, Any], uid: str) -> TrajectoryCard:
    turns = [turn_card(env, record, n, t) for n, t in enumerate(record.get("turns") or [], start=1)]
    spans = [span_card(s) for s in record.get("spans") or []]
    for span in spans:  # a discarded attempt at a turn is shown under that turn
        if span.kind == "discarded_turn" and span.turn_index is not None and span.turn_index < len(turns):
            turns[span.turn_index].discarded.append({"text": span.text, "info": span.info})
    room = drawings.room_rows(env, record)
    descriptors = [(name, descriptor_html(name, vector, room))
                   for name, vector in ((record.get("meta") or {}).get("descriptor") or {}).items()
                   if isinstance(vector, list)]
    return TrajectoryCard(uid, record, turns, [s for s in spans if s.kind != "discarded_turn"],
                          drawings.trajectory_drawing(env, record, uid), descriptors,
                          drawing_first=drawings.drawing_for_env(env).drawing_first)


def group_strategies(group: GroupView) -> list[dict[str, Any]]:
    """StraTA: each strategy of the group once, with its reward and how its rollouts did."""
    by_index: dict[int, dict[str, Any]] = {}
    for record in group.trajectories:
        meta = record.get("meta") or {}
        if "strategy_index" not in meta:
            continue
        index = int(meta["strategy_index"])
        entry = by_index.setdefault(index, {"index": index, "text": meta.get("strategy", ""),
                                            "reward": meta.get("strategy_reward"),
                                            "format_ok": meta.get("strategy_format_ok"), "rollouts": 0, "won": 0})
        entry["rollouts"] += 1
        entry["won"] += bool(record.get("won"))
    return [by_index[i] for i in sorted(by_index)]


def section_metrics(view: RunView, section: Section) -> dict[str, Any]:
    """What the run logged for this section's iteration (train and eval success, loss), for the overview."""
    if section.iteration is None:
        return {}
    row = next((r for r in view.metrics if r.get("iteration") == section.iteration), {})
    return {key: row[key] for key in ("train/success_rate", "train/mean_return", "eval/success_rate", "train/loss")
            if isinstance(row.get(key), int | float)}


def cards(view: RunView) -> list[SectionCard]:
    out = []
    for s, section in enumerate(view.sections):
        groups = []
        for group in section.groups:
            trajectories = [trajectory_card(view.env or group.task.get("env"), record, f"s{s}g{group.index}t{t}")
                            for t, record in enumerate(group.trajectories)]
            groups.append(GroupCard(group, trajectories, group_strategies(group)))
        out.append(SectionCard(section, groups, section_metrics(view, section)))
    return out


# ---- page ----------------------------------------------------------------------------------------------------------
def algorithm_line(view: RunView) -> str:
    """`tjpo · descriptor direction_transition · pairwise · λ 0.3`: the options that change what the page shows."""
    algorithm = view.algorithm
    name = str(algorithm.get("name", "")) or "?"
    details = []
    if name == "tjpo":
        details = [f"descriptor {algorithm.get('descriptor')}", str(algorithm.get("functional")),
                   f"λ {algorithm.get('lambda')}"]
    elif name == "strata":
        details = [f"variant {algorithm.get('variant')}",
                   f"{algorithm.get('num_strategies')} strategies × {algorithm.get('rollouts_per_strategy')} rollouts"]
    return " · ".join([name, *details]) if algorithm else ""


def _asset(name: str) -> str:
    return resources.files("agentforge.viewer").joinpath("assets", name).read_text(encoding="utf-8")


def environment() -> Environment:
    env = Environment(loader=PackageLoader("agentforge.viewer", "templates"), autoescape=select_autoescape(["j2"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["signed"] = signed
    env.filters["tone"] = tone
    return env


def _value(v: Any) -> float | None:
    """A number to show, or None for a missing one (absent, null, not a number): shown as –, never an error."""
    return float(v) + 0.0 if isinstance(v, int | float) and not isinstance(v, bool) else None  # + 0.0: no "-0.00"


def signed(v: Any, digits: int = 2) -> str:
    number = _value(v)
    return "–" if number is None else f"{number:+.{digits}f}"


def tone(v: Any) -> str:
    """The CSS class of a reward or advantage: its sign, so gains and losses read at a glance."""
    number = _value(v)
    if number is None:
        return ""
    return "pos" if number > 1e-9 else "neg" if number < -1e-9 else "zero"


def render_page(view: RunView) -> str:
    """The whole page as one string."""
    template = environment().get_template("page.html.j2")
    name = view.path.name if view.path.name not in ("", ".") else str(view.path)
    return template.render(
        view=view, sections=cards(view), title=f"agentforge trajectories · {name}",
        algorithm=algorithm_line(view), legend=drawings.legend(view.env),
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),  # noqa: UP017  (py3.10)
        css=Markup(_asset("viewer.css")), script=Markup(_asset("viewer.js")),
    )
