"""A shard's --limit per host, looked up by name: that host, as pyinfra's matching would
select it, and alone where pyinfra's would not.

pyinfra matches each --limit against every inventory host; a sharded run gives each shard one
--limit per host, which at 10,000 hosts is millions of matches. ``gpuaudit.deploy.shard_main``
looks host names up instead. Compared here, in a process of its own (pyinfra's command line
patches the standard library for gevent), with pyinfra's matching over a real inventory.
"""

from __future__ import annotations

import json
import subprocess
import sys

_COMPARE = """
import json, sys
import pyinfra_cli
from pyinfra.api import Inventory
from pyinfra_cli import cli
from gpuaudit.deploy import hosts_by_name

names = ["gpu-01", "gpu-02", "gpu-10", "web", "@sim/a100-hgx-01", "gpu[1]", "gpus"]
inventory = Inventory((names, {}), gpus=(["gpu-10", "web"], {}))
asked = []
def counted(inventory, patterns, option_name):
    asked.append(sorted(patterns))
    return cli._get_inventory_pattern_matches(inventory, patterns, option_name)
ours = hosts_by_name(counted)
cases = [
    ["gpu-01"], ["gpu-01", "gpu-02", "@sim/a100-hgx-01"], ["gpu-0*"], ["gpus"],
    ["gpu[1]"], ["gpu-1?", "web", "nothing"], ["gpu-02", "gpu-02"],
]
excluded = sorted(h.name for h in ours(inventory, ["gpus", "gpu-0*"], "--exclude"))

result = []
for patterns in cases:
    asked.clear()
    mine = sorted(h.name for h in ours(inventory, patterns, "--limit"))
    theirs = cli._get_inventory_pattern_matches(inventory, patterns, "--limit")
    theirs = sorted(h.name for h in theirs)
    result.append({"patterns": patterns, "ours": mine, "pyinfra": theirs, "asked": asked[:]})
json.dump({"limits": result, "excluded": excluded}, sys.stdout)
"""


def test_limits_by_name_select_what_pyinfra_selects() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COMPARE], capture_output=True, text=True, check=True, timeout=120
    )
    answer = json.loads(done.stdout)
    cases = {tuple(c["patterns"]): c for c in answer["limits"]}
    # A shard's limits are host names: each is that host, found without pyinfra's matching.
    named = cases["gpu-01", "gpu-02", "@sim/a100-hgx-01"]
    assert named["ours"] == named["pyinfra"] == ["@sim/a100-hgx-01", "gpu-01", "gpu-02"]
    assert named["asked"] == []
    assert cases["gpu-02", "gpu-02"]["ours"] == ["gpu-02"]
    # Anything else is pyinfra's to match, and selects what pyinfra selects.
    for patterns in (("gpu-0*",), ("gpu-1?", "web", "nothing")):
        assert cases[patterns]["ours"] == cases[patterns]["pyinfra"], patterns
    assert cases["gpu-1?", "web", "nothing"]["asked"] == [["gpu-1?", "nothing"]]
    # A host whose name is also a group's, or holds a wildcard, is that host alone: pyinfra
    # would take the group, or match the name as a pattern (and miss the host).
    assert (cases["gpus",]["ours"], cases["gpus",]["pyinfra"]) == (["gpus"], ["gpu-10", "web"])
    assert (cases["gpu[1]",]["ours"], cases["gpu[1]",]["pyinfra"]) == (["gpu[1]"], [])
    # --exclude is the user's, matched by pyinfra as before: the group and the pattern.
    assert answer["excluded"] == ["gpu-01", "gpu-02", "gpu-10", "web"]
