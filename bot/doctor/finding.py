"""One check's verdict: ✓ or ✗, and after a ✗ what to do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    ok: bool
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{'✓' if self.ok else '✗'} {self.name}: {self.detail}"
        return f"{text}\n    → {self.fix}" if not self.ok and self.fix else text


def good(name: str, detail: str) -> Finding:
    return Finding(True, name, detail)


def bad(name: str, detail: str, fix: str) -> Finding:
    return Finding(False, name, detail, fix)


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
