"""ALFWorld on the real text engine (alfworld==0.4.2 + textworld[pddl]); importing registers `alfworld` and
`alfworld_intervention` (the TJPO intervention evaluation: Standard, User Constraints, Disruption) in `ENVS`.

textworld and alfworld are imported only when an env resets a game, so importing this package stays light.
"""

from __future__ import annotations

from agentforge.envs.alfworld.env import ACTION_TYPES, AlfWorldEnv, action_type, location_category
from agentforge.envs.alfworld.interventions import AlfWorldInterventionEnv, intervention_success
from agentforge.envs.alfworld.success import success_by_task_type
from agentforge.envs.alfworld.task_types import COLUMNS, TASK_TYPES, short_name

__all__ = [
    "ACTION_TYPES",
    "COLUMNS",
    "TASK_TYPES",
    "AlfWorldEnv",
    "AlfWorldInterventionEnv",
    "action_type",
    "intervention_success",
    "location_category",
    "short_name",
    "success_by_task_type",
]
