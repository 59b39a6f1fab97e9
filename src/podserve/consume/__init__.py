"""`podserve consume`: inference requests from a Redis stream, results to another."""
