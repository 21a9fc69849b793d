"""The kernel runtime: cancellation tokens, task contexts, heartbeats, timeout judgements,
output capture and the executors that run task code."""
