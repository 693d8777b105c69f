"""The gRPC edge: protobuf conversion, the servicer, error-to-status mapping."""
