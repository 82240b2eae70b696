"""What a remediation run leaves alone on purpose, shown in its plan like any other step."""

from __future__ import annotations

from collections.abc import Generator

from pyinfra import host
from pyinfra.api import OperationValueError, StringCommand, operation


@operation(is_idempotent=True)
def skipped(rule: str, reason: str) -> Generator[StringCommand, None, None]:
    """
    Record that the fix for ``rule`` is left out on this host, and why.

    + rule: the rule code whose remediation is not run (``GA601``)
    + reason: why — the site policy disables the rule for the host, or a waiver accepts its
      risk until a date (:meth:`gpuaudit.policy.settings.HostSettings.skip_reason`)

    It changes nothing. ``deploys/remediate.py`` uses it so that a waived or disabled risk
    is never fixed behind the site's back and the plan says so.

    .. code:: python

        plan.skipped(name="Apply the sysctl baseline", rule="GA601", reason="waived until …")
    """
    if not rule or not reason:
        raise OperationValueError("plan.skipped needs a rule and a reason")
    host.noop(reason)
    yield from ()
