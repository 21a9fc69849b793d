"""The pure domain core: states, the transition table, models, policies, errors,
event types, the DAG graph and the state machine.

Nothing here performs I/O, starts threads or reads a clock: time is passed in by the
caller (see :class:`chongming_nb.core.clock.Clock`). An import contract in the test
command keeps it that way.
"""
