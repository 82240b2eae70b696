"""The sbatch script of ``gpuaudit collect-job slurm``: valid bash, its options as #SBATCH
lines, and every value quoted for what reads it (the real job runs in
tests/integration/test_slurm_job.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaudit.cli import main
from gpuaudit.collect import collector_script
from gpuaudit.jobs.slurm import _NODE_STEP, SlurmJobOptions, render_sbatch, sbatch_quote

HOSTILE = "/shared/gpu audit/'it''s' \"dq\" $(touch pwned) `id` %j #x ;rm -rf ~"


def _bash_n(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.sh"
    script.write_text(text)
    return subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)


def _sbatch_options(script: str) -> list[str]:
    """The #SBATCH lines before the first command, as sbatch reads them (it stops there)."""
    lines = []
    for line in script.splitlines()[1:]:
        if line.startswith("#SBATCH "):
            lines.append(line[len("#SBATCH ") :])
        elif line and not line.startswith("#"):
            break
    return lines


def _sbatch_unquote(argument: str) -> str:
    """An #SBATCH argument as Slurm 22.05's src/sbatch/opt.c _get_argument reads it: a
    backslash escapes the next character, quotes ('" or ') group, an unquoted # ends it."""
    out, quote, escape = [], "", False
    for char in argument:
        if escape:
            out.append(char)
            escape = False
        elif char == "\\":
            escape = True
        elif quote:
            if char == quote:
                quote = ""
            else:
                out.append(char)
        elif char in "\"'":
            quote = char
        elif char == "#":
            break
        else:
            out.append(char)
    assert not quote, f"unmatched quote in {argument!r}"
    return "".join(out)


def test_the_default_script_is_valid_bash_with_the_collector_inside(tmp_path: Path) -> None:
    script = render_sbatch(SlurmJobOptions(bundle_dir="/shared/gpuaudit"))
    assert script.startswith("#!/bin/bash\n")
    done = _bash_n(script, tmp_path)
    assert done.returncode == 0, done.stderr
    # The collector travels whole, byte for byte, inside its quoted here-document.
    start = script.index("<<'GPUAUDIT_COLLECTOR_END'\n") + len("<<'GPUAUDIT_COLLECTOR_END'\n")
    end = script.index("\nGPUAUDIT_COLLECTOR_END\n", start)
    assert script[start:end] + "\n" == collector_script()
    assert _sbatch_options(script) == [
        '--job-name="gpuaudit-collect"',
        "--ntasks-per-node=1",
        "--time=00:15:00",
        '--output="/shared/gpuaudit/gpuaudit-slurm-%j.log"',
    ]
    assert "--exclusive" not in script.split("set -u")[0]  # shares nodes unless asked
    assert 'srun --nodes="$SLURM_JOB_NUM_NODES"' in script
    assert "--ntasks-per-node=1 \\\n  --kill-on-bad-exit=0 bash" in script


def test_the_node_step_is_valid_bash(tmp_path: Path) -> None:
    done = _bash_n(_NODE_STEP, tmp_path)
    assert done.returncode == 0, done.stderr


def test_options_become_sbatch_lines() -> None:
    options = SlurmJobOptions(
        bundle_dir="/shared/ga",
        nodes=128,
        nodelist="gpu[001-128]",
        partition="gpu",
        account="infra",
        reservation="audit",
        qos="high",
        gres="gpu:8",
        time_limit="1-00:00:00",
        job_name="audit q3",
        exclusive=True,
        collector_timeout_s=300,
        extra_sbatch=("--mem=1G", "--constraint=a100"),
    )
    script = render_sbatch(options, collector="echo collector\n")
    assert [_sbatch_unquote(line) for line in _sbatch_options(script)] == [
        "--job-name=audit q3",
        "--nodes=128",
        "--nodelist=gpu[001-128]",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--account=infra",
        "--reservation=audit",
        "--qos=high",
        "--gres=gpu:8",
        "--time=1-00:00:00",
        "--output=/shared/ga/gpuaudit-slurm-%j.log",
        "--exclusive",
        "--mem=1G",
        "--constraint=a100",
    ]
    assert "GA_TIMEOUT=300\n" in script


def test_a_hostile_bundle_dir_is_quoted_for_bash_and_for_sbatch(tmp_path: Path) -> None:
    options = SlurmJobOptions(
        bundle_dir=HOSTILE,
        job_name='x" #y',
        collector_env=(("GPUAUDIT_TIMEOUT", "30"), ("PATH", "/sim bin:$(id)")),
    )
    script = render_sbatch(options)
    assert _bash_n(script, tmp_path).returncode == 0
    [dir_line] = [line for line in script.splitlines() if line.startswith("GA_DIR=")]
    assert shlex.split(dir_line[len("GA_DIR=") :]) == [HOSTILE]
    assert dir_line == "GA_DIR=" + shlex.quote(HOSTILE)
    read = {
        arg.split("=", 1)[0]: arg.split("=", 1)[1]
        for arg in map(_sbatch_unquote, _sbatch_options(script))
        if "=" in arg
    }
    assert read["--job-name"] == 'x" #y'
    # The log's name keeps the directory's own % (as %%) and lets sbatch put in the job id.
    assert read["--output"] == HOSTILE.replace("%", "%%") + "/gpuaudit-slurm-%j.log"
    [srun] = [line for line in script.splitlines() if "--kill-on-bad-exit=0" in line]
    assert shlex.split(srun)[-2:] == ["GPUAUDIT_TIMEOUT=30", "PATH=/sim bin:$(id)"]


def test_the_script_sets_the_bundle_dir_exactly_when_bash_runs_it(tmp_path: Path) -> None:
    """Bash itself reads the quoted directory back (up to the first Slurm command)."""
    script = render_sbatch(SlurmJobOptions(bundle_dir=HOSTILE), collector="true\n")
    head = script.split("mkdir -p")[0] + 'printf %s "$GA_DIR"\n'
    done = subprocess.run(["bash", "-c", head], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == HOSTILE
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("bundle_dir", "/a\nb", "newline"),
        ("bundle_dir", "/a\\b", "backslash"),
        ("bundle_dir", "", "must be given"),
        ("partition", "gpu\n#SBATCH --uid=0", "newline"),
        ("time_limit", "soon", "time limit"),
        ("nodes", 0, "at least 1"),
        ("collector_timeout_s", -1, "negative"),
        ("collector_env", (("1BAD", "x"),), "not a valid name"),
        ("collector_env", (("GPUAUDIT_KERNEL_LOG_LINES", "-5"),), "KERNEL_LOG_LINES='-5'"),
        ("collector_env", (("GPUAUDIT_KERNEL_LOG_LINES", "0"),), "at least 1"),
        ("collector_env", (("GPUAUDIT_OUTPUT_BYTES", "abc"),), "OUTPUT_BYTES='abc'"),
        ("extra_sbatch", ("--mem=1G\nrm -rf /",), "newline"),
    ],
)
def test_values_that_cannot_be_written_are_refused(field: str, value: object, message: str) -> None:
    given: dict[str, object] = {"bundle_dir": "/shared/ga", field: value}
    with pytest.raises(ValueError, match=message):
        SlurmJobOptions(**given)  # type: ignore[arg-type]


def test_sbatch_quote_reads_back_as_the_value() -> None:
    for value in ("plain", "a b", "it's", 'say "hi"', "back\\slash", "#hash", "%j"):
        assert _sbatch_unquote(sbatch_quote(value)) == value


def test_the_cli_prints_the_script_or_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["collect-job", "slurm", "--bundle-dir", "/shared/ga", "-N", "4", "-p", "gpu",
            "--env", "GPUAUDIT_TIMEOUT=30", "--sbatch=--mem=1G"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "#SBATCH --nodes=4\n" in printed and "#SBATCH --mem=1G\n" in printed
    assert re.search(r'"\$GA_TIMEOUT" GPUAUDIT_TIMEOUT=30\n', printed)
    out = tmp_path / "job.sbatch"
    assert main([*argv, "-o", str(out)]) == 0
    assert out.read_text() == printed
    assert capsys.readouterr().out == ""
    assert main(["collect-job", "slurm", "--bundle-dir", "/x", "--env", "NOEQUALS"]) == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err


def test_collect_job_needs_an_engine() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "collect-job"],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert done.returncode == 2
    assert "ENGINE" in done.stderr
