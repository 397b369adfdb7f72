"""A sandbox for model-written Python: a process per call in fresh Linux namespaces, with rlimits (docs/code_tool.md).

`Sandbox(SandboxLimits(...)).run(code) -> SandboxResult`. What it uses and what it does not protect against:
docs/code_tool.md.
"""

from __future__ import annotations

from agentforge.sandbox.host import SandboxUnavailable
from agentforge.sandbox.limits import NAMESPACES, RLIMITS_ONLY, SandboxLimits
from agentforge.sandbox.result import SandboxResult
from agentforge.sandbox.runner import Sandbox

__all__ = ["NAMESPACES", "RLIMITS_ONLY", "Sandbox", "SandboxLimits", "SandboxResult", "SandboxUnavailable"]
