"""Pictures of the work: the attempt timeline (from the history frames) and the
pipeline graph (from a pipeline's nodes and a run's tasks).

Pure: a picture is built from DataFrames the sources already give and rendered to SVG
(no dependency) or to a matplotlib Figure (``matplotlib``, an optional extra).
"""

from chongming_nb.pictures.graph import GraphNode, GraphPicture, layout, nodes_of
from chongming_nb.pictures.timeline import (
    Bar,
    HistorySource,
    Mark,
    Timeline,
    build,
    from_source,
    human_seconds,
    plot,
    to_svg,
)

__all__ = [
    "Bar",
    "GraphNode",
    "GraphPicture",
    "HistorySource",
    "Mark",
    "Timeline",
    "build",
    "from_source",
    "human_seconds",
    "layout",
    "nodes_of",
    "plot",
    "to_svg",
]
