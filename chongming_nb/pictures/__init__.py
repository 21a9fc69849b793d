"""Pictures of the work, drawn from the history frames: the attempt timeline.

Pure: a picture is built from DataFrames the sources already give and rendered to SVG
(no dependency) or to a matplotlib Figure (``matplotlib``, an optional extra).
"""

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
    "HistorySource",
    "Mark",
    "Timeline",
    "build",
    "from_source",
    "human_seconds",
    "plot",
    "to_svg",
]
