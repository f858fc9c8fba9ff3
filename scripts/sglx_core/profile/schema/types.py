"""The shared field types of every section, and the strict base model."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
)

SCHEMA_VERSION = 1

Name = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_.-]*$")]
EnvName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Z_][A-Z0-9_]*$")]
AbsPath = Annotated[str, StringConstraints(strict=True, pattern=r"^/\S*$")]
Text = Annotated[str, StringConstraints(strict=True, min_length=1)]
# Values a ServerArgs field can take in a default or a rule.
Scalar = StrictBool | StrictInt | StrictFloat | StrictStr | None


class _Strict(BaseModel):
    """Every schema object: unknown keys are errors, values are immutable after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)
