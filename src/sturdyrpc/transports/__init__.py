"""Transports: thin I/O layers that move frames between the outside world and the core."""
