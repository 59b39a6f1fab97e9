"""Leaf package: errors, clock, ids and tensor types. Imports nothing from podserve."""
