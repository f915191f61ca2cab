"""One finding per problem: where, what, why it matters, how to fix it; and the exit status they add up to."""

from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING = "error", "warning"
EXIT_STATUS = {None: 0, WARNING: 1, ERROR: 2}


@dataclass(frozen=True)
class Finding:
    severity: str  # ERROR: TorchServe fails or is open to attack as configured; WARNING: it runs, badly or riskily
    where: str  # file:line, or archive name
    problem: str
    why: str
    fix: str

    def line(self) -> str:
        mark = "✗" if self.severity == ERROR else "!"
        return f"{mark} {self.severity}: {self.where}: {self.problem}. Why: {self.why}. Fix: {self.fix}"

    def to_dict(self) -> dict:
        return {"severity": self.severity, "where": self.where, "problem": self.problem, "why": self.why, "fix": self.fix}


def exit_status(findings: list[Finding]) -> int:
    worst = ERROR if any(f.severity == ERROR for f in findings) else WARNING if findings else None
    return EXIT_STATUS[worst]
