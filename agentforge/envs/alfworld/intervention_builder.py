"""Building and verifying ALFWorld intervention cases (TJPO paper appendix G): which tasks, which locations to forbid,
and proof.

A task qualifies when its target object can be fetched from receptacles of two different source categories A and B
(different object instances), neither being the goal receptacle's category nor the task's processing tool
(sinkbasin, microwave, fridge). Witness plans come from ALFWorld's own planner (Fast Downward through
`AlfredExpert`) run on the game with only one category's target instances left pickupable: removing the other
instances' `pickupable` fact keeps every name (the demangler numbers ids, which stay) while forcing the branch;
the game's stored planner walkthrough stands in for the branch it already takes (one planner call fewer).
Each plan is then replayed in the real, unmodified game. A task gives two cases, one per forbidden category X:

1. the plan through X wins, and the plan avoiding X wins, in the original game;
2. the avoiding plan wins under User Constraints with no forbidden visit, and under Disruption with no rejection;
3. after one rejected `go to` a forbidden location under Disruption, the avoiding plan still wins within the limit;
4. every plan action was admissible when taken; the forbidden set is every initially navigable location of X and
   no forbidden location shares its position with another receptacle; the two plans each avoid the other branch's
   category, are at most 50 steps, and their lengths differ by at most `max_gap` (the paper: 2).

Cases are stored as gzipped JSONL; the bundled file is built by envs/build_alfworld_interventions.py.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agentforge.envs.alfworld.env import location_category
from agentforge.envs.alfworld.games import GameRecord
from agentforge.envs.alfworld.intervention_cases import InterventionCase
from agentforge.envs.alfworld.interventions import AlfWorldInterventionEnv, blocked_location
from agentforge.errors import ConfigError

# Task types whose plan starts by fetching one object (pick-two needs two fetches: left out, as in the paper).
SOURCE_TASK_TYPES: tuple[str, ...] = ("pick_and_place_simple", "pick_clean_then_place_in_recep",
                                      "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep")
PROCESSING_TOOL: dict[str, str] = {"pick_clean_then_place_in_recep": "sinkbasin",
                                   "pick_heat_then_place_in_recep": "microwave",
                                   "pick_cool_then_place_in_recep": "fridge"}
MAX_PLAN_STEPS = 50
MAX_LENGTH_GAP = 2


# -- reading a problem --------------------------------------------------------------------------------------------
_DECLARATION = re.compile(r"^\s*(\S+)\s+-\s+(\w+)\s*$", re.M)
_FACT = re.compile(r"\((\w+)((?:\s+[^()\s]+)+)\s*\)")


@dataclass
class ProblemFacts:
    """What the builder needs from a PDDL problem, with ids lower-cased as the engine keeps them."""

    names: dict[str, str]  # id -> the engine's name (`countertop 1`)
    object_type: dict[str, str] = field(default_factory=dict)  # object id -> `appletype`
    in_receptacle: dict[str, str] = field(default_factory=dict)  # object id -> receptacle id
    receptacle_type: dict[str, str] = field(default_factory=dict)
    receptacle_location: dict[str, str] = field(default_factory=dict)


def parse_problem(pddl: str) -> ProblemFacts:
    """Facts of the init section and the names `AlfredDemangler` gives (the package's `Demangler` on the same ids)."""
    from alfworld.agents.utils.misc import Demangler

    lowered = pddl.lower()
    objects_at, init_at, goal_at = lowered.find("(:objects"), lowered.find("(:init"), lowered.find("(:goal")
    if min(objects_at, init_at, goal_at) < 0:
        raise ConfigError("an ALFWorld problem needs :objects, :init and :goal sections")
    ids = [m.group(1) for m in _DECLARATION.finditer(lowered[objects_at:init_at])]
    demangler = Demangler(game_infos={i: SimpleNamespace(id=i) for i in ids})
    facts = ProblemFacts(names={i: demangler.demangle_alfred_name(i).strip() for i in ids})
    for predicate, args in _FACT.findall(lowered[init_at:goal_at]):
        parts = args.split()
        if len(parts) != 2:
            continue
        table = {"objecttype": facts.object_type, "inreceptacle": facts.in_receptacle,
                 "receptacletype": facts.receptacle_type,
                 "receptacleatlocation": facts.receptacle_location}.get(predicate)
        if table is not None:
            table[parts[0]] = parts[1]
    return facts


def drop_pickupable(pddl: str, object_ids: Iterable[str]) -> str:
    """The problem with these objects no longer pickupable (names and everything else unchanged)."""
    out = pddl
    for object_id in object_ids:
        out, count = re.subn(rf"\(\s*pickupable\s+{re.escape(object_id)}\s*\)", "", out, flags=re.I)
        if count == 0:
            raise ConfigError(f"object {object_id} has no pickupable fact to drop")
    return out


@dataclass
class SourceAnalysis:
    """A game's target instances grouped by source category, and each category's locations."""

    game: GameRecord
    problem: str
    instances: dict[str, list[str]]  # eligible category -> target object ids in it
    locations: dict[str, tuple[str, ...]]  # category -> its receptacles' names (all of them)
    target_ids: list[str]


def _name_key(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition(" ")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def analyse_sources(game: GameRecord) -> SourceAnalysis | str:
    """The game's eligible source categories, or why it cannot be a case."""
    if game.task_type not in SOURCE_TASK_TYPES:
        return f"task type {game.task_type} is not a single-fetch task"
    problem = game.pddl_problem if game.pddl_problem is not None else game.game_data()["pddl_problem"]
    facts = parse_problem(problem)
    target_type = f"{game.pddl_params['object_target']}Type".lower()
    parent_type = f"{game.pddl_params['parent_target']}Type".lower()
    category = {r: location_category(facts.names[r]) for r in facts.receptacle_type}
    excluded = {PROCESSING_TOOL.get(game.task_type)}
    excluded |= {category[r] for r, t in facts.receptacle_type.items() if t == parent_type}
    locations: dict[str, list[str]] = {}
    for receptacle, cat in category.items():
        locations.setdefault(cat, []).append(receptacle)
    # A forbidden location must not share its position with a receptacle that stays allowed.
    position_count = Counter(facts.receptacle_location.values())
    shared = {cat for cat, recs in locations.items()
              if any(position_count[facts.receptacle_location.get(r)] > 1 for r in recs)}
    target_ids = sorted(o for o, t in facts.object_type.items() if t == target_type)
    instances: dict[str, list[str]] = {}
    for object_id in target_ids:
        receptacle = facts.in_receptacle.get(object_id)
        if receptacle in category and category[receptacle] not in excluded | shared:
            instances.setdefault(category[receptacle], []).append(object_id)
    if len(instances) < 2:
        return "fewer than two eligible source categories"
    names = {cat: tuple(sorted((facts.names[r] for r in recs), key=_name_key)) for cat, recs in locations.items()}
    return SourceAnalysis(game, problem, instances, names, target_ids)


# -- planning and replaying ---------------------------------------------------------------------------------------
def plan_through(analysis: SourceAnalysis, category: str, folder: Path, cpu_limit: float) -> tuple[list[str] | None,
                                                                                                      str]:
    """The planner's plan when only `category`'s target instances can be picked up (CPU-limited child process)."""
    from agentforge.envs.alfworld.generator import solve_with_limit

    keep = set(analysis.instances[category])
    problem = drop_pickupable(analysis.problem, [o for o in analysis.target_ids if o not in keep])
    game = analysis.game
    data = game.game_data()
    data.update(pddl_problem=problem, solvable=None, walkthrough=None)
    # A game folder as the engine expects it: the planner expert reads traj_data.json beside the game file.
    game_dir = folder / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', game.game_id)}-{category}"
    game_dir.mkdir(parents=True, exist_ok=True)
    (game_dir / "traj_data.json").write_text(json.dumps({"task_type": game.task_type,
                                                         "pddl_params": game.pddl_params}))
    (game_dir / "game.tw-pddl").write_text(json.dumps(data))
    try:
        return solve_with_limit(game_dir / "game.tw-pddl", cpu_limit)
    finally:
        shutil.rmtree(game_dir, ignore_errors=True)


def stored_plan_category(analysis: SourceAnalysis) -> str | None:
    """The source category the game's stored planner walkthrough takes the target from, if it is eligible."""
    takes = [c for c in analysis.game.walkthrough or () if c.startswith("take ")]
    if len(takes) != 1:
        return None
    category = location_category(takes[0].rsplit(" from ", 1)[-1])
    return category if category in analysis.instances else None


def touches(plan: Sequence[str], locations: Sequence[str]) -> bool:
    return any(blocked_location(command, locations) is not None for command in plan)


@dataclass
class Replay:
    won: bool
    steps: int
    violations: int
    rejections: int
    inadmissible: list[str]


def replay(env: AlfWorldInterventionEnv, case: InterventionCase, condition: str, actions: Sequence[str],
           reject_first: str | None = None) -> Replay:
    """Play `actions` on a case under a condition (after one `reject_first` attempt, if given)."""
    observation = env.reset_to_case(case, condition)
    steps = violations = rejections = 0
    inadmissible: list[str] = []
    won = done = False
    for index, action in enumerate(([reject_first] if reject_first else []) + list(actions)):
        checked = index > 0 or not reject_first
        if checked and observation.admissible is not None and action not in observation.admissible:
            inadmissible.append(action)
        result = env.step(action)
        steps += 1
        violations += bool(result.info.get("forbidden_visit"))
        rejections += bool(result.info.get("rejected"))
        observation, won, done = result.observation, result.won, result.done
        if done:
            break
    return Replay(won, steps, violations, rejections, inadmissible)


def verify_case(env: AlfWorldInterventionEnv, case: InterventionCase) -> list[str]:
    """Every check of appendix G for one case; an empty list means it passes."""
    problems: list[str] = []
    first = env.reset_to_case(case, "standard")
    navigable = sorted((c[len("go to "):] for c in first.admissible or () if c.startswith("go to ")), key=_name_key)
    if [n for n in navigable if location_category(n) == case.category] != list(case.forbidden):
        problems.append(f"forbidden set {list(case.forbidden)} is not every navigable {case.category}")
    if not touches(case.plan_using, case.forbidden):
        problems.append("the plan using X never touches X")
    if touches(case.plan_avoiding, case.forbidden):
        problems.append("the avoiding plan touches X")
    limit = min(env.env.max_steps, MAX_PLAN_STEPS)
    checks = (
        ("standard, plan using X", replay(env, case, "standard", case.plan_using), 0),
        ("standard, plan avoiding X", replay(env, case, "standard", case.plan_avoiding), 0),
        ("user_constraint, plan avoiding X", replay(env, case, "user_constraint", case.plan_avoiding), 0),
        ("disruption, plan avoiding X", replay(env, case, "disruption", case.plan_avoiding), 0),
        ("disruption after a rejected go to", replay(env, case, "disruption", case.plan_avoiding,
                                                     reject_first=f"go to {case.forbidden[0]}"), 1),
    )
    for label, result, rejections in checks:
        if not result.won or result.steps > limit:
            problems.append(f"{label}: not won within {limit} steps")
        if result.inadmissible:
            problems.append(f"{label}: inadmissible {result.inadmissible}")
        if result.rejections != rejections:
            problems.append(f"{label}: {result.rejections} rejections, expected {rejections}")
        if "avoiding" in label and result.violations:
            problems.append(f"{label}: {result.violations} forbidden visits")
    if not replay(env, case, "user_constraint", case.plan_using).violations:
        problems.append("user_constraint does not flag the plan using X")
    return problems


# -- building -----------------------------------------------------------------------------------------------------
class PlanCache:
    """Planner results by (data source, split, game, category) in a JSON file, so a rerun skips the planner."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, Any] = {}
        if path is not None and path.is_file():
            self.entries = json.loads(path.read_text())

    def get(self, key: str, compute: Callable[[], tuple[list[str] | None, str]]) -> tuple[list[str] | None, str]:
        if key not in self.entries:
            plan, reason = compute()
            if reason.startswith("error"):  # an engine error is not a property of the game: retry next time
                return plan, reason
            self.entries[key] = {"plan": plan, "reason": reason}
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                partial = self.path.with_name(self.path.name + ".partial")
                partial.write_text(json.dumps(self.entries, indent=1, sort_keys=True))
                partial.replace(self.path)
        entry = self.entries[key]
        return entry["plan"], entry["reason"]


@dataclass
class BuildReport:
    cases: list[InterventionCase] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    games_seen: int = 0
    planner_calls: int = 0
    seconds: float = 0.0

    @property
    def tasks(self) -> int:
        return len({(c.game_split, c.game_id) for c in self.cases})


def _pair_cases(analysis: SourceAnalysis, data_source: str, task_index: int, a: str, b: str,
                plans: dict[str, list[str]]) -> list[InterventionCase]:
    game = analysis.game
    task_desc = game.task_desc or ""
    return [
        InterventionCase(task_index, game.game_id, game.split, data_source, game.task_type, task_desc, x,
                         analysis.locations[x], y, tuple(plans[x]), tuple(plans[y]))
        for x, y in ((a, b), (b, a))
    ]


def build_task(env: AlfWorldInterventionEnv, game: GameRecord, data_source: str, task_index: int,
               plan_cache: PlanCache, folder: Path, cpu_limit: float, max_gap: int,
               report: BuildReport) -> list[InterventionCase] | str:
    """Both cases of a game, or why it does not qualify."""
    analysis = analyse_sources(game)
    if isinstance(analysis, str):
        return analysis
    plans: dict[str, list[str]] = {}
    stored = stored_plan_category(analysis)
    for category in sorted(analysis.instances):
        def compute(category: str = category) -> tuple[list[str] | None, str]:
            report.planner_calls += 1
            return plan_through(analysis, category, folder, cpu_limit)

        if category == stored:  # the game's own planner walkthrough already fetches from here
            plan: list[str] | None = list(game.walkthrough or ())
        else:
            plan, _ = plan_cache.get(f"{data_source}|{game.split}|{game.game_id}|{category}", compute)
        if plan is not None and len(plan) <= MAX_PLAN_STEPS - 1:  # room for one rejected step
            plans[category] = plan
    pairs = [(a, b) for a, b in combinations(sorted(plans), 2)
             if not touches(plans[a], analysis.locations[b]) and not touches(plans[b], analysis.locations[a])]
    if not pairs:
        return "no two planned branches that avoid each other"
    pairs.sort(key=lambda p: abs(len(plans[p[0]]) - len(plans[p[1]])))
    reason = f"plan lengths differ by more than {max_gap}"
    for a, b in pairs:
        if abs(len(plans[a]) - len(plans[b])) > max_gap:
            break
        cases = _pair_cases(analysis, data_source, task_index, a, b, plans)
        problems = [p for case in cases for p in verify_case(env, case)]
        if not problems:
            return cases
        reason = f"replay check failed: {problems[0]}"
    return reason


def build_cases(games: Iterable[GameRecord], data_source: str = "bundled", cpu_limit: float = 20.0,
                max_gap: int = MAX_LENGTH_GAP, plan_cache: PlanCache | None = None, max_tasks: int | None = None,
                log: Callable[[str], None] | None = None) -> BuildReport:
    """Cases (two per qualifying task, in game order) from a sequence of games."""
    report = BuildReport()
    started = time.perf_counter()
    plan_cache = plan_cache or PlanCache(None)
    placeholder = InterventionCase(0, "", "", data_source, "", "", "", ("",), "", (), ())
    env = AlfWorldInterventionEnv(cases=[placeholder], data_source=data_source)
    try:
        with tempfile.TemporaryDirectory(prefix="agentforge-interventions-") as tmp:
            for game in games:
                if max_tasks is not None and report.tasks >= max_tasks:
                    break
                report.games_seen += 1
                outcome = build_task(env, game, data_source, report.tasks, plan_cache, Path(tmp), cpu_limit,
                                     max_gap, report)
                if isinstance(outcome, str):
                    report.rejected[outcome.split(":")[0]] += 1
                    if log is not None and not outcome.startswith(("task type", "fewer than")):
                        log(f"{game.game_id}: {outcome}")
                    continue
                report.cases.extend(outcome)
                if log is not None:
                    case = outcome[0]
                    log(f"{game.game_id}: avoid {case.category} ({len(case.plan_avoiding)} steps) / avoid "
                        f"{case.alternative_category} ({len(case.plan_using)} steps)")
    finally:
        env.close()
    report.seconds = time.perf_counter() - started
    return report
