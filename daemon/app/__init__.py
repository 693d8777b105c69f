"""The composition root: builds the daemon from its settings, starts its parts in order and stops
them in reverse (policy engine, sandbox, sessions, scheduler, gRPC server)."""
