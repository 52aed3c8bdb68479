"""An MCP server of the MCP Python SDK's own (`mcp` on PyPI), unmodified, over streamable HTTP
on 127.0.0.1:PORT at /mcp, with no authentication of its own: tokengate's proxy in front of it
is what checks tokens. Its one tool adds two numbers and says who called, from the identity
header the proxy set.

Usage: python3 mcp_server.py PORT
"""

import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("tokengate-test")


@server.tool()
def add(a: int, b: int, ctx: Context) -> str:
    """Adds two numbers."""
    request = ctx.request_context.request
    caller = request.headers.get("x-auth-username", "?") if request is not None else "?"
    return f"{a + b} for {caller}"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
