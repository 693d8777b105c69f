"""The `tooljail` command's client side: Anthropic JSON on stdin, MCP over stdio, and the commands
that list tools, call them, show the status and answer approvals.

They talk to a running daemon through the Python client (`tooljail`, clients/python), like any
other program; they hold no state of the daemon and can run on another machine than the daemon.
"""
