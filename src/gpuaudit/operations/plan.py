"""What a remediation run leaves alone on purpose, shown in its plan like any other step: a
fix the site policy skips, and a host an operation refuses to change."""

from __future__ import annotations

from collections.abc import Generator

from pyinfra import host, logger
from pyinfra.api import OperationValueError, QuoteString, StringCommand, operation


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


def refusal(reason: str) -> StringCommand:
    """
    The one command an operation yields, in place of its changes, when it refuses this host:
    it prints the reason on the host's stderr and exits 1.

    pyinfra then fails this operation on this host alone and goes on with the other hosts;
    an exception raised by the operation would end the run for every host of the inventory
    (and leave ``--dry`` listing nothing). The reason is logged when the operation is read,
    so ``--dry`` says it too, and pyinfra shows the stderr line when the command fails.
    """
    logger.warning(f"{host.name}: refused: {reason}")
    return StringCommand(
        "printf", "'%s\\n'", QuoteString(f"refused: {reason}"), ">&2;", "exit", "1"
    )
