"""Certificates: what `effctx certify` measured for one cell on one machine, and whether
its quality gates passed; the JSON Schema they follow, the store that keeps them, and
the check that says whether one counts here."""

from effctx_core.certify.certificate import (
    GATE_NAMES,
    canonical_bytes,
    document_digest,
    example_document,
    gate,
    unsealed,
    utc_timestamp,
)
from effctx_core.certify.hardware import Hardware, this_machine
from effctx_core.certify.here import Here, why_not_here
from effctx_core.certify.schema import SCHEMA_VERSION, CertificateError, certificate_schema, check_document
from effctx_core.certify.store import CertificateStore, StoredCertificate, default_root, file_name

__all__ = [
    "GATE_NAMES", "SCHEMA_VERSION", "CertificateError", "CertificateStore", "Hardware", "Here", "StoredCertificate",
    "canonical_bytes", "certificate_schema", "check_document", "default_root", "document_digest",
    "example_document", "file_name", "gate", "this_machine", "unsealed", "utc_timestamp", "why_not_here",
]
