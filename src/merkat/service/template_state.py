"""A cluster's ``state:`` section (issue 30; docs/kubernetes.md, "State across suspension and
migration"): a volume per VM that survives suspension and migration, and the commands that
save the application's state into it and take it back.

```yaml
clusters:
  - name: main
    command: ./solver
    state:
      path: /merkat/state      # where the volume is mounted (absolute); $MERKAT_STATE
      size: 1Gi                # the claim's size (a Kubernetes quantity)
      storage_class: standard  # default: the cluster's default class
      checkpoint: cp -r work "$MERKAT_STATE/"   # run in the VM before it is suspended/moved
      restore: cp -r "$MERKAT_STATE/work" . || true   # run before the command, every start
      timeout: 10              # s, for checkpoint (at most the server's limit, 10 s)
      grace: 30                # s between SIGTERM and SIGKILL when the pod is deleted
      notice_s: 40             # s between merkat.io/preempt-at and the stop (default: a period)
```

Only the kubernetes backend uses it; the local backend suspends with SIGSTOP (memory kept) and
ignores it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")


class State(BaseModel):
    """A cluster's ``state:`` (module doc)."""

    model_config = {"extra": "forbid", "allow_inf_nan": False}

    path: str = Field("/merkat/state", min_length=2, max_length=1024)
    size: str = Field("1Gi", max_length=32)
    storage_class: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    checkpoint: str | None = Field(None, min_length=1, max_length=65536)
    restore: str | None = Field(None, min_length=1, max_length=65536)
    timeout: float = Field(10.0, gt=0, le=60)
    grace: int = Field(30, ge=0, le=3600)
    notice_s: float | None = Field(None, ge=0, le=3600)

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/") or ".." in v.split("/") or "\0" in v or ":" in v:
            raise ValueError("an absolute path without '..' or ':' (where the volume is "
                             "mounted in the VM)")
        return v

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not _QUANTITY.match(v) or float(re.sub(r"[A-Za-z]+$", "", v)) <= 0:
            raise ValueError(f"{v!r} is not a storage size (e.g. 512Mi, 1Gi)")
        return v

    @field_validator("checkpoint", "restore")
    @classmethod
    def _command(cls, v: str | None) -> str | None:
        if v is not None and "\0" in v:
            raise ValueError("no NUL character")
        return v
