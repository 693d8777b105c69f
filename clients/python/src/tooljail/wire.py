"""The generated protobuf messages and gRPC stubs of tooljail.v1, for callers that need the wire
itself (every field, ExecuteTurn, a channel of their own). `Client` covers the common calls.

    from tooljail.wire import pb, pb_grpc

    stub = pb_grpc.ExecutorStub(Connection.resolve().channel())
"""

from tooljail._proto.tooljail.v1 import executor_pb2 as pb
from tooljail._proto.tooljail.v1 import executor_pb2_grpc as pb_grpc

__all__ = ["pb", "pb_grpc"]
