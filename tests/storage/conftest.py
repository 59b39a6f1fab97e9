from tests.storage.support import http_server

__all__ = ["http_server"]
