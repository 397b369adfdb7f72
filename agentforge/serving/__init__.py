"""`agentforge serve`: the gateway's OpenAI-compatible server standing alone on a trained policy (inference)."""
