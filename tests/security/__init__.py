"""The security suite: each module attacks one property of the product through its public
surfaces (REST, MCP, a command inside a workspace) with real processes."""
