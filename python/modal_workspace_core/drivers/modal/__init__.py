"""The Modal driver: each workspace a Modal Sandbox running the agent, reached through the
official SDK (`driver`), with the agent channel over the sandbox's exec streams."""
