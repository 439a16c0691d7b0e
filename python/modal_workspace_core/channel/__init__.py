"""The gateway's side of the agent channel: the client that multiplexes one workspace's requests
and streams, its transports (unix socket, subprocess pipes), and the reads of durable logs."""
