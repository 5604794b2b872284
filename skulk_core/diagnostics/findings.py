"""What the node doctor answers with: a finding and its verdict.

The wire half of :mod:`skulk_core.diagnostics.doctor`: the node bundle carries
findings and the CLI renders them, neither needs the checks or the facts they read.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec


class Verdict(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class DoctorFinding(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    check_id: str
    title: str
    verdict: Verdict
    detail: str
    consequence: str = ""
    remediation: str = ""
    fix_available: bool = False
