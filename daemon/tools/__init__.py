"""The Tool contract, the registry and the built-in tools."""
