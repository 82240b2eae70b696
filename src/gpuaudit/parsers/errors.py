"""The one exception every parser raises on output it cannot read.

Host output is untrusted and often damaged (a truncated XML, a driver error printed where a table
was expected). Parsers raise :class:`ParseError` for all of it, never anything else, so the
snapshot builder can record the problem against the section and carry on with the rest.
"""

from __future__ import annotations


class ParseError(ValueError):
    """Raised when a section's text is not in any format the parser knows.

    ``what`` names the format that was expected (e.g. ``"nvidia-smi -q -x"``); ``excerpt`` holds
    the start of the offending text so the message shows what the host actually printed.
    """

    def __init__(self, what: str, reason: str, text: str | None = None) -> None:
        self.what = what
        self.reason = reason
        self.excerpt = _excerpt(text) if text is not None else ""
        message = f"cannot parse {what}: {reason}"
        if self.excerpt:
            message += f" (input starts: {self.excerpt!r})"
        super().__init__(message)


def _excerpt(text: str, limit: int = 80) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first if len(first) <= limit else first[: limit - 1] + "…"
