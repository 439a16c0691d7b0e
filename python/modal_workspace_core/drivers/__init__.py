"""Drivers: how a workspace is created, reached and destroyed on one kind of infrastructure.

`base` holds the contract; `local` runs workspaces on this machine.
"""
