"""Open Inference Protocol v2 REST codec, with the binary tensor data extension."""

from podserve.protocol.v2.decode import (
    INFERENCE_HEADER_CONTENT_LENGTH,
    decode_infer_request,
    decode_repository_index_request,
    parse_header_length,
)
from podserve.protocol.v2.encode import encode_error, encode_infer_response
from podserve.protocol.v2.metadata import (
    ModelMetadataLike,
    RepositoryEntryLike,
    ServerMetadataLike,
    encode_model_metadata,
    encode_repository_index,
    encode_server_metadata,
)
from podserve.protocol.v2.output_format import binary_output_names

__all__ = [
    "INFERENCE_HEADER_CONTENT_LENGTH",
    "ModelMetadataLike",
    "RepositoryEntryLike",
    "ServerMetadataLike",
    "binary_output_names",
    "decode_infer_request",
    "decode_repository_index_request",
    "encode_error",
    "encode_infer_response",
    "encode_model_metadata",
    "encode_repository_index",
    "encode_server_metadata",
    "parse_header_length",
]
