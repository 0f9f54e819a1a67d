"""The tests' own SSE frame splitter keeps frames apart wherever a chunk boundary falls."""

from __future__ import annotations

from server_fixtures import _frame, split_sse_frames

STREAM = "id: 505\r\nevent: message\r\ndata: a\r\n\r\nid: 506\r\ndata: b\r\n\r\nid: 507\r\ndata: c\r\n\r\n"


def test_every_chunk_boundary_gives_the_same_frames() -> None:
    for cut in range(len(STREAM) + 1):
        buffer, frames = "", []
        for chunk in (STREAM[:cut], STREAM[cut:]):
            done, buffer = split_sse_frames(buffer + chunk)
            frames.extend(done)
        assert [_frame(f).id for f in frames] == ["505", "506", "507"], cut
        assert [_frame(f).data for f in frames] == ["a", "b", "c"], cut
        assert buffer == ""
