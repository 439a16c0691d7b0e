"""How git runs in a workspace: the commands the gateway builds (hardened configuration, the
network step's credential), and the repository bookkeeping settled when their streams end."""
