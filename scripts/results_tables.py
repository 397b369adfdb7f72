"""Every results table of README.md and docs/, rebuilt from the committed per-task outcomes in docs/results/.

    python scripts/results_tables.py            # print every table
    python scripts/results_tables.py --write    # replace each table's block in README.md and docs/*.md
    python scripts/results_tables.py --check    # exit 1 where a block differs (tests/unit/test_results_tables.py)

A table lives in a doc between `<!-- results:NAME -->` and `<!-- /results:NAME -->`; its numbers come only from
here. Statistics (agentforge/stats.py): within one run, the paired comparison of two evals of the same test tasks
(exact McNemar for the verdict, Tango's score interval for the difference); between training runs (a setting against
the recipe, one method against another, and "does RL beat its warm start over training seeds"), the seed is the unit:
run i against run i, an interval that includes run-to-run variance, no verdict under 3 seeds.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from agentforge.evaluation.results import RESULTS_DIR, Result, load_results
from agentforge.stats import PairedDifference, SeedDifference, paired_difference, seed_difference, wilson_interval

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def rate_cell(result: Result, key: str, split: str = "test") -> str:
    outcomes = result.outcomes(key, split)
    flat = [won for values in outcomes.values() for won in values]
    low, high = wilson_interval(sum(flat), len(flat))
    return f"{pct(sum(flat) / len(flat))} [{100 * low:.0f}, {100 * high:.0f}]"


def floor_cell(result: Result, split: str = "test") -> str:
    floor = result.floor(split)
    if not floor:
        return "-"
    flat = [won for values in floor.values() for won in values]
    return pct(sum(flat) / len(flat))


def verdict_cell(found: PairedDifference | SeedDifference) -> str:
    """`+11.7 [+7.7, +15.6], beyond noise (p = 2e-07)`; the direction words as the stats module decides them."""
    words = {"better beyond noise": "**beyond noise**", "worse beyond noise": "**worse, beyond noise**"}
    direction = words.get(found.direction, found.direction)
    return (f"{100 * found.difference:+.1f} [{100 * found.low:+.1f}, {100 * found.high:+.1f}], {direction} "
            f"(p = {found.p_value:.2g})")


def last_key(result: Result, split: str = "test") -> str:
    return max((k for k in result.evals(split) if k.isdigit()), key=int)


def runs(results: dict[str, Result], prefix: str) -> list[Result]:
    """The runs of one group, in seed order (`<prefix>_s0`, `_s1`, ...)."""
    found = [r for name, r in results.items() if name.startswith(prefix + "_s")]
    return sorted(found, key=lambda r: int(r.record["seed"]))


def seeds_label(group: list[Result]) -> str:
    return ", ".join(str(r.record["seed"]) for r in group)


def tasks_of(result: Result, split: str = "test") -> int:
    return len(result.record["splits"][split]["tasks"])


def minutes(result: Result, key: str) -> str:
    value = result.record["training_minutes"].get(key)
    return "-" if value is None else f"{value:.1f}"


# ---------------------------------------------------------------------------------------------------------- tables
def run_table(group: list[Result], labels: list[str]) -> list[str]:
    """One row per eval (shipped, warm start, end, floor), one column per run; then per-run paired verdicts."""
    end = last_key(group[0])
    head = "| " + f"{tasks_of(group[0])} test tasks | " + " | ".join(labels) + " |"
    lines = [head, "| --- |" + " --- |" * len(group)]
    rows = [("model as shipped", "base"), ("after the warm start (iteration 0)", "0"), (f"iteration {end}", end)]
    for label, key in rows:
        if all(key in r.evals() for r in group):
            lines.append(f"| {label} | " + " | ".join(rate_cell(r, key) for r in group) + " |")
    lines.append("| random floor (same tasks) | " + " | ".join(floor_cell(r) for r in group) + " |")
    comparisons = (("warm start", "0", end), ("shipped", "base", end), ("random floor", "floor", end),
                   ("shipped", "base", "0"))
    for label, key, after in comparisons:
        cells = []
        for r in group:
            before = r.floor() if key == "floor" else (r.outcomes(key) if key in r.evals() else None)
            cells.append(verdict_cell(paired_difference(before, r.outcomes(after))) if before else "-")
        shown = "warm start" if after == "0" else after
        lines.append(f"| paired: {label} → {shown} | " + " | ".join(cells) + " |")
    lines.append("| wall time, whole run (training minutes) | " + " | ".join(
        f"{r.record['wall_seconds'] / 60:.1f} min ({minutes(r, end)})" for r in group) + " |")
    return lines


def over_seeds_table(methods: dict[str, list[Result]]) -> list[str]:
    """Each method's gain over its warm start (and the floor) at the end, over training seeds."""
    lines = ["| method (training seeds) | warm start → end, per seed | over training seeds: warm start → end | "
             "shipped → end | random floor → end |", "| --- | --- | --- | --- | --- |"]
    for name, group in methods.items():
        end = last_key(group[0])
        per_seed = " / ".join(f"{pct(r.rate('0'))} → {pct(r.rate(end))}" for r in group)
        cells = [verdict_cell(over_seeds(group, key, end)) if all(over_seeds_possible(r, key) for r in group) else "-"
                 for key in ("0", "base", "floor")]
        lines.append(f"| {name} ({seeds_label(group)}) | {per_seed} | {' | '.join(cells)} |")
    return lines


def over_seeds_possible(result: Result, key: str) -> bool:
    return bool(result.floor()) if key == "floor" else key in result.evals()


def over_seeds(group: list[Result], key: str, end: str) -> SeedDifference:
    """From eval `key` (or the random floor) to `end`, over the group's training seeds."""
    before = [r.floor() if key == "floor" else r.outcomes(key) for r in group]
    return seed_difference(before, [r.outcomes(end) for r in group])


def versus_table(methods: dict[str, list[Result]], baseline: str) -> list[str]:
    """Each method against the baseline at the end, run i with run i (the same seed), over training seeds."""
    lines = [f"| against {baseline} (training seeds) | end of run, per seed | difference over training seeds |",
             "| --- | --- | --- |"]
    for name, group in methods.items():
        if name == baseline:
            continue
        base, paired = same_seeds(methods[baseline], group)
        end = last_key(paired[0])
        per_seed = " / ".join(f"{pct(b.rate(end))} → {pct(r.rate(end))}" for b, r in zip(base, paired, strict=True))
        found = seed_difference([b.outcomes(end) for b in base], [r.outcomes(end) for r in paired])
        lines.append(f"| {name} vs {baseline} ({seeds_label(paired)}) | {per_seed} | {verdict_cell(found)} |")
    return lines


def same_seeds(base: list[Result], group: list[Result]) -> tuple[list[Result], list[Result]]:
    """The runs of both groups at the training seeds they share, paired seed by seed."""
    by_seed = {r.record["seed"]: r for r in base}
    shared = [r for r in group if r.record["seed"] in by_seed]
    return [by_seed[r.record["seed"]] for r in shared], shared


def per_hour_table(methods: dict[str, list[Result]], baseline: str) -> list[str]:
    """The learning-per-hour table: each row's gain over its warm start over training seeds, against the recipe, and
    per training hour (the gain over the mean training hours of its seeds; the interval scaled the same way)."""
    lines = ["| row (training seeds) | warm start → end, per seed | over training seeds: warm start → end | "
             f"vs {baseline} at the end, over training seeds | training minutes, per seed | "
             "points over the warm start per training hour [95 %] |", "| --- | --- | --- | --- | --- | --- |"]
    base = methods[baseline]
    for name, group in methods.items():
        end = last_key(group[0])
        per_seed = " / ".join(f"{pct(r.rate('0'))} → {pct(r.rate(end))}" for r in group)
        gain = seed_difference([r.outcomes("0") for r in group], [r.outcomes(end) for r in group])
        versus = "(baseline)" if name == baseline else verdict_cell(
            seed_difference([b.outcomes(end) for b in base], [r.outcomes(end) for r in group]))
        spent = [float(r.record["training_minutes"][end]) for r in group]
        hours = sum(spent) / len(spent) / 60
        hourly = f"{100 * gain.difference / hours:+.0f} [{100 * gain.low / hours:+.0f}, {100 * gain.high / hours:+.0f}]"
        lines.append(f"| {name} ({seeds_label(group)}) | {per_seed} | {verdict_cell(gain)} | {versus} | "
                     f"{' / '.join(f'{m:.1f}' for m in spent)} | {hourly} |")
    return lines


def held_out_table(results: dict[str, Result]) -> list[str]:
    """How each setup's held-out sets were built and what its training streams did, measured by the runs."""
    lines = ["| setup (run) | env | test: requested / distinct (repeats skipped) | eval: distinct (repeats, "
             "in test) | training draws skipped as held out | test tasks trained on | eval tasks trained on |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, result in results.items():
        held = result.record.get("held_out") or {}
        splits = held.get("splits", {})
        for env, test in splits.get("test", {}).items():
            evaluation = splits.get("eval", {}).get(env, {})
            overlap = {split: measured.get("trained_on", "-") for split, measured in held.get("overlap", {}).items()}
            lines.append(
                f"| {name} | {env} | {test['requested']} / {test['distinct']} ({test['repeats_skipped']}) | "
                f"{evaluation.get('distinct', '-')} ({evaluation.get('repeats_skipped', '-')}, "
                f"{evaluation.get('in_other_split_skipped', '-')}) | {held['training']['held_out_skipped']} | "
                f"{overlap.get('test', '-')} | {overlap.get('eval', '-')} |")
    return lines


def machine_line(group: list[Result]) -> str:
    machines = {(r.record["machine"]["cpu_model"], r.record["machine"]["cpu_kind"], r.record["dtype"]) for r in group}
    commits = sorted({r.record["commit"][:7] + (" with uncommitted changes" if r.record.get("uncommitted_changes")
                                                 else "") for r in group})
    text = "; ".join(f"{cpu} ({kind}), {dtype}" for cpu, kind, dtype in sorted(machines))
    return (f"Machine: {text}. Commit {', '.join(commits)}; per-task outcomes: docs/results/ "
            f"({', '.join(r.name for r in group)}).")


# ---------------------------------------------------------------------------------------------------------- registry
def _demo(results: dict[str, Result]) -> list[str]:
    """The demo, and its second run where there is one (issue 52: the same command twice gives the same verdict)."""
    group = [results["demo/sokoban_demo"]]
    labels = ["`make demo` (seed 0)"]
    if "demo/sokoban_demo_rerun" in results:
        group.append(results["demo/sokoban_demo_rerun"])
        labels.append("`make demo` again (seed 0)")
    same = len(group) == 2 and all(group[0].outcomes(k) == group[1].outcomes(k) for k in group[0].evals())
    note = ["", "The two runs' per-task outcomes are identical, eval by eval."] if same else []
    return [*run_table(group, labels), *note, "", machine_line(group)]


def _positions(results: dict[str, Result]) -> list[str]:
    gigpo, grpo = runs(results, "sokoban_positions/gigpo"), runs(results, "sokoban_positions/grpo")
    labels = [f"GiGPO seed {r.record['seed']}" for r in gigpo] + [f"GRPO seed {r.record['seed']}" for r in grpo]
    methods = {"GiGPO": gigpo, "GRPO": grpo}
    return [*run_table(gigpo + grpo, labels), "", *over_seeds_table(methods), "", *versus_table(methods, "GRPO"), "",
            machine_line(gigpo + grpo)]


def _arithmetic(results: dict[str, Result]) -> list[str]:
    group = runs(results, "arithmetic/recipe")
    labels = [f"seed {r.record['seed']}" for r in group]
    return [*run_table(group, labels), "", *over_seeds_table({"recipe": group}), "", machine_line(group)]


PER_HOUR_ROWS = {"recipe (4 tasks × 8)": "recipe", "dynamic sampling": "dyn", "2 tasks × 16": "g16",
                 "2 PPO epochs × mini-batches of 16": "ppo2", "training temperature 0.7": "t07"}


def _per_hour(results: dict[str, Result]) -> list[str]:
    methods = {label: runs(results, f"arithmetic/{row}") for label, row in PER_HOUR_ROWS.items()}
    methods = {label: group for label, group in methods.items() if group}
    every = [r for group in methods.values() for r in group]
    return [*per_hour_table(methods, "recipe (4 tasks × 8)"), "", machine_line(every)]


def _frozenlake(results: dict[str, Result]) -> list[str]:
    group = runs(results, "frozenlake/grpo")
    labels = [f"seed {r.record['seed']}" for r in group]
    return [*run_table(group, labels), "", *over_seeds_table({"GRPO": group}), "", machine_line(group)]


DEPTHS = ("1 move", "2 moves", "3+ moves")
ENV_KEYS = ("dim_room", "num_boxes", "max_steps", "num_gen_steps", "p_change_directions")


def room_depths(result: Result) -> dict[str, str]:
    """Each test room's shortest solution (the BFS solver), bucketed, rebuilt from the run's env options."""
    from agentforge.envs.sokoban import SokobanEnv
    from agentforge.envs.sokoban_solver import solve
    from agentforge.types import Task

    env = SokobanEnv(**{k: result.record["env"][k] for k in ENV_KEYS if k in result.record["env"]})
    out = {}
    for key in result.record["splits"]["test"]["tasks"]:
        name, split, seed = key.split(":")[:3]
        env.reset(Task(name, int(seed), split))
        plan = solve(env)
        out[key] = "unsolved by BFS" if plan is None else DEPTHS[min(len(plan), 3) - 1]
    return out


def _sokoban_depth(results: dict[str, Result]) -> list[str]:
    """Success by how far each test room is from solved, per method pooled over its seeds: does it plan?"""
    methods = {"GiGPO": runs(results, "sokoban_positions/gigpo"), "GRPO": runs(results, "sokoban_positions/grpo")}
    if not all(methods.values()):
        raise ValueError("the Sokoban positions runs are not committed")
    depths = room_depths(next(iter(methods.values()))[0])
    rooms = {d: [k for k, v in depths.items() if v == d] for d in DEPTHS}
    lines = ["| test rooms by shortest solution | rooms | random floor | " + " | ".join(
        f"{name}: warm start → end (pooled over seeds {seeds_label(group)})" for name, group in methods.items()) + " |",
             "| --- | --- | --- |" + " --- |" * len(methods)]
    for depth, keys in rooms.items():
        if not keys:
            continue
        cells = []
        for group in methods.values():
            end = last_key(group[0])
            start = [won for r in group for k in keys for won in r.outcomes("0")[k]]
            finish = [won for r in group for k in keys for won in r.outcomes(end)[k]]
            cells.append(f"{pct(sum(start) / len(start))} → {pct(sum(finish) / len(finish))}")
        floor = [won for r in next(iter(methods.values())) for k in keys for won in (r.floor() or {}).get(k, [])]
        shown = pct(sum(floor) / len(floor)) if floor else "-"
        lines.append(f"| {depth} | {len(keys)} | {shown} | {' | '.join(cells)} |")
    return lines


def _held_out(results: dict[str, Result]) -> list[str]:
    if not results:
        raise ValueError("no committed results")
    return held_out_table(results)


def _headline(results: dict[str, Result]) -> list[str]:
    """README's table: each claim in one row, on the test split, its seeds and verdicts over them."""
    lines = ["| claim (recipe) | test tasks × training seeds | held-out success (mean over seeds) | verdicts |",
             "| --- | --- | --- | --- |"]

    def row(label: str, group: list[Result], versus: tuple[str, list[Result]] | None = None) -> None:
        end = last_key(group[0])
        mean = {k: sum(r.rate(k) for r in group) / len(group) for k in ("base", "0", end) if k in group[0].evals()}
        path = " → ".join(pct(mean[k]) for k in ("base", "0", end) if k in mean)
        if all(r.floor() for r in group):  # envs that list no admissible actions have no floor
            floors = [[won for v in r.floor().values() for won in v] for r in group]
            path += f" (random floor {pct(sum(sum(f) / len(f) for f in floors) / len(floors))})"
        verdicts = []
        for start, key in (("warm start", "0"), ("shipped", "base"), ("random floor", "floor")):
            if not all(over_seeds_possible(r, key) for r in group):
                continue
            if len(group) == 1:  # one run: its own paired verdict (eval noise only)
                before = group[0].floor() if key == "floor" else group[0].outcomes(key)
                found = paired_difference(before, group[0].outcomes(end))
            else:
                found = over_seeds(group, key, end)
            verdicts.append(f"{start} → end: {verdict_cell(found)}")
        if versus is not None:
            name, other = versus
            other, paired = same_seeds(other, group)
            found = seed_difference([o.outcomes(end) for o in other], [r.outcomes(end) for r in paired])
            verdicts.append(f"against {name} (seeds {seeds_label(paired)}): {verdict_cell(found)}")
        lines.append(f"| {label} | {tasks_of(group[0])} × {len(group)} ({seeds_label(group)}) | shipped → warm "
                     f"start → end: {path} | {'; '.join(verdicts)} |")

    if "demo/sokoban_demo" in results:
        row("`make demo` (`sokoban_demo`, one run: paired within it)", [results["demo/sokoban_demo"]])
    gigpo, grpo = runs(results, "sokoban_positions/gigpo"), runs(results, "sokoban_positions/grpo")
    if gigpo and grpo:
        row("Sokoban, positions warm start, GiGPO (`gigpo_sokoban_positions`)", gigpo)
        row("Sokoban, positions warm start, GRPO (`... algorithm=grpo`)", grpo, ("GiGPO", gigpo))
    arithmetic = runs(results, "arithmetic/recipe")
    if arithmetic:
        row("reasoning-gym arithmetic, GRPO (`grpo_reasoning_gym_arithmetic`)", arithmetic)
        for label, key in list(PER_HOUR_ROWS.items())[1:]:
            group = runs(results, f"arithmetic/{key}")
            if group:
                row(f"arithmetic: {label}", group, ("the recipe", arithmetic))
    frozen = runs(results, "frozenlake/grpo")
    if frozen:
        row("Gymnasium FrozenLake 4×4, GRPO (`grpo_gym_frozenlake`)", frozen)
    if "code/grpo_level2_s0" in results:
        row("code tool in a sandbox, level 2, GRPO (`grpo_code`, one run: paired within it)",
            [results["code/grpo_level2_s0"]])
    if len(lines) == 2:
        raise ValueError("no committed results")
    return lines


# The audit (issue 55): each setup's eval seeds as the docs ran them before content keys, against its training
# streams as they drew seeds then (RL from seed 0, SFT from 500,000): how many eval tasks were training tasks.
SOKOBAN_DEMO = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 6, "num_gen_steps": 5}
ARITHMETIC = {"task": "basic_arithmetic", "difficulty": 0}
AUDIT = [  # (setup, env, options, eval seeds, RL training seeds, SFT seeds)
    ("`gigpo_sokoban_positions` (RL 20 × 4 rooms, SFT 96)", "sokoban", {**SOKOBAN_DEMO, "show_positions": True},
     256, 80, 96),
    ("`sokoban_demo` (RL 3 × 4, SFT 48)", "sokoban", SOKOBAN_DEMO, 128, 12, 48),
    ("reasoning-gym arithmetic level 0, the recipe (80 iterations × 4 tasks, SFT 96)", "reasoning_gym", ARITHMETIC,
     256, 320, 96),
    ("same, 8 tasks × 4 samples (80 × 8 tasks)", "reasoning_gym", ARITHMETIC, 256, 640, 96),
    ("`grpo_gym_frozenlake` (4×4 lakes; RL 20 × 4, SFT 96)", "gym",
     {"id": "FrozenLake-v1", "kwargs": {"is_slippery": False}, "map_per_seed": 4, "max_steps": 8}, 32, 80, 96),
]


def _audit(results: dict[str, Result]) -> list[str]:
    from agentforge.envs.task_keys import task_keyer
    from agentforge.tasks import SPLIT_SEED_BASE
    from agentforge.types import Task

    lines = ["| setup as the docs ran it before issue 55 | eval seeds | distinct eval tasks | eval tasks identical to "
             "a training task | of them in the SFT set |", "| --- | --- | --- | --- | --- |"]
    for setup, env, options, evaluated, rl, sft in AUDIT:
        keyer = task_keyer(env, options)
        try:
            held = [keyer.key(Task(env, SPLIT_SEED_BASE["eval"] + i, "eval")) for i in range(evaluated)]
            expert = {keyer.key(Task(env, 500_000 + i, "train")) for i in range(sft)}
            trained = {keyer.key(Task(env, i, "train")) for i in range(rl)} | expert
        finally:
            keyer.close()
        seen = [key for key in held if key in trained]
        lines.append(f"| {setup} | {evaluated} | {len(set(held))} | {len(seen)} ({pct(len(seen) / evaluated)}) | "
                     f"{sum(1 for key in seen if key in expert)} |")
    return lines


COVERAGE_POINTS = [(256, 0.0, 0.225), (256, 0.05, 0.15), (64, 0.1, 0.1), (128, 0.0, 0.05), (32, 0.2, 0.05)]


def _coverage(results: dict[str, Result]) -> list[str]:
    """Exact coverage of the one-episode interval, enumerated over every outcome (agentforge.stats.exact_coverage)."""
    from agentforge.stats import conditional_mapping_interval, exact_coverage, tango_interval

    lines = ["| tasks | P(solved before only) | P(solved after only) | Tango's score interval (now) | "
             "Clopper-Pearson of c / d mapped through d / n (before) |", "| --- | --- | --- | --- | --- |"]
    for n, before, after in COVERAGE_POINTS:
        lines.append(f"| {n} | {before:.3g} | {after:.3g} | {exact_coverage(tango_interval, n, before, after):.3f} | "
                     f"{exact_coverage(conditional_mapping_interval, n, before, after):.3f} |")
    return lines


def _code(results: dict[str, Result]) -> list[str]:
    """The code env (issue 53): GRPO on sandboxed tool use, one run per level (paired within each run)."""
    names = [(n, label) for n, label in (("code/grpo_s0", "level 0 (products), SFT 96"),
                                          ("code/grpo_level2_s0", "level 2 (counting, prime sums), SFT 32"))
             if n in results]
    group = [results[n] for n, _ in names]
    if not group:
        return ["(no code-env run committed under docs/results/)"]
    return [*run_table(group, [f"`grpo_code` {label} (seed 0)" for _, label in names]), "", machine_line(group)]


TABLES: dict[str, Callable[[dict[str, Result]], list[str]]] = {
    "demo": _demo, "sokoban-positions": _positions, "arithmetic": _arithmetic, "per-hour": _per_hour,
    "frozenlake": _frozenlake, "held-out": _held_out, "audit": _audit, "coverage": _coverage,
    "headline": _headline, "sokoban-depth": _sokoban_depth, "code": _code,
}


def render(name: str, results: dict[str, Result]) -> str:
    if name not in TABLES:
        raise SystemExit(f"a doc asks for results table {name!r}; the tables are {', '.join(TABLES)}")
    return "\n".join(TABLES[name](results)) + "\n"


def sync(docs: list[Path], results: dict[str, Result], write: bool) -> list[str]:
    """Each doc's result blocks against their rendering: the names that differ (rewritten when `write`)."""
    stale = []
    for doc in docs:
        text = doc.read_text()

        def replace(match: re.Match[str], doc: Path = doc) -> str:
            fresh = render(match["name"], results)
            if match["body"] != fresh:
                where = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc
                stale.append(f"{where}: {match['name']}")
            return match.group(1) + fresh + match.group(4)

        updated = BLOCK.sub(replace, text)
        if write and updated != text:
            doc.write_text(updated)
    return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--write", action="store_true", help="rewrite the blocks in README.md and docs/")
    parser.add_argument("--check", action="store_true", help="exit 1 where a block differs from its rendering")
    parser.add_argument("names", nargs="*", help="tables to print (default: every table whose runs are committed)")
    args = parser.parse_args()
    results = load_results(args.results)
    if args.write or args.check:
        stale = sync(DOCS, results, args.write)
        if stale and args.check:
            print("results tables that differ from docs/results/ (python scripts/results_tables.py --write):\n  "
                  + "\n  ".join(stale), file=sys.stderr)
            raise SystemExit(1)
        print(f"{'rewrote' if args.write else 'checked'} {len(stale)} stale block(s)" if stale else "all blocks agree")
        return
    for name in args.names or TABLES:
        try:
            print(f"<!-- results:{name} -->\n{render(name, results)}<!-- /results:{name} -->\n")
        except (KeyError, ValueError, IndexError) as missing:
            print(f"({name}: its runs are not all committed yet: {missing})\n")


if __name__ == "__main__":
    main()
