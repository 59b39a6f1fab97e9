"""podserve: a model server and the tooling around it, built for Kubernetes."""

__version__ = "0.1.0"
__all__ = ["__version__"]
