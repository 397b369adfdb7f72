"""Example agents trained through the gateway (README "Train your own agent"): each is an ordinary agent program
that only takes a base_url and an api_key from agentforge."""
