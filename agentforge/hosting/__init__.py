"""Hosting envs for rollouts: the env pools (in-process, or Ray actors with crash recovery, timeouts and replay),
the host that holds one env per slot, and injected step latency. The envs themselves are `agentforge.envs`; this
room is what runs them at scale, so using an env in-process never imports Ray."""
