"""Pipelines: a static DAG of named nodes (``Pipeline``, ``Node``) and its runs
(``PipelineRun``) on a Controller.

A run is ordinary controller tasks tagged with the run id. The controller does the
per-task work: dependencies wait BLOCKED (holding no slot), each node's ``JoinMode`` is
checked when an upstream settles, ``when=`` is evaluated at release, upstream results
are injected before release. This module adds what belongs to the run as a whole:

* validation before any task exists (unknown dependency, cycle, unknown mode, bad
  ``when``/``join``/arguments) — an error creates nothing;
* the run-level ``AggregationPolicy``: FAIL_FAST holds the run the moment a task
  fails (under the controller lock, so nothing of the run starts afterwards) and
  cancels whatever has not started; ALL_SETTLED lets every branch settle; ``quorum(n)``
  succeeds when at least n nodes succeeded. CANCELLED is a result, never a trigger;
* fan-out (``map``), created once the items are known, with ``max_parallel`` as a
  controller tag limit;
* run-level pause / resume / stop, cascading to every non-terminal task;
* compensation (rollback) of succeeded nodes in reverse order of success;
* node outputs persisted per node (pluggable serializer, pickle by default) so that
  ``submit(ctl, resume_from=run_id)`` re-runs only what did not succeed — also from a
  new controller on the same store after a kernel crash;
* ``PipelineRunStatusChanged`` events, a RunRecord in the store, ``summary()`` and
  ``to_frame()``.

The package's rooms: ``_pipeline`` (definition and validation), ``_node``, ``_run`` (a run
and its reactions), ``_build`` (creating its tasks), ``_bodies`` (the callables those tasks
run), ``_record`` (RunRecord, manifest, summary, frame), ``_resume``, ``_rollback``,
``_serializer`` and ``_status``.
"""

from chongming_nb.control.pipeline._node import Node
from chongming_nb.control.pipeline._pipeline import Pipeline
from chongming_nb.control.pipeline._run import PipelineRun
from chongming_nb.control.pipeline._serializer import PickleSerializer, Serializer
from chongming_nb.control.pipeline._status import PipelineRunStatus

__all__ = [
    "Node",
    "PickleSerializer",
    "Pipeline",
    "PipelineRun",
    "PipelineRunStatus",
    "Serializer",
]
