"""The sysctl fact (command and pure parsing) and the pure helpers sysctl.baseline decides with:
boot order, shadows, running values, validation and the policy default."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ophelpers import refused
from pyinfra.api import OperationValueError
from pyinfra.context import ctx_host

from gpuaudit.facts.sysctl import (
    SysctlConfFiles,
    SysctlDropins,
    dotted,
    parse_assignment,
    proc_path,
)
from gpuaudit.operations import sysctl
from gpuaudit.operations.sysctl import (
    boot_problem,
    comment_out,
    find_shadows,
    kept_values,
    live_differences,
    load_order,
    render,
    satisfies,
)

OURS = "/etc/sysctl.d/90-gpuaudit.conf"
WANT = {"net.core.rmem_max": "134217728", "net.core.wmem_max": "134217728"}

# --- the fact -------------------------------------------------------------------------------


def test_dropins_command_greps_both_spellings_of_each_key_quoted() -> None:
    fact = SysctlDropins()
    assert fact.requires_command(keys=[]) == "grep"
    command = fact.command(keys=["net.core.rmem_max", "-net.ipv4.conf.eth0/100.rp_filter", "a;b"])
    assert command.get_raw_value() == (
        "LANG=C grep -H -s -F -e net.core.rmem_max -e net/core/rmem_max"
        " -e net.ipv4.conf.eth0/100.rp_filter -e net/ipv4/conf/eth0.100/rp_filter"
        " -e 'a;b' --"
        " /etc/sysctl.d/*.conf /run/sysctl.d/*.conf /usr/local/lib/sysctl.d/*.conf"
        " /usr/lib/sysctl.d/*.conf /lib/sysctl.d/*.conf /etc/sysctl.conf 2>/dev/null || true"
    )


def test_dropins_process_keeps_assignments_and_drops_comments() -> None:
    output = [
        "/usr/lib/sysctl.d/50-default.conf:net.core.rmem_max = 212992",
        "/etc/sysctl.d/99-override.conf:  -net/core/rmem_max\t=\t4194304  ",
        "/etc/sysctl.d/99-override.conf:#net.core.rmem_max = 1",
        "/etc/sysctl.d/99-override.conf:   ; net.core.rmem_max = 2",
        "/etc/sysctl.d/99-override.conf:-net.core.rmem_max",
        "/etc/sysctl.conf:net.core.rmem_max=8388608",
        "/etc/sysctl.conf:net.ipv4.tcp_rmem = 4096 87380 6291456",
        "/etc/sysctl.conf:",
        "grep: /run/sysctl.d/*.conf: No such file or directory",
    ]
    assert SysctlDropins().process(output) == [
        ("/usr/lib/sysctl.d/50-default.conf", "net.core.rmem_max", "212992"),
        ("/etc/sysctl.d/99-override.conf", "net/core/rmem_max", "4194304"),
        ("/etc/sysctl.conf", "net.core.rmem_max", "8388608"),
        ("/etc/sysctl.conf", "net.ipv4.tcp_rmem", "4096 87380 6291456"),
    ]
    assert SysctlDropins().process([]) == SysctlDropins.default() == []


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
def test_dropins_command_output_parses_on_a_real_tree(tmp_path: Path) -> None:
    # The command as the host runs it, with its directories moved under tmp_path.
    (tmp_path / "etc/sysctl.d").mkdir(parents=True)
    (tmp_path / "usr/lib/sysctl.d").mkdir(parents=True)
    (tmp_path / "etc/sysctl.conf").write_text("# net.core.rmem_max = 1\nnet.core.rmem_max=2\n")
    (tmp_path / "usr/lib/sysctl.d/50-default.conf").write_text("net/core/rmem_max = 3\n")
    (tmp_path / "etc/sysctl.d/99-sysctl.conf").symlink_to("../sysctl.conf")
    (tmp_path / "etc/sysctl.d/10-x.conf").write_text("net.core.rmem_max_other = 4\n")
    raw = SysctlDropins().command(keys=["net.core.rmem_max"]).get_raw_value()
    head, _, files = raw.partition(" -- ")
    moved = " ".join(f"{tmp_path}{f}" if f.startswith("/") else f for f in files.split(" "))
    run = subprocess.run(f"{head} -- {moved}", shell=True, capture_output=True, text=True)
    found = {
        (Path(f).relative_to(tmp_path).as_posix(), k, v)
        for f, k, v in SysctlDropins().process(run.stdout.splitlines())
    }
    assert found == {
        ("etc/sysctl.conf", "net.core.rmem_max", "2"),
        ("etc/sysctl.d/99-sysctl.conf", "net.core.rmem_max", "2"),
        ("usr/lib/sysctl.d/50-default.conf", "net/core/rmem_max", "3"),
        ("etc/sysctl.d/10-x.conf", "net.core.rmem_max_other", "4"),  # fixed-string match
    }


def test_conf_files_lists_every_file_a_mask_and_a_link_included(tmp_path: Path) -> None:
    # The command as the host runs it, with its directories moved under tmp_path.
    (tmp_path / "etc/sysctl.d").mkdir(parents=True)
    (tmp_path / "usr/lib/sysctl.d").mkdir(parents=True)
    (tmp_path / "usr/lib/sysctl.d/50-vendor.conf").write_text("net.core.rmem_max = 3\n")
    (tmp_path / "etc/sysctl.d/50-vendor.conf").symlink_to("/dev/null")  # masked
    (tmp_path / "etc/sysctl.d/60-empty.conf").write_text("")
    (tmp_path / "etc/sysctl.d/70-dangling.conf").symlink_to("/nonexistent/x.conf")
    (tmp_path / "etc/sysctl.d/README").write_text("not a .conf file\n")
    raw = SysctlConfFiles().command()
    moved = raw.replace(" /", f" {tmp_path}/")
    run = subprocess.run(["sh", "-c", moved], capture_output=True, text=True, check=False)
    assert (run.returncode, run.stderr) == (0, "")
    listed = [Path(f).relative_to(tmp_path).as_posix() for f in SysctlConfFiles().process(
        run.stdout.splitlines()
    )]  # fmt: skip
    assert listed == [
        "etc/sysctl.d/50-vendor.conf",
        "etc/sysctl.d/60-empty.conf",
        "etc/sysctl.d/70-dangling.conf",
        "usr/lib/sysctl.d/50-vendor.conf",
    ]
    assert SysctlConfFiles().process([]) == SysctlConfFiles.default() == []


def test_a_masked_or_overridden_vendor_file_is_not_read_so_not_a_shadow() -> None:
    vendor = ("/usr/lib/sysctl.d/95-vendor.conf", "net.core.rmem_max", "212992")
    assert find_shadows(OURS, WANT, [vendor]) == [vendor]
    # /etc/sysctl.d/95-vendor.conf (a link to /dev/null, or a file setting neither key) is
    # read in its place.
    assert find_shadows(OURS, WANT, [vendor], ["/etc/sysctl.d/95-vendor.conf"]) == []


def test_key_spellings() -> None:
    assert proc_path("kernel.domainname") == proc_path("kernel/domainname") == "kernel/domainname"
    assert proc_path("net.ipv4.conf.enp3s0/200.forwarding") == (
        "net/ipv4/conf/enp3s0.200/forwarding"
    )
    assert proc_path("net/ipv4/conf/enp3s0.200/forwarding") == (
        "net/ipv4/conf/enp3s0.200/forwarding"
    )
    assert dotted("-net/ipv4/conf/enp3s0.200/forwarding") == "net.ipv4.conf.enp3s0/200.forwarding"
    assert parse_assignment("  -key.x = a  b ") == ("key.x", "a  b")
    assert parse_assignment("-key.pattern.excluded") is None
    assert parse_assignment("; key = 1") is None


# --- boot order and shadows -----------------------------------------------------------------


def test_load_order_by_name_with_etc_first_and_sysctl_conf_last() -> None:
    files = [
        "/etc/sysctl.conf",
        "/usr/lib/sysctl.d/99-z.conf",
        "/usr/lib/sysctl.d/50-default.conf",
        "/etc/sysctl.d/50-default.conf",
        "/run/sysctl.d/10-a.conf",
        "/lib/sysctl.d/10-a.conf",
        "/etc/sysctl.d/README",
        "/opt/sysctl.d/00-x.conf",
    ]
    assert load_order(files) == [
        "/run/sysctl.d/10-a.conf",
        "/etc/sysctl.d/50-default.conf",
        "/usr/lib/sysctl.d/99-z.conf",
        "/etc/sysctl.conf",
    ]


def test_only_later_files_with_another_value_shadow() -> None:
    assignments = [
        ("/etc/sysctl.d/10-early.conf", "net.core.rmem_max", "1"),
        (OURS, "net.core.rmem_max", "999"),  # our own stale line: rewritten anyway
        ("/usr/lib/sysctl.d/95-vendor.conf", "net/core/wmem_max", "134217728"),
        ("/etc/sysctl.conf", "net.core.rmem_max", "212992"),
        ("/etc/sysctl.d/99-override.conf", "net/core/rmem_max", "4194304"),
    ]
    assert find_shadows(OURS, WANT, assignments) == [
        ("/etc/sysctl.d/99-override.conf", "net/core/rmem_max", "4194304"),
        ("/etc/sysctl.conf", "net.core.rmem_max", "212992"),
    ]


def test_a_later_file_restoring_the_value_means_no_shadow() -> None:
    assignments = [
        ("/etc/sysctl.d/95-a.conf", "net.core.rmem_max", "1"),
        ("/etc/sysctl.d/99-b.conf", "net.core.rmem_max", "134217728"),
    ]
    assert find_shadows(OURS, WANT, assignments) == []
    # ... but the last line within one file wins.
    assignments.append(("/etc/sysctl.d/99-b.conf", "net.core.rmem_max", "2"))
    assert find_shadows(OURS, WANT, assignments) == [
        ("/etc/sysctl.d/95-a.conf", "net.core.rmem_max", "1"),
        ("/etc/sysctl.d/99-b.conf", "net.core.rmem_max", "2"),
    ]


def test_hidden_drop_in_counts_every_value() -> None:
    ours = "/usr/lib/sysctl.d/90-gpuaudit.conf"
    assignments = [
        ("/etc/sysctl.d/10-early.conf", "net.core.rmem_max", "1"),
        ("/etc/sysctl.d/90-gpuaudit.conf", "net.core.wmem_max", "2"),
    ]
    assert find_shadows(ours, WANT, assignments) == assignments
    assert boot_problem(ours, [f for f, _, _ in assignments]) == (
        f"{ours} is not read at boot: /etc/sysctl.d/90-gpuaudit.conf has the same name and is "
        "read instead"
    )
    assert boot_problem(OURS, ["/usr/lib/sysctl.d/90-gpuaudit.conf"]) is None
    assert boot_problem("/etc/sysctl.d/90-gpuaudit") == (
        "/etc/sysctl.d/90-gpuaudit is not read at boot: use a *.conf file in /etc/sysctl.d"
    )


def test_comment_out_edits_only_assignments_of_the_key(tmp_path: Path) -> None:
    if (
        shutil.which("sed") is None
        or subprocess.run(
            ["sed", "--follow-symlinks", "-n", "p", "/dev/null"], capture_output=True
        ).returncode
    ):
        pytest.skip("needs GNU sed")
    real = tmp_path / "sysctl.conf"
    real.write_text(
        "# keep\nnet.core.rmem_max = 1\n  -net.core.rmem_max=2\n;net.core.rmem_max = 3\n"
        "net.core.rmem_max_x = 4\nnetXcoreXrmem_max = 5\n"
    )
    link = tmp_path / "99-sysctl.conf"
    link.symlink_to(real.name)
    command = comment_out(str(link), ["net.core.rmem_max"]).get_raw_value()
    subprocess.run(command, shell=True, check=True)
    assert link.is_symlink()
    assert real.read_text() == (
        "# keep\n# gpuaudit: net.core.rmem_max = 1\n# gpuaudit:   -net.core.rmem_max=2\n"
        ";net.core.rmem_max = 3\nnet.core.rmem_max_x = 4\nnetXcoreXrmem_max = 5\n"
    )


# --- running values -------------------------------------------------------------------------


def test_live_differences_vectors_spellings_globs_and_missing_keys() -> None:
    running = {
        "net.core.rmem_max": 134217728,
        "net.ipv4.tcp_rmem": [4096, 87380, 6291456],
        "net.ipv4.conf.all.rp_filter": 1,
        "net.ipv4.conf.eth0.rp_filter": 2,
        "net.ipv4.conf.eth0/100.rp_filter": 2,
    }
    wanted = {
        "net/core/rmem_max": "134217728",
        "net.ipv4.tcp_rmem": "4096 87380  6291456",
        "net.ipv4.conf.all.rp_filter": "1",  # named: the glob below leaves it out
        "net.ipv4.conf.*.rp_filter": "2",
        "net.bridge.bridge-nf-call-iptables": "0",
        "-net.ipv4.conf.eth9.rp_filter": "2",
    }
    assert live_differences(wanted, running) == ([], ["net.bridge.bridge-nf-call-iptables"])
    running["net.ipv4.conf.eth1.rp_filter"] = 0
    running["net.ipv4.tcp_rmem"] = [4096, 131072, 6291456]
    assert live_differences(wanted, running)[0] == [
        "net.ipv4.tcp_rmem",
        "net.ipv4.conf.*.rp_filter",
    ]


# --- validation and the policy default ------------------------------------------------------


class StandIn:
    def __init__(self, facts: dict[str, Any], data: dict[str, Any] | None = None) -> None:
        self.facts, self.data = facts, data or {}
        self.noops: list[str] = []
        self.groups: list[str] = []
        self.name = "@stand-in"

    def get_fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        return self.facts[cls.__name__]

    def noop(self, description: str) -> None:
        self.noops.append(description)


def run(op: Any, facts: dict[str, Any], data: dict[str, Any] | None = None, **kwargs: Any):
    host = StandIn(facts, data)
    with ctx_host.use(host):
        return list(op._inner(**kwargs)), host


NEW_HOST = {"File": None, "SysctlDropins": [], "SysctlConfFiles": [], "Sysctl": {}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({".net.core.x": 1}, "invalid sysctl key '.net.core.x'"),
        ({"net..core": 1}, "invalid sysctl key 'net..core'"),
        ({"net.core.x; reboot": 1}, "invalid sysctl key"),
        ({"-": 1}, "invalid sysctl key '-'"),
        ({"net.core.x": "1\nkernel.panic = 1"}, "sysctl net.core.x: the value must be one line"),
        ({"net.core.x": True}, "the value must be an int or a str, not bool"),
        ({"net.core.x": 1.5}, "the value must be an int or a str, not float"),
        ({"net.core.x": "  "}, "sysctl net.core.x: the value is empty"),
        ({"net.core.x": 1, "net/core/x": 2}, "'net.core.x' and 'net/core/x' name the same"),
        ({}, "no sysctl values to keep"),
    ],
)
def test_bad_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(OperationValueError, match=message.replace(".", r"\.")):
        run(sysctl.baseline, NEW_HOST, values=values)


def test_relative_path_is_refused() -> None:
    with pytest.raises(OperationValueError, match="absolute path"):
        run(sysctl.baseline, NEW_HOST, values={"a.b": 1}, path="sysctl.d/x.conf")


def test_host_data_merges_over_the_built_in_baseline() -> None:
    commands, _ = run(
        sysctl.baseline,
        NEW_HOST,
        data={"sysctl_baseline": {"net.core.rmem_max": 268435456, "vm.swappiness": 10}},
        apply=False,
    )
    expected = render(
        {"net.core.rmem_max": "268435456", "net.core.wmem_max": "134217728", "vm.swappiness": "10"}
    )
    assert commands[1].src.getvalue() == expected  # after the mkdir -p
    assert expected.splitlines()[2:] == [
        "net.core.rmem_max = 268435456",
        "net.core.wmem_max = 134217728",
        "vm.swappiness = 10",
    ]


def test_shadows_are_logged_as_warnings(caplog: pytest.LogCaptureFixture) -> None:
    facts = {
        "File": {"mode": 644},
        "FileContents": render(WANT).splitlines(),
        "SysctlDropins": [("/etc/sysctl.d/99-override.conf", "net.core.rmem_max", "212992")],
        "SysctlConfFiles": ["/etc/sysctl.d/99-override.conf"],
        "Sysctl": {"net.core.rmem_max": 134217728, "net.core.wmem_max": 134217728},
    }
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        commands, host = run(sysctl.baseline, facts)
    assert commands == []
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"sysctl net.core.rmem_max: /etc/sysctl.d/99-override.conf is read after {OURS} and "
        "sets 212992, which wins over 134217728 at boot (not changed; fix_shadows=True "
        "comments it out)"
    ]
    assert "99-override.conf sets net.core.rmem_max = 212992" in host.noops[0]


def test_not_a_regular_file_is_left_alone() -> None:
    commands, _ = run(sysctl.baseline, {**NEW_HOST, "File": False})
    assert refused(commands) == f"{OURS} exists but is not a regular file; not replacing it"
    commands, _ = run(sysctl.remove, {"File": False})
    assert refused(commands) == f"{OURS} exists but is not a regular file; not removing it"


# --- a number is a minimum -------------------------------------------------------------------


def test_a_number_is_met_by_a_higher_one_a_text_only_by_itself() -> None:
    assert satisfies("536870912", "134217728") and satisfies(134217728, "134217728")
    assert not satisfies("212992", "134217728")
    assert not satisfies("536870912", "134217728", exact=True)
    assert satisfies([4096, 87380, 6291456], "4096  87380 6291456")
    assert not satisfies([4096, 87380, 8388608], "4096 87380 6291456")  # a vector: exact
    assert not satisfies("fq_codel", "fq") and not satisfies("12x", "10")


def test_a_later_file_above_a_minimum_is_no_shadow() -> None:
    higher = ("/etc/sysctl.d/99-tuning.conf", "net.core.rmem_max", "536870912")
    lower = ("/etc/sysctl.conf", "net.core.wmem_max", "212992")
    assert find_shadows(OURS, WANT, [higher, lower]) == [lower]
    assert find_shadows(OURS, WANT, [higher, lower], exact=True) == [higher, lower]
    # A higher value read last still leaves the key above the minimum at boot, whatever a
    # line before it sets.
    assignments = [("/etc/sysctl.d/95-a.conf", "net.core.rmem_max", "1"), higher]
    assert find_shadows(OURS, WANT, assignments) == []


def test_the_drop_in_keeps_a_higher_value_an_earlier_file_sets() -> None:
    want = {**WANT, "net.ipv4.conf.*.rp_filter": "2", "net.core.default_qdisc": "fq"}
    assignments = [
        ("/etc/sysctl.d/60-tuning.conf", "net/core/rmem_max", "536870912"),
        ("/etc/sysctl.d/60-tuning.conf", "net.core.wmem_max", "65536"),  # lower: ours wins
        ("/etc/sysctl.d/60-tuning.conf", "net.ipv4.conf.*.rp_filter", "5"),  # a glob: as is
        ("/etc/sysctl.d/60-tuning.conf", "net.core.default_qdisc", "fq_codel"),  # text
        ("/etc/sysctl.d/99-late.conf", "net.core.wmem_max", "999999999"),  # after ours
        (OURS, "net.core.rmem_max", "999"),  # our own stale line: rewritten anyway
    ]
    assert kept_values(OURS, want, assignments) == {**want, "net.core.rmem_max": "536870912"}
    # A drop-in that is not read at boot overrides nothing.
    hidden = "/usr/lib/sysctl.d/90-gpuaudit.conf"
    assert kept_values(hidden, WANT, assignments, [OURS]) == WANT


def test_a_running_value_above_a_minimum_is_no_difference() -> None:
    running = {"net.core.rmem_max": 536870912, "net.core.wmem_max": 212992}
    assert live_differences(WANT, running) == (["net.core.wmem_max"], [])
    assert live_differences(WANT, running, exact=True) == (
        ["net.core.rmem_max", "net.core.wmem_max"],
        [],
    )
