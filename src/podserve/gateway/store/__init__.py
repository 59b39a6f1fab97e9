"""Gateway state: the `Store` protocol and its SQLite and Redis + PostgreSQL implementations
(imported by name, so the Redis and PostgreSQL clients load only when configured)."""
