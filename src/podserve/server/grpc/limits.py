"""What the gRPC edge bounds before a handler runs: connections, streams, calls, and
compressed messages; grpc core enforces each, from the server's channel arguments.

Why each, and what a client sees (measured against a real pod, /tmp/probe-grpc):

- Connections, `max_connections` (`grpc.max_allowed_incoming_connections`, grpc core's
  `ConnectionQuota`, src/core/lib/resource_quota/connection_quota.cc, read by
  chttp2_server.cc's listener): unbounded, 20,000 idle HTTP/2 connections used up the
  process's descriptors and the REST edge's /healthz was reset. Past the cap grpc core
  closes a new connection as soon as it accepts it, holding no descriptor; the client
  sees UNAVAILABLE and reconnects with its backoff. The cap is held under a quarter of
  the soft RLIMIT_NOFILE, as shared-memory regions are (shm/regions.py), so REST
  connections and model files keep the rest.
- Idle connections, `idle_timeout_s` (`grpc.max_connection_idle_ms`, gRFC A9 "Server-side
  Connection Management", https://github.com/grpc/proposal/blob/master/A9-server-side-conn-mgt.md):
  a connection with no RPC open for that long gets GOAWAY and is closed; a client
  channel goes IDLE and reconnects on its next call, transparently. Without it a
  connection that had ACKed the server's SETTINGS stayed open forever (REST closes an
  idle keep-alive connection after `keep_alive_timeout_s`; same default, 75 s).
- Handshakes, `handshake_timeout_s` (`grpc.server_handshake_timeout_ms`, grpc core's
  default 120 s): a TCP connection that sends nothing is closed after it, as REST closes
  one that sends no complete headers after `header_timeout_s` (same value).
- Streams per connection, `max_concurrent_streams` (`grpc.max_concurrent_streams`, the
  HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS the server advertises; RFC 9113 §6.5.2 asks
  for at least 100): a client past it waits for a stream at its side.
- Calls at once, `max_concurrent_rpcs` (grpc.aio.server's `maximum_concurrent_rpcs`):
  past it grpc.aio answers RESOURCE_EXHAUSTED "Concurrent RPC limit exceeded!" itself,
  before any handler runs (src/python/grpcio/grpc/_cython/_cygrpc/aio/server.pyx.pxi).
  An open ModelStreamInfer stream is one call however many requests it carries.
- Compressed requests (`grpc.compression_enabled_algorithms_bitset` = identity only, and
  `grpc.per_message_decompression` = 0): a gzip message of 49 KB on the wire became 50
  MB of protobuf, held /healthz 1.1-2.5 s and the pod's RSS +1.1 GB per call. grpc
  core refuses a call whose `grpc-encoding` names a disabled algorithm, UNIMPLEMENTED
  "Compression algorithm 'gzip' is disabled." (grpc core's call.cc, which logs the line
  on stderr), from its headers, never inflating its message (the same probe: /healthz
  9 ms, RSS unchanged), and advertises `grpc-accept-encoding: identity`; REST refuses
  any Content-Encoding with 415 the same way. Decompression is off as well (the
  compression filter then hands a compressed message over as it came,
  src/core/ext/filters/http/message_compress/compression_filter.cc `DecompressMessage`),
  so a message flagged compressed without a `grpc-encoding` reaches the handler as the
  bytes that came, never inflated.

Responses are not compressed either (the server's default algorithm is none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podserve.config.settings import ServerSettings
from podserve.core.descriptors import within_descriptor_share

# grpc core's compression algorithm bits (include/grpc/impl/compression_types.h:
# GRPC_COMPRESS_NONE = 0, so its bit is 1 << 0): identity only.
_IDENTITY_ONLY = 1 << 0


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """The gRPC server's bounds (the module's doc); defaults are the settings'."""

    max_connections: int = 4096
    idle_timeout_s: float = 75.0
    handshake_timeout_s: float = 10.0
    max_concurrent_streams: int = 256
    max_concurrent_rpcs: int = 4096

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> GrpcLimits:
        return cls(
            max_connections=settings.grpc_max_connections,
            idle_timeout_s=settings.grpc_idle_timeout_s,
            handshake_timeout_s=settings.header_timeout_s,
            max_concurrent_streams=settings.grpc_max_concurrent_streams,
            max_concurrent_rpcs=settings.grpc_max_concurrent_rpcs,
        )

    def connections(self) -> int:
        """`max_connections`, or a quarter of the soft descriptor limit when lower."""
        return within_descriptor_share(self.max_connections)

    def channel_options(self, max_message_bytes: int) -> list[tuple[str, Any]]:
        """grpc.aio.server's `options` for these bounds and a request limit."""
        return [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
            ("grpc.max_allowed_incoming_connections", self.connections()),
            ("grpc.max_connection_idle_ms", _ms(self.idle_timeout_s)),
            ("grpc.server_handshake_timeout_ms", _ms(self.handshake_timeout_s)),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.compression_enabled_algorithms_bitset", _IDENTITY_ONLY),
            ("grpc.per_message_decompression", 0),
        ]


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
