"""Diagnostics of real runs: training logs and out-of-memory messages."""
