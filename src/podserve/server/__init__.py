"""The edges: the ASGI app (REST), the gRPC service, and the process runner. The only
package that speaks HTTP or gRPC."""
