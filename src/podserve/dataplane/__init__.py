"""The transport-free data plane that REST and gRPC both call."""
