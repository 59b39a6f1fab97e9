"""Observability: every Prometheus metric (metrics.py) and structured logging (logging.py)."""
