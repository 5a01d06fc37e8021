"""The users' files over the API: ``PUT /api/v1/files/{name}`` uploads one (the raw body,
``application/octet-stream``), ``GET /api/v1/files`` lists them (docs/service.md, "Tenants and
isolation"). A template's ``files_in`` names these files.

Each user sees and writes only her own (``<work_root>/<user>/files``, owned by her host
identity; an admin's own too). Names: 1-128 of ``A-Z a-z 0-9 _.+-``, not starting with ``.``,
``+`` or ``-`` (422 naming ``name``); a body over ``tenants.max_file`` bytes is 413 (the HTTP
layer lets an upload pass its usual body limit up to that size), more than
``tenants.max_files`` files 422, more than ``tenants.max_files_bytes`` bytes in all 413; an
upload replaces a file of the same name atomically. ``DELETE /api/v1/files/{name}`` removes one
(204; 404 when there is none of that name).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response

from merkat.service.db import User

UPLOAD_BODY = {
    "requestBody": {"required": True, "content": {"application/octet-stream": {
        "schema": {"type": "string", "format": "binary"}}}}}


def file_routes(manager: Any, current_user: Any, prefix: str) -> APIRouter:
    """The three routes, authenticated by the dependency ``current_user`` (the API's)."""
    from merkat.service.files import FileError, Upload, delete_file, list_files
    from merkat.service.tenants import TenantError

    r = APIRouter(prefix=prefix)
    conf = manager.config.tenants

    def identity(me: User) -> Any:
        try:
            return manager.tenants.identity(me.name)
        except TenantError as exc:
            raise HTTPException(422, str(exc)) from None

    @r.put("/files/{name}", status_code=201, openapi_extra=UPLOAD_BODY)
    async def put(name: str, request: Request,
                  me: User = Depends(current_user)) -> dict[str, Any]:
        """Upload the file ``name`` (the raw body) into your files (replacing one of that
        name): 201 with its name and size. The body is written as it comes, never held whole
        in memory (:class:`~merkat.service.files.Upload`)."""
        from starlette.requests import ClientDisconnect

        ident = identity(me)
        try:
            up = await asyncio.to_thread(Upload, ident, name, conf.max_file, conf.max_files,
                                         conf.max_files_bytes)
        except FileError as exc:
            raise HTTPException(413 if str(exc).startswith("size:") else 422,
                                str(exc)) from None
        except OSError as exc:
            raise HTTPException(422, f"name: cannot write {name!r}: "
                                     f"{exc.strerror or exc}") from None
        try:
            async for chunk in request.stream():
                if chunk:
                    await asyncio.to_thread(up.write, chunk)
            return {"name": name, "size": await asyncio.to_thread(up.commit)}
        except FileError as exc:
            raise HTTPException(413 if str(exc).startswith("size:") else 422,
                                str(exc)) from None
        except ClientDisconnect:  # (service/http.py says why: a body too large, too slow)
            if request.scope.get("merkat.body") == "size":
                raise HTTPException(413, f"size: over the limit of {conf.max_file} bytes "
                                         "(tenants.max_file)") from None
            raise HTTPException(408, "body: not received within "
                                     f"{manager.config.limits.header_timeout:g} s") from None
        except OSError as exc:
            raise HTTPException(422, f"name: cannot write {name!r}: "
                                     f"{exc.strerror or exc}") from None
        finally:
            up.abort()  # (nothing once committed)

    @r.delete("/files/{name}", status_code=204)
    def delete(name: str, me: User = Depends(current_user)) -> Response:
        """Delete your file ``name``: 204, or 404 when you have none of that name."""
        try:
            gone = delete_file(identity(me), name)
        except FileError as exc:
            raise HTTPException(422, str(exc)) from None
        except OSError as exc:
            raise HTTPException(422, f"name: cannot delete {name!r}: "
                                     f"{exc.strerror or exc}") from None
        if not gone:
            raise HTTPException(404, f"name: you have no file {name!r} (merkat file list)")
        return Response(status_code=204)

    @r.get("/files")
    def files(me: User = Depends(current_user)) -> dict[str, Any]:
        """Your uploaded files: name, size (bytes), modified (Unix seconds)."""
        return {"items": list_files(identity(me))}

    return r


def is_upload(scope: Any, prefix: str) -> bool:
    """Whether the request is an upload (``PUT .../files/NAME``): its body is streamed."""
    return scope.get("method") == "PUT" and str(scope.get("path", "")).startswith(
        prefix + "/files/")


def upload_limit(scope: Any, prefix: str, default: int) -> int:
    """The body limit of a request: an upload's is ``tenants.max_file`` (at least the
    default), any other's the default."""
    if scope.get("method") == "PUT" and str(scope.get("path", "")).startswith(prefix + "/files/"):
        app = scope.get("app")
        manager = getattr(getattr(app, "state", None), "manager", None)
        if manager is not None:
            return max(default, int(manager.config.tenants.max_file))
    return default
