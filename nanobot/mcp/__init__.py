"""MCP client: servers from tools.mcpServers (nanobot's format) contribute tools named
mcp_<server>_<tool>, under the same approval policy as the built-in tools.

connection.py keeps one server connected (stdio, SSE or streamable HTTP, through the official
`mcp` SDK); tools.py turns its tools into ours; manager.py starts them all in the background.
"""
