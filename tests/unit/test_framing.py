"""Framing, sans I/O: newline-delimited JSON and Content-Length."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from support.process import DEMO_CMD, wait_until

from sturdyrpc.framing import (
    BadHeader,
    ContentLengthFramer,
    FrameTooLarge,
    LineFramer,
    encode_content_length,
    encode_line,
)


def feed_all(framer: LineFramer | ContentLengthFramer, chunks: list[bytes]) -> list[object]:
    out: list[object] = []
    for c in chunks:
        out.extend(framer.feed(c))
    return out


# ------------------------------------------------------------------ line framing


def test_whole_lines_in_one_read() -> None:
    assert LineFramer(100).feed(b'{"a":1}\n{"b":2}\n') == [b'{"a":1}', b'{"b":2}']


def test_split_reads_are_assembled() -> None:
    f = LineFramer(100)
    assert f.feed(b'{"a"') == []
    assert f.feed(b":") == []
    assert f.buffered == 5
    assert f.feed(b'1}\n{"b"') == [b'{"a":1}']
    assert f.feed(b":2}\n") == [b'{"b":2}']
    assert f.buffered == 0


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_byte_by_byte_any_chunking(size: int) -> None:
    stream = b'{"a":1}\r\n\n  \n{"b":[1,2]}\n\r\n{"c":3}\n'
    chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
    assert feed_all(LineFramer(100), chunks) == [b'{"a":1}', b'{"b":[1,2]}', b'{"c":3}']


def test_property_line_framer_any_chunking_is_the_lines() -> None:
    # Whatever the reads (whole reads of many lines take the framer's C path, others the loop):
    # the frames are the non-blank lines, CR stripped at the end, over-long ones reported.
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = st.sampled_from([b'{"a":1}', b"[1]", b"junk", b" ", b"\t", b"\r", b"\n", b"\n", b"\n", b'{"b":"x\ry"}', b"z" * 30, b"["])

    @settings(max_examples=500)
    @given(st.lists(pieces, max_size=30), st.lists(st.integers(1, 40), max_size=30))
    def run(parts: list[bytes], cuts: list[int]) -> None:
        stream = b"".join(parts)
        chunks, at = [], 0
        for c in cuts:
            chunks.append(stream[at : at + c])
            at += c
        chunks.append(stream[at:])
        expected: list[object] = []
        *lines, unfinished = stream.split(b"\n")
        for line in lines:
            if len(line) > 32:
                expected.append("too large")
            elif line.strip(b" \t\r\n"):
                expected.append(line[:-1] if line.endswith(b"\r") else line)
        if len(unfinished) > 32:
            expected.append("too large")  # reported before its end comes, and not kept
        got = [x if isinstance(x, bytes) else "too large" for x in feed_all(LineFramer(32), [c for c in chunks if c])]
        assert got == expected

    run()


def test_crlf_and_blank_lines() -> None:
    f = LineFramer(100)
    assert f.feed(b'{"a":1}\r\n\r\n\n \t \n{"b":2}\r\n') == [b'{"a":1}', b'{"b":2}']


def test_no_frame_without_newline() -> None:
    f = LineFramer(100)
    assert f.feed(b'{"a":1}') == []
    assert f.feed(b"\n") == [b'{"a":1}']


def _oversize_then_resync(chunks: list[bytes]) -> None:
    f = LineFramer(10)
    out = feed_all(f, chunks)
    too_large = [e for e in out if isinstance(e, FrameTooLarge)]
    assert len(too_large) == 1, out
    assert too_large[0].limit == 10
    assert [e for e in out if isinstance(e, bytes)] == [b"ok", b"fine"]
    assert out.index(too_large[0]) < out.index(b"fine")
    assert f.buffered <= 10


def test_oversize_in_one_read() -> None:
    _oversize_then_resync([b"ok\n" + b"x" * 50 + b"\nfine\n"])


def test_oversize_unterminated_then_rest() -> None:
    _oversize_then_resync([b"ok\n", b"x" * 50, b"y" * 50, b"z\nfine\n"])


def test_oversize_growing_slowly_reported_once_and_not_buffered() -> None:
    f = LineFramer(10)
    out: list[object] = []
    for _ in range(1000):
        out.extend(f.feed(b"xxx"))
        assert f.buffered <= 10
    out.extend(f.feed(b"\nfine\n"))
    assert [type(e).__name__ for e in out] == ["FrameTooLarge", "bytes"]
    assert out[-1] == b"fine"


def test_exactly_at_limit_is_accepted() -> None:
    assert LineFramer(5).feed(b"12345\n") == [b"12345"]
    assert [type(e) for e in LineFramer(5).feed(b"123456\n")] == [FrameTooLarge]


def test_encode_line() -> None:
    assert encode_line(b'{"a":1}') == b'{"a":1}\n'


# ------------------------------------------------------------ Content-Length framing


def test_content_length_round_trip_and_split_reads() -> None:
    stream = encode_content_length(b'{"a":1}') + encode_content_length(b'{"b":"\xc3\xa9"}')
    for size in (1, 3, len(stream)):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert feed_all(ContentLengthFramer(100), chunks) == [b'{"a":1}', b'{"b":"\xc3\xa9"}']


def test_content_length_other_headers_and_case() -> None:
    f = ContentLengthFramer(100)
    data = b"content-length: 7\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{\"a\":1}"
    assert f.feed(data) == [b'{"a":1}']


def test_content_length_body_with_newlines_is_one_frame() -> None:
    body = b'{\n"a":\n1\n}'
    assert ContentLengthFramer(100).feed(encode_content_length(body)) == [body]


@pytest.mark.parametrize(
    "header",
    [
        b"Content-Length: abc\r\n\r\n",
        b"Content-Length: -5\r\n\r\n",
        b"Content-Type: x\r\n\r\n",
        b"garbage line\r\n\r\n",
    ],
)
def test_bad_header_reported_and_next_frame_read(header: bytes) -> None:
    f = ContentLengthFramer(100)
    out = f.feed(header + encode_content_length(b'{"ok":1}'))
    assert len(out) == 2 and isinstance(out[0], BadHeader), out
    assert out[0].reason
    assert out[1] == b'{"ok":1}'


def test_bad_header_does_not_replay_previous_message() -> None:
    # python-lsp-jsonrpc dispatched the previous body again after a bad header.
    f = ContentLengthFramer(100)
    out = f.feed(encode_content_length(b'{"id":1}') + b"Content-Length: zz\r\n\r\n" + encode_content_length(b'{"id":2}'))
    assert [e for e in out if isinstance(e, bytes)] == [b'{"id":1}', b'{"id":2}']
    assert sum(isinstance(e, BadHeader) for e in out) == 1


def test_header_block_too_long_is_bounded() -> None:
    f = ContentLengthFramer(100, max_header=64)
    out = f.feed(b"X-Junk: " + b"j" * 500)
    assert any(isinstance(e, BadHeader) for e in out)
    assert f.buffered <= 64
    out = f.feed(b"\r\n\r\n" + encode_content_length(b'{"ok":1}'))
    assert out[-1] == b'{"ok":1}'


def test_oversize_body_skipped_without_buffering() -> None:
    f = ContentLengthFramer(10)
    out = f.feed(b"Content-Length: 1000\r\n\r\n" + b"x" * 400)
    assert [type(e) for e in out] == [FrameTooLarge]
    assert f.buffered == 0
    out = f.feed(b"x" * 600 + encode_content_length(b'{"ok":1}'))
    assert out == [b'{"ok":1}']


def test_oversize_body_in_small_chunks() -> None:
    f = ContentLengthFramer(10)
    stream = b"Content-Length: 100\r\n\r\n" + b"y" * 100 + encode_content_length(b"[1]")
    out = feed_all(f, [stream[i : i + 7] for i in range(0, len(stream), 7)])
    assert [type(e) for e in out] == [FrameTooLarge, bytes]
    assert out[-1] == b"[1]"


def test_encode_content_length_counts_bytes_not_chars() -> None:
    assert encode_content_length('"é"'.encode()) == b'Content-Length: 4\r\n\r\n"\xc3\xa9"'


def test_junk_without_header_end_reported_once_and_bounded() -> None:
    f = ContentLengthFramer(1000, max_header=1024)
    out: list[object] = []
    for _ in range(20):
        out.extend(f.feed(b"j" * 4096))
        assert f.buffered <= 1024
    out.extend(f.feed(b"\r\n\r\n" + encode_content_length(b"[1]")))
    assert [type(e) for e in out] == [BadHeader, bytes]
    assert out[-1] == b"[1]"
    # A later bad header is reported again.
    assert [type(e) for e in f.feed(b"Content-Length: q\r\n\r\n")] == [BadHeader]


@pytest.mark.parametrize(
    "header",
    [
        b"Content-Length: 8\r\nContent-Length: 31\r\n\r\n",
        b"Content-Length: 8\r\ncontent-length: 8\r\n\r\n",
        b"Content-Length: 31\r\nContent-Type: x\r\nCONTENT-LENGTH: 8\r\n\r\n",
    ],
)
def test_two_content_length_headers_are_a_bad_header_and_the_next_frame_is_read(header: bytes) -> None:
    stream = header + b'{"id":1}' + encode_content_length(b'{"id":2}') + encode_content_length(b'{"id":3}')
    for size in (1, 5, len(stream)):
        out = feed_all(ContentLengthFramer(100), [stream[i : i + size] for i in range(0, len(stream), size)])
        assert [type(e) for e in out] == [BadHeader, bytes, bytes], (size, out)
        assert isinstance(out[0], BadHeader) and "more than one Content-Length" in out[0].reason
        assert out[1:] == [b'{"id":2}', b'{"id":3}']


def test_body_of_a_bad_header_arriving_late_is_not_reported_twice() -> None:
    f = ContentLengthFramer(100)
    out = f.feed(b"Content-Length: x\r\n\r\n" + b'{"id":')
    out += f.feed(b"1}" + encode_content_length(b'{"id":2}'))
    assert [type(e) for e in out] == [BadHeader, bytes]
    assert out[-1] == b'{"id":2}'


def test_two_content_length_headers_over_stdio_get_parse_error_and_the_stream_resynchronises(spawn: Any) -> None:
    p = spawn([*DEMO_CMD, "--framing", "content-length"])
    first = b'{"jsonrpc":"2.0","method":"echo","params":["swallowed?"],"id":1}'
    second = b'{"jsonrpc":"2.0","method":"echo","params":["read"],"id":2}'
    # Before: the second header won, and its length swallowed the next frame.
    p.send(b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(first), len(first) + 30) + first + encode_content_length(second))
    assert wait_until(lambda: bytes(p.raw_stdout).count(b"Content-Length") >= 2, 10), bytes(p.stderr)
    replies = []
    raw = bytes(p.raw_stdout)
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        n = int(head.split(b":", 1)[1])
        replies.append(msgspec.json.decode(rest[:n]))
        raw = rest[n:]
    assert replies[0]["error"]["code"] == -32700 and replies[0]["id"] is None
    assert "more than one Content-Length" in replies[0]["error"]["data"]["reason"]
    assert replies[1] == {"jsonrpc": "2.0", "result": "read", "id": 2}
    p.close_stdin()
    assert p.wait(10) == 0
