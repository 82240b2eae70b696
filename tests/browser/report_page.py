"""The report page a browser test opened (its own module: test files import it by name, and a
module called ``conftest`` would be any directory's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReportPage:
    """An opened report and everything it did."""

    page: Any
    url: str
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def visible_risks(self) -> Any:
        return self.page.locator("#risks-table tbody.risk:not(.filtered-out)")

    def visible_hosts(self) -> Any:
        return self.page.locator("details.host:not(.filtered-out)")
