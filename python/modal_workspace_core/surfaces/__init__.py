"""Every way a client reaches the operations: REST (`rest/`, for GPT Actions), MCP, the CLI, the
Python API, and the HTTP serving they share; `limits` declares what each surface allows."""
