"""The suite's case marks besides the tiers (tiers.py): a case about one launch of the trace.

``@each_launch("record V2")`` parametrizes a case over every launch index of its stream (from the
launch table) and marks it ``palw_launch``: when it runs, its reports carry that launch
(session.launch_of), and the certificate's launch map reads it from there. Adding a family of
launch cases is this one decorator. The launch table loads when a family is made or read, not
when the plugin registers the mark."""

from __future__ import annotations

import pytest

LAUNCH_MARK = "palw_launch"
STREAMS = ("v2", "v1")  # v2: every launch in order; v1: the MMVQ launches


def stream_indices(stream: str) -> range:
    """The launch indices of a stream, from the launch table."""
    from pytest_palw.fixtures.oracles.launch_table import V1_INDICES, V2_INDICES

    return {"v2": V2_INDICES, "v1": V1_INDICES}[stream]


def launch_family(mark) -> tuple[str, str]:
    """(label, stream) of a ``palw_launch`` mark; ValueError naming the fix when it is malformed."""
    label = mark.args[0] if len(mark.args) == 1 else None
    stream = mark.kwargs.get("stream", "v2")
    if not isinstance(label, str) or not label or stream not in STREAMS or set(mark.kwargs) - {"stream"}:
        raise ValueError(f"palw_launch{mark.args}{mark.kwargs or ''} is not (label, stream=v1|v2): mark launch "
                         "cases with marks.each_launch(label, stream=...)")
    return label, stream


def each_launch(label: str, stream: str = "v2"):
    """Parametrize ``index`` over the stream's launches; ``label`` names the family on the launch map."""
    parametrize = pytest.mark.parametrize("index", stream_indices(stream))
    mark = getattr(pytest.mark, LAUNCH_MARK)(label, stream=stream)
    return lambda function: mark(parametrize(function))
