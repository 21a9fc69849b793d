"""Test helpers shipped with the package, so users' tests can use them too."""

from chongming_nb.testing.clock import FakeClock

__all__ = ["FakeClock"]
