"""Reading a response body with its size counted while it is read, decompression included."""

from __future__ import annotations

import zlib
from typing import Any

import httpx

ACCEPTED_ENCODINGS = "gzip, deflate"


class ResponseTooLarge(Exception):
    pass


class UnsupportedEncoding(Exception):
    pass


def _too_large(limit: int, what: str = "response body") -> ResponseTooLarge:
    return ResponseTooLarge(
        f"{what} is over the limit of {limit} bytes ([stdlib.http] max_response_bytes)"
    )


class _Inflater:
    """gzip / deflate, each ``decompress`` call bounded by the output still allowed."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._gzip = encoding in ("gzip", "x-gzip")
        self._obj = self._new()
        self._first = True
        self._head = b""  # deflate: bytes held until the 2-byte zlib header can be checked

    def _new(self) -> Any:
        return zlib.decompressobj(zlib.MAX_WBITS | 16 if self._gzip else zlib.MAX_WBITS)

    def feed(self, data: bytes, allowed: int) -> bytes:
        """Inflate ``data``; raises OverflowError once more than ``allowed`` bytes come out."""
        out: list[bytes] = []
        size = 0
        pending = data
        if self._first and not self._gzip:
            # Whether the body is zlib-wrapped or raw deflate shows in its first two bytes,
            # which may come in separate network chunks.
            self._head += data
            if len(self._head) < 2:
                return b""
            pending, self._head = self._head, b""
        while pending:
            try:
                chunk = self._obj.decompress(pending, allowed - size + 1)
            except zlib.error:
                if self._first and not self._gzip:
                    # Some servers send raw deflate without the zlib header (as httpx allows).
                    self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._first = False
                    continue
                raise
            self._first = False
            size += len(chunk)
            if size > allowed:
                raise OverflowError
            out.append(chunk)
            if self._obj.unconsumed_tail:
                pending = self._obj.unconsumed_tail
            elif self._obj.eof and self._obj.unused_data and self._gzip:
                pending = self._obj.unused_data  # the next member of a multi-member gzip
                self._obj = self._new()
            else:
                pending = b""
        return b"".join(out)


def _decoder(response: httpx.Response) -> _Inflater | None:
    header = response.headers.get("content-encoding", "")
    encodings = [e.strip().lower() for e in header.split(",") if e.strip()]
    encodings = [e for e in encodings if e != "identity"]
    if not encodings:
        return None
    if len(encodings) == 1 and encodings[0] in ("gzip", "x-gzip", "deflate"):
        return _Inflater(encodings[0])
    raise UnsupportedEncoding(
        f"the response uses Content-Encoding '{header}'; the http actions only decode "
        f"{ACCEPTED_ENCODINGS} (bounded while inflated)"
    )


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    """The decoded body, refusing more than ``limit`` bytes of it without reading the rest."""
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ResponseTooLarge(
            f"response body is {declared} bytes, over the limit of {limit} bytes "
            "([stdlib.http] max_response_bytes)"
        )
    decoder = _decoder(response)
    chunks: list[bytes] = []
    size = 0
    async for raw in response.aiter_raw():
        if decoder is None:
            chunk = raw
        else:
            try:
                chunk = decoder.feed(raw, limit - size)
            except OverflowError:
                raise _too_large(limit, "decompressed response body") from None
            except zlib.error as exc:
                raise UnsupportedEncoding(
                    f"the response body is not valid {decoder.encoding} data: {exc}"
                ) from None
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


__all__ = ["ACCEPTED_ENCODINGS", "ResponseTooLarge", "UnsupportedEncoding", "read_capped"]
