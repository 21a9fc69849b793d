"""Benchmarks: this project beside the peers a user would pick instead, measured in the
same run on the same machine. Run them with ``python -m benchmarks.run``."""
