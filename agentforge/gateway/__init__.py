"""Train any agent: an OpenAI-compatible, token-exact gateway in front of the rollout engine (`env=agent`).

`workflow.GatewayWorkflow` plays the episodes, `server.GatewayServer` speaks the OpenAI API, `sessions` and
`rendering` keep every call's tokens exact, `batcher` puts the calls of all sessions into the engine together,
`tools` reads Hermes-style tool calls, `agent_env` holds the options. Nothing heavy is imported here.
"""
