#!/bin/sh
# GIT_ASKPASS of the network step of an authenticated clone or fetch (run by the agent with a
# fixed environment). The token is neither here nor in any process's environment: the agent
# keeps it and answers the prompt over MWC_ASKPASS_SOCKET, only to a process that descends from
# the step it was given for, and only git's own prompts for the configured GitHub base (the user
# name x-access-token, then the token). Anything else gets nothing and exit 1.
[ "$#" -eq 1 ] && [ -n "${MWC_AGENT_PYTHON-}" ] || exit 1
exec "$MWC_AGENT_PYTHON" -I -m modal_workspace_core.agent askpass "$1"
