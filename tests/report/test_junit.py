"""junit.xml reads the rules' outcomes: info informs, disabled and not evaluated are skipped
with their reason, and only risks fail."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from demo_run import demo_report, junit_cases
from report_factories import GENERATED_AT, finding, healthy_host

from gpuaudit.policy import Policy
from gpuaudit.report.junit import _NOT_XML, render_junit
from gpuaudit.report.register import build_register
from gpuaudit.rules.base import Outcome, RuleOutcome, Severity

HEALTHY = ("@sim/a100-hgx-01", "@sim/v100-01", "@sim/t4-01", "@sim/mi100-01")


def test_healthy_demo_hosts_have_no_failure(tmp_path: Path) -> None:
    run = demo_report(tmp_path / "run")
    root = ET.parse(run.path / "junit.xml").getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    cases = junit_cases(run)
    for host in HEALTHY:
        assert suites[host].get("failures") == "0", host
        assert not suites[host].findall("testcase/failure"), host
        # GA801 (the model sizes that fit) is information: a passing testcase that says it.
        sizes = cases[host]["GA801"]
        assert sizes.find("failure") is None and sizes.find("skipped") is None
        assert "informational findings (not risks)" in (sizes.findtext("system-out") or "")
    # Every testcase of a healthy NVIDIA host passed: each rule that applies looked. The
    # others are skipped saying why: the host runs no Slurm, the site asked for no DCGM
    # diagnostic; none is "not evaluated".
    a100 = cases["@sim/a100-hgx-01"]
    skipped = [c.find("skipped") for c in a100.values()]
    said = [str(s.get("message")) for s in skipped if s is not None]
    assert len(a100) > 40 and said
    assert all(m.startswith(("not applicable: ", "disabled by policy: ")) for m in said), said
    passed = [code for code, c in a100.items() if c.find("skipped") is None]
    assert len(passed) > 40 and {"GA101", "GA301", "GA921"} <= set(passed)


def test_sick_demo_hosts_fail_and_blind_spots_are_skipped_with_why(tmp_path: Path) -> None:
    run = demo_report(tmp_path / "run")
    cases = junit_cases(run)
    dead = cases["@sim/v100-02"]
    failure = dead["GA101"].find("failure")
    assert failure is not None and failure.get("type") == "critical"
    # The driver does not answer: the GPU rules could not look, and say why.
    skipped = dead["GA303"].find("skipped")
    assert skipped is not None
    message = skipped.get("message") or ""
    assert message.startswith("not evaluated: no GPU list: the nvidia_smi_xml section failed")
    assert "couldn't communicate with the NVIDIA driver" in message
    assert dead["GA303"].find("failure") is None
    # An unreachable host: every rule is listed, skipped, none passed.
    gone = cases["@sim/a10g-02"]
    assert gone["GA001"].find("failure") is not None
    assert len(gone) > 40
    for code, case in gone.items():
        if code not in ("GA001", "GA000"):
            assert case.find("skipped") is not None, code
    # On a10g-01 the XID 13 storm fails; the XID 43 the site policy lowered to info informs.
    xids = cases["@sim/a10g-01"]["GA301"]
    storm = xids.find("failure")
    assert storm is not None and (storm.get("message") or "").startswith("1 open finding(s)")
    assert "XID 13" in (storm.text or "") and "XID 43" not in (storm.text or "")
    assert "XID 43" in (xids.findtext("system-out") or "")


def test_rule_disabled_for_a_group_is_skipped_not_passed(tmp_path: Path) -> None:
    policy = Policy.from_text(
        "version: 1\ngroups:\n  tesla_p100:\n    disabled_rules: [GA602]\n", "lab-policy.yaml"
    )
    cases = junit_cases(demo_report(tmp_path / "run", policy))
    off = cases["@sim/p100-01"]["GA602"]
    skipped = off.find("skipped")
    assert skipped is not None and off.find("failure") is None
    assert skipped.get("message") == (
        "disabled by policy: disabled_rules of the site policy lab-policy.yaml (group tesla_p100)"
    )
    # Other hosts still run it.
    on = cases["@sim/t4-01"]["GA602"]
    assert on.find("skipped") is None and on.find("failure") is None


def test_info_findings_never_fail_even_without_a_threshold() -> None:
    findings = [
        finding("GA801", Severity.INFO, "h1", gpu_index=None, message="70B fits at fp8"),
        finding("GA304", Severity.HIGH, "h1"),
    ]
    outcomes = [
        RuleOutcome("GA801", "h1", Outcome.FAIL, findings=1),
        RuleOutcome("GA304", "h1", Outcome.FAIL, findings=1),
        RuleOutcome("GA303", "h1", Outcome.PASS),
    ]
    register = build_register(
        [healthy_host("h1")], findings, generated_at=GENERATED_AT, outcomes=outcomes
    )
    root = ET.fromstring(render_junit(register))
    cases = {c.get("name", "").split()[0]: c for c in root.iter("testcase")}
    assert set(cases) == {"GA303", "GA304", "GA801"}
    assert cases["GA801"].find("failure") is None
    assert "70B fits at fp8" in (cases["GA801"].findtext("system-out") or "")
    assert cases["GA304"].find("failure") is not None
    assert cases["GA303"].get("name") == "GA303 Uncorrectable ECC errors"  # the catalogue's title
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "1", "0")


def test_testcases_alike_share_text_and_each_host_keeps_its_own_reason() -> None:
    """Testcases without findings are made once per distinct text: each host still gets its
    own reasons, its own findings and its own name in every testcase."""
    hosts = ["h1", "h2", "h3", 'h"<4']
    reasons = {"h1": "no Slurm here", "h2": "no Slurm here", "h3": "the sysctl section failed"}
    findings = [finding("GA304", Severity.HIGH, "h3")]
    outcomes = []
    for host in hosts:
        outcomes.append(RuleOutcome("GA303", host, Outcome.PASS))
        why = reasons.get(host, "the host was not audited (unreachable)")
        outcomes.append(RuleOutcome("GA602", host, Outcome.NOT_EVALUATED, why))
        failed = host == "h3"
        outcomes.append(
            RuleOutcome("GA304", host, Outcome.FAIL if failed else Outcome.PASS, findings=failed)
        )
    register = build_register(
        [healthy_host(h) for h in hosts], findings, generated_at=GENERATED_AT, outcomes=outcomes
    )
    root = ET.fromstring(render_junit(register))
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("12", "1", "4")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == sorted(hosts)
    for host in hosts:
        cases = {c.get("name", "").split()[0]: c for c in suites[host].findall("testcase")}
        assert {c.get("classname") for c in cases.values()} == {host}
        skipped = cases["GA602"].find("skipped")
        assert skipped is not None
        why = reasons.get(host, "the host was not audited (unreachable)")
        assert (skipped.get("message"), skipped.text) == (f"not evaluated: {why}", why)
        assert cases["GA303"].find("skipped") is None and cases["GA303"].find("failure") is None
        failure = cases["GA304"].find("failure")
        assert (failure is not None) == (host == "h3"), host
        assert suites[host].get("failures") == ("1" if host == "h3" else "0")
        assert suites[host].get("skipped") == "1"
    # Hosts alike read alike but for their names.
    texts = [ET.tostring(suites[h]).decode().replace(h, "HOST") for h in ("h1", "h2")]
    assert texts[0] == texts[1]


def test_the_characters_left_out_are_those_xml_does_not_allow() -> None:
    """XML 1.0's Char production: tab, newline, carriage return, U+0020-U+D7FF,
    U+E000-U+FFFD and U+10000-U+10FFFF; every other code point is left out of junit.xml."""
    every = set(range(0x110000))
    allowed = {0x9, 0xA, 0xD}.union(
        range(0x20, 0xD800), range(0xE000, 0xFFFE), range(0x10000, 0x110000)
    )
    text = "".join(map(chr, sorted(every)))
    assert {ord(c) for c in _NOT_XML.findall(text)} == every - allowed
