"""The one exception type the host tool raises for problems a user can fix.

`cli.main` catches it once, prints the message and the hint to stderr (or the JSON envelope with
``--json``) and exits 2. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class SglxError(Exception):
    """A usage or environment problem, worded so the user knows what to change.

    ``message`` names the problem (with the file and key path where there is one); ``hint`` says
    how to fix it; ``code`` is a stable machine-readable name for ``--json`` consumers.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        code: str = "error",
        path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code
        self.path = path

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\n  hint: {self.hint}"
