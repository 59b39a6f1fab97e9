"""Wire schemas and codecs, transport-free: bytes in, core messages out, and back.
Imports only podserve.core (plus numpy and orjson); HTTP lives in server/."""
