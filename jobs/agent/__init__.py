"""The agent interface: `tracelake mcp`, an MCP server over the warehouse (bounded, read-only tools)."""
