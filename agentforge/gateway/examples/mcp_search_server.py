"""An MCP tool server (stdio) over the search-QA corpus: the `search` tool the MCP example agent uses. Run by the
agent as a subprocess: `python -m agentforge.gateway.examples.mcp_search_server [--data-dir D] [--top-k K]`."""

from __future__ import annotations

import argparse


def main() -> None:
    from mcp.server.mcpserver import MCPServer

    from agentforge.envs.search_qa.data import load_corpus

    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--corpus-file", default="corpus.jsonl")
    parser.add_argument("--top-k", type=int, default=3)
    args = parser.parse_args()
    corpus = load_corpus(args.data_dir, args.corpus_file)
    server = MCPServer("agentforge-search-qa", instructions="Search the encyclopedia of the search-QA world.")

    @server.tool(description="Search the encyclopedia; returns the best matching passages.")
    def search(query: str) -> str:
        found = corpus.search(" ".join(query.split()), args.top_k)
        return "\n".join(p.render(i) for i, p in enumerate(found, start=1)) or "No passage matches this query."

    server.run("stdio")


if __name__ == "__main__":
    main()
