"""The emulator's answers: the API server's errors (``Status`` bodies) and objects."""

from __future__ import annotations

from typing import Any

import httpx2

Json = dict[str, Any]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


REASONS = {404: "NotFound", 409: "Conflict", 422: "Invalid", 500: "InternalError",
            503: "ServiceUnavailable", 429: "TooManyRequests"}


def status(code: int, reason: str, message: str) -> httpx2.Response:
    return httpx2.Response(code, json={"apiVersion": "v1", "kind": "Status", "metadata": {},
                                       "status": "Failure", "message": message,
                                       "reason": reason, "code": code})


def ok(obj: Json, code: int = 200) -> httpx2.Response:
    return httpx2.Response(code, json=obj)


def listing(kind: str, items: list[Json], rv: int) -> Json:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": str(rv)},
            "items": items}


def selector(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for term in filter(None, text.split(",")):
        k, sep, v = term.partition("=")
        if not sep or k.endswith("!"):
            raise ApiError(400, "BadRequest", f"the emulator supports k=v selectors: {term!r}")
        out[k] = v.lstrip("=")
    return out
