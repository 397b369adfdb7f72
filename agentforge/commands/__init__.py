"""The commands floor: each command's layer (train, sft, rft, eval, rollout), the builders of the parts they share
(one rollout stack: engine, env pool, context, workflow, closed by one `close`), the preflight and the config checks.
Nothing below this floor imports it."""
