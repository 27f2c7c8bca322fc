"""An MCP server on stdio with a tool, a resource, a resource template and a prompt.

    python examples/mcp_server.py
    sturdyrpc mcp tools -- python examples/mcp_server.py
    sturdyrpc mcp call add '{"a": 1, "b": 2}' -- python examples/mcp_server.py
    sturdyrpc check --mcp --call-tools add -- python examples/mcp_server.py
"""

from sturdyrpc.mcp import MCPServer, run_mcp_stdio

server = MCPServer("notes", "1.0", instructions="Notes you can read, and a calculator.")
NOTES = {"todo": "buy milk", "idea": "a sturdier server"}


@server.tool(blocking=False)
def add(a: int, b: int) -> int:
    """Add two integers."""  # input and output schemas come from the hints
    return a + b


@server.resource("notes://index", name="index", mime_type="text/plain")
def index() -> str:
    return "\n".join(sorted(NOTES))


@server.resource("notes://note/{name}", name="note", mime_type="text/plain")
def note(name: str) -> str:
    return NOTES[name]  # an unknown name: an error reply, nothing leaked


@server.prompt(description="Ask for a summary of one note", arguments={"name": "the note to summarize"})
def summarize(name: str) -> str:
    return f"Summarize this note in one line: {NOTES.get(name, '')}"


if __name__ == "__main__":
    run_mcp_stdio(server)
