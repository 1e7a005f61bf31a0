"""A problem found in a spec or config: where (JSON pointer), which rule, what, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cdi_plugin.errors import SpecLoadError


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding. ``rule`` is a stable identifier (``specs/bad`` and ``specs/warn`` are named after it)."""

    pointer: str
    rule: str
    message: str
    hint: str = ""
    severity: Severity = Severity.ERROR

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def to_json(self) -> dict[str, str]:
        return {
            "pointer": self.pointer,
            "rule": self.rule,
            "severity": self.severity.value,
            "message": self.message,
            "hint": self.hint,
        }


def pointer_join(base: str, *parts: str | int) -> str:
    """Extend a JSON pointer, escaping ``~`` and ``/`` in keys as RFC 6901 requires."""
    out = base
    for part in parts:
        out += "/" + str(part).replace("~", "~0").replace("/", "~1")
    return out


def pointer_parts(pointer: str) -> list[str]:
    """The keys of a JSON pointer, unescaped (RFC 6901); ``""`` and ``"/"`` have none."""
    inner = pointer.strip("/")
    return [p.replace("~1", "/").replace("~0", "~") for p in inner.split("/")] if inner else []


def dedupe(problems: list[Problem]) -> list[Problem]:
    """Drop later problems that repeat an earlier one's pointer and rule."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in problems:
        key = (p.pointer, p.rule)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def from_error(exc: SpecLoadError) -> Problem:
    return Problem(exc.pointer, exc.rule, exc.message, exc.hint)
