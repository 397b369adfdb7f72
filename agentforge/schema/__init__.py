"""The typed config schema: every group's keys with their types, defaults, help and constraints, checked when a
command starts (all problems at once), listed by `agentforge config`, and the source of the configuration tables."""
