"""The ``chongming`` command line (see ``chongming_nb.cli.main`` and docs/cli.md)."""
