"""The in-toto Statements sglx attests, built with the in-toto attestation library's own
messages (Statement v1, the SLSA Provenance v1 and Test Result v0.1 predicates), so a field
name the spec does not have cannot be written.

- Provenance: what was built (every file of the bundle, by name and SHA-256), from what (the
  base image's digest, the wheel lock's, the source commit) and by what (sglx, its version).
- Scan result: the dependency scan of the image, as a test result whose subjects are the image
  itself (its config digest) and the report and SBOM the scan wrote.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
BUILD_TYPE = "urn:sglx:bundle-create:v1"
BUILDER_ID = "urn:sglx:builder:bundle-create"


@dataclass(frozen=True)
class Subject:
    """One attested artefact: a bundle path (or an image reference) and its SHA-256 (hex)."""

    name: str
    sha256: str

    def descriptor(self) -> Any:
        return ResourceDescriptor(name=self.name, digest={"sha256": self.sha256}).pb


@dataclass(frozen=True)
class Dependency:
    """An input of the build: the base image, the lock, the source tree."""

    name: str
    digest: Mapping[str, str]
    uri: str = ""

    def descriptor(self) -> Any:
        return ResourceDescriptor(name=self.name, uri=self.uri, digest=dict(self.digest)).pb


@dataclass(frozen=True)
class Build:
    """How the bundle was made: the parameters a rebuild would pass, its inputs, the builder."""

    parameters: Mapping[str, Any]
    dependencies: tuple[Dependency, ...]
    builder_version: Mapping[str, str]
    invocation: str
    started: dt.datetime
    finished: dt.datetime


def provenance(subjects: Iterable[Subject], build: Build) -> dict[str, Any]:
    """A SLSA Provenance v1 statement over `subjects`."""
    predicate = provenance_pb2.Provenance()
    definition = predicate.build_definition
    definition.build_type = BUILD_TYPE
    definition.external_parameters.update(dict(build.parameters))
    definition.resolved_dependencies.extend(d.descriptor() for d in build.dependencies)
    run = predicate.run_details
    run.builder.id = BUILDER_ID
    run.builder.version.update(dict(build.builder_version))
    run.metadata.invocation_id = build.invocation
    run.metadata.started_on.CopyFrom(_timestamp(build.started))
    run.metadata.finished_on.CopyFrom(_timestamp(build.finished))
    return _statement(subjects, SLSA_PROVENANCE, predicate)


def test_result(
    subjects: Iterable[Subject],
    *,
    passed: bool,
    failed_tests: Iterable[str],
    configuration: Iterable[Subject],
) -> dict[str, Any]:
    """A Test Result v0.1 statement: PASSED, or FAILED naming each failed check."""
    predicate = test_result_pb2.TestResult()
    predicate.result = "PASSED" if passed else "FAILED"
    predicate.configuration.extend(c.descriptor() for c in configuration)
    predicate.failed_tests.extend(failed_tests)
    return _statement(subjects, TEST_RESULT, predicate)


def payload(statement: Mapping[str, Any]) -> bytes:
    """The statement's bytes as they are signed (compact, keys sorted: one encoding)."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


def subjects_of(statement: Mapping[str, Any]) -> dict[str, str]:
    """`name -> sha256` of a statement's subjects (already checked to be a Statement v1)."""
    found: dict[str, str] = {}
    for subject in statement.get("subject", []):
        if isinstance(subject, dict):
            digest = subject.get("digest")
            if isinstance(digest, dict) and isinstance(digest.get("sha256"), str):
                found[str(subject.get("name", ""))] = digest["sha256"]
    return found


def _statement(subjects: Iterable[Subject], predicate_type: str, predicate: Any) -> dict[str, Any]:
    body = json_format.MessageToDict(predicate)
    statement = Statement([s.descriptor() for s in subjects], predicate_type, body)
    statement.validate()
    document: dict[str, Any] = json_format.MessageToDict(statement.pb)
    return document


def _timestamp(when: dt.datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(when.astimezone(dt.UTC).replace(microsecond=0))
    return stamp
