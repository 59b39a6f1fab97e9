"""Validated configuration: server settings, per-model config and the ModelService spec."""
