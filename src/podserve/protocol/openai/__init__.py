"""OpenAI-compatible wire schemas and codecs (no HTTP)."""

from podserve.protocol.openai.embeddings import (
    EmbeddingRequest,
    decode_embedding_request,
    encode_embedding_response,
    split_embedding_request,
)
from podserve.protocol.openai.models import encode_model_list

__all__ = [
    "EmbeddingRequest",
    "decode_embedding_request",
    "encode_embedding_response",
    "encode_model_list",
    "split_embedding_request",
]
