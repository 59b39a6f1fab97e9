"""Bounded admission for proxied requests: how many the gateway holds at once, and how
many request-body bytes they hold between them. Past either bound a request is refused
at once (503 + Retry-After) before its body is read, so overload costs a header parse,
not memory: without a bound, a burst of clients each sending a body at `maxBodyBytes`
(16 MiB by default) grew the gateway's memory with every connection.

Envoy bounds the same two things for the same reason: a cluster's circuit breaker caps
requests in flight (`max_requests`, 1024 by default) and its overload manager refuses
work past a heap threshold (envoy/api/envoy/config/cluster/v3/circuit_breaker.proto,
docs: intro/arch_overview/operations/overload_manager). The gateway's own routes
(`/healthz`, `/ready`, `/metrics`) are never counted, so probes answer under overload.
A request counts until its response is sent (or abandoned): a slow reader's response is
still held by the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass

from podserve.gateway.errors import Overloaded


@dataclass(slots=True)
class Ticket:
    """One admitted request: the body bytes counted for it."""

    body_bytes: int
    left: bool = False


class InFlight:
    def __init__(self, max_requests: int, max_body_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_body_bytes = max_body_bytes
        self.requests = 0
        self.body_bytes = 0

    def enter(self, declared_body_bytes: int) -> Ticket:
        """Count a request and the body it declares (Content-Length), or refuse it."""
        if self.requests >= self.max_requests:
            raise Overloaded(
                f"the gateway is at its {self.max_requests} requests in flight", retry_after_s=1
            )
        self._hold(declared_body_bytes)
        self.requests += 1
        return Ticket(declared_body_bytes)

    def grow(self, ticket: Ticket, body_bytes: int) -> None:
        """The body turned out larger than declared (sent without Content-Length): hold
        the rest too, or refuse the request."""
        if body_bytes > ticket.body_bytes:
            self._hold(body_bytes - ticket.body_bytes)
            ticket.body_bytes = body_bytes

    def leave(self, ticket: Ticket) -> None:
        """The request is over (once per ticket: a second call changes nothing)."""
        if ticket.left:
            return
        ticket.left = True
        self.requests -= 1
        self.body_bytes -= ticket.body_bytes

    def _hold(self, body_bytes: int) -> None:
        if self.body_bytes + body_bytes > self.max_body_bytes:
            raise Overloaded(
                f"the gateway holds {self.body_bytes} bytes of request bodies in flight "
                f"(limit {self.max_body_bytes})",
                retry_after_s=1,
            )
        self.body_bytes += body_bytes
