"""One preflight check's outcome: what was checked, how it went, and the fix when it failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sglx_platform.failures import FailureClass

Status = Literal["pass", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    failure: FailureClass | None = None
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "status": self.status,
            "detail": self.detail,
            "class": self.failure.value if self.failure else None,
            "fix": self.fix,
        }

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Check:
        failure = item.get("class")
        return cls(
            name=str(item["check"]),
            status=item["status"],
            detail=str(item["detail"]),
            failure=FailureClass(failure) if failure else None,
            fix=item.get("fix"),
        )


def failed(name: str, detail: str, failure: FailureClass, fix: str | None) -> Check:
    return Check(name, "fail", detail, failure, fix)
