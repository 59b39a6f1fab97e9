"""How grpc.aio serves `inference.GRPCInferenceService`: one handler per method of the
service, made from its descriptor, and where each request message is parsed.

Not the generated `add_GRPCInferenceServiceServicer_to_server`, because it has grpc.aio
parse every request itself, outside the servicer and its error mapping: a message that
is not valid protobuf ended the call UNKNOWN with "Unexpected <class
'google.protobuf.message.DecodeError'>", logged a traceback at ERROR, and on
ModelStreamInfer ended the whole stream, leaving the stream's later requests unanswered.

So here grpc.aio hands over each message's bytes. ModelInfer and ModelStreamInfer parse
them in the servicer (`parse_infer_request`, from `server/grpc/service.py` and
`stream.py`): the unary call ends INVALID_ARGUMENT, a stream answers that one message
with an in-band `error_message` and goes on, and a message over the decoding's inline
size is parsed on the decoding thread, as a big REST body is decoded (protobuf's parser
holds the GIL, so the loop still waits out the parse itself: `service.py` has numbers).
The other methods' messages are small and parsed here, on the loop, by `_parsing`, which
ends the call INVALID_ARGUMENT the same way. Each is at most `CONTROL_BODY_BYTES` (64
KiB, the bound of REST's control bodies, server/http.py), checked on its length before
it is parsed: they are a few dozen bytes, and under the request limit alone a
RepositoryModelLoad of 30 M empty parameter entries (60 MB) held the loop 3 s in
protobuf's parser, a ServerLive with 60 MB of unknown fields 0.5 s. Past it the call
ends RESOURCE_EXHAUSTED, the code of a message over gRPC's own receive limit, naming the
limit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from podserve.core.errors import InvalidInput, PayloadTooLarge
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.context import Context
from podserve.server.grpc.status import abort_with_status
from podserve.server.http import CONTROL_BODY_BYTES

M = TypeVar("M", bound=Message)

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]

# The methods whose servicer handler takes the message's bytes and parses them itself.
PARSED_BY_SERVICER = frozenset({"ModelInfer", "ModelStreamInfer"})


def parse_message(message_class: type[M], data: bytes) -> M:
    """`data` parsed as a `message_class`; InvalidInput when protobuf cannot parse it."""
    try:
        return message_class.FromString(data)
    except DecodeError:
        # DecodeError's own text says no more than this ("Error parsing message with
        # type ..."), and never where in the bytes the problem is.
        name = message_class.DESCRIPTOR.full_name
        raise InvalidInput(
            f"the request message is not a valid {name}: protobuf cannot parse its "
            f"{len(data)} bytes"
        ) from None


def parse_infer_request(data: bytes) -> pb.ModelInferRequest:
    return parse_message(pb.ModelInferRequest, data)


def add_inference_service(servicer: object, server: grpc.aio.Server) -> None:
    """Serve `servicer`'s methods as `inference.GRPCInferenceService` on `server`."""
    handlers = {method.name: _handler(servicer, method) for method in SERVICE.methods}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    # grpcio's faster path for methods known at start (what the generated code does too)
    server.add_registered_method_handlers(SERVICE.full_name, handlers)


def _handler(servicer: object, method: MethodDescriptor) -> grpc.RpcMethodHandler:
    behaviour = getattr(servicer, method.name)
    serialize = GetMessageClass(method.output_type).SerializeToString
    if method.name == "ModelStreamInfer":
        return grpc.stream_stream_rpc_method_handler(
            behaviour, request_deserializer=None, response_serializer=serialize
        )
    if method.client_streaming or method.server_streaming:
        raise TypeError(f"{method.name}: a streaming method this module cannot serve")
    if method.name not in PARSED_BY_SERVICER:
        behaviour = _parsing(behaviour, GetMessageClass(method.input_type), method.name)
    return grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=None, response_serializer=serialize
    )


def _parsing(
    behaviour: Callable[[Any, Context], Awaitable[Any]], message_class: type[Message], name: str
) -> Callable[[bytes, Context], Awaitable[Any]]:
    """`behaviour` called with the parsed message; INVALID_ARGUMENT when it cannot be
    parsed, RESOURCE_EXHAUSTED when it is over `CONTROL_BODY_BYTES`."""

    async def handle(data: bytes, context: Context) -> Any:
        try:
            if len(data) > CONTROL_BODY_BYTES:
                raise PayloadTooLarge(
                    f"a {name} request message is at most {CONTROL_BODY_BYTES} bytes, "
                    f"got {len(data)}"
                )
            request = parse_message(message_class, data)
        except (InvalidInput, PayloadTooLarge) as exc:
            await abort_with_status(context, exc, name, None)
        return await behaviour(request, context)

    return handle
