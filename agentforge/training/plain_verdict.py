"""Three lines a newcomer reads at the end of a run: what the model as shipped did, what the warm start did, what RL
added, on the claim split, each change with its paired verdict (the same exact test and interval as the tables)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentforge.stats import PairedDifference, paired_difference

Outcomes = Mapping[str, Sequence[bool]]


def _change(before: Outcomes, after: Outcomes) -> PairedDifference | None:
    try:
        return paired_difference(before, after)
    except ValueError:
        return None


def _rate(outcomes: Outcomes) -> float:
    """Mean success over tasks (each task's episodes averaged)."""
    return sum(sum(map(bool, v)) / max(len(v), 1) for v in outcomes.values()) / max(len(outcomes), 1)


def _said(d: PairedDifference, against: str) -> str:
    noise = "beyond noise" if d.beyond_noise else "within noise"
    return f"{d.difference * 100:+.1f} points vs {against} [{d.low * 100:+.1f}, {d.high * 100:+.1f}], {noise} " \
           f"(p = {d.p_value:.2g})"


def plain_verdict(split: str, outcomes: Mapping[str, Outcomes], floor: Outcomes | None, method: str,
                  warm_start: bool) -> list[str]:
    """The lines, from the evals keyed "base" (the model as given), "0" (after the warm start) and the last
    iteration; [] when the run has no before and after to tell."""
    iterations = sorted((k for k in outcomes if k != "base"), key=int)
    if not iterations or ("base" not in outcomes and len(iterations) < 2):
        return []
    first = outcomes.get("base", outcomes[iterations[0]])
    tasks = len(first)
    unit = f"{tasks} {split} tasks no training stream produced"
    lines = []
    rate = _rate(first)
    floor_rate = _rate(floor) if floor else None
    start = "the model as shipped" if "base" in outcomes else f"the policy at iteration {iterations[0]}"
    lines.append(f"{start[0].upper()}{start[1:]} solved {rate:.1%} of {unit}"
                 + (f" (a random policy: {floor_rate:.1%})" if floor_rate is not None else ""))
    rl_from = iterations[0]
    if warm_start and "base" in outcomes and iterations[0] == "0":
        d = _change(outcomes["base"], outcomes["0"])
        if d is not None:
            said = _said(d, "the model as shipped")
            lines.append(f"The warm start (SFT on expert play) took it to {d.after:.1%}: {said}")
    else:
        if "base" in outcomes:
            lines.append("No warm start")
        rl_from = "base" if "base" in outcomes else iterations[0]
    last = iterations[-1]
    d = _change(outcomes[rl_from], outcomes[last])
    if d is None or last == rl_from:
        return lines
    tail = f"RL ({last} {method} iterations) took it to {d.after:.1%}: " \
           f"{_said(d, 'the warm start' if rl_from == '0' and warm_start else 'its start')}"
    beat_floor = _change(floor, outcomes[last]) if floor else None
    if beat_floor is not None:
        tail += f"; {_said(beat_floor, 'the random policy')}"
    lines.append(tail)
    return lines
