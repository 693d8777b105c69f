"""tooljail daemon: the gRPC service, Tool contract, registry, pipeline and built-in tools."""

__version__ = "0.1.0"
