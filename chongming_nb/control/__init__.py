"""The control layer: the Controller, task specs and handles, the event bus, pipelines."""
