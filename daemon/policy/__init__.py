"""Policy decisions: the engine interface, OPA as the engine, and the managed OPA process."""
