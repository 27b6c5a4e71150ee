"""The MCP server: wrenmem as tools for agents (``wrenmem mcp``)."""
