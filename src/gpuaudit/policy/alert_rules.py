"""Reading the site's Prometheus alert rules file named by the policy (``monitoring:
alert_rules:``) at load time, so that the alert coverage rule (GA924) reads only settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.prometheus_rules import parse_prometheus_rules
from gpuaudit.parsers.warnings import collecting

# More than any real rules file; a larger one is not read.
MAX_BYTES = 4 * 1024 * 1024


def resolve_rules_path(path: str, policy_source: str) -> Path:
    """``path`` as the policy names it: relative paths start at the policy file's folder."""
    named = Path(path).expanduser()
    if named.is_absolute() or policy_source.startswith("<"):
        return named
    return Path(policy_source).parent / named


def load_alert_rules(path: str | None, policy_source: str = "<string>") -> dict[str, Any]:
    """The settings the policy keeps for a rules file: ``alert_rules`` (as written),
    ``alert_rules_path`` (resolved), ``alert_rules_loaded`` (each rule as
    ``PromRule.to_dict``) or ``alert_rules_error``. ``path`` None clears them all."""
    if not path:
        return {
            "alert_rules": None,
            "alert_rules_path": None,
            "alert_rules_loaded": None,
            "alert_rules_error": None,
        }
    resolved = resolve_rules_path(path, policy_source)
    settings: dict[str, Any] = {
        "alert_rules": path,
        "alert_rules_path": str(resolved),
        "alert_rules_loaded": None,
        "alert_rules_error": None,
    }
    try:
        if resolved.stat().st_size > MAX_BYTES:
            raise OSError(f"larger than {MAX_BYTES} bytes")
        text = resolved.read_text(encoding="utf-8")
        with collecting():
            rules = parse_prometheus_rules(text)
    except (OSError, UnicodeDecodeError) as error:
        settings["alert_rules_error"] = f"cannot read the alert rules file {resolved}: {error}"
        return settings
    except ParseError as error:
        settings["alert_rules_error"] = f"{resolved}: {error}"
        return settings
    settings["alert_rules_loaded"] = [r.to_dict() for r in rules]
    return settings
