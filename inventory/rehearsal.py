"""A small simulated fleet for rehearsing staged driver upgrades, whose canary fails its gate.

    gpuaudit upgrade inventory/rehearsal.py --to 535.161.08 --policy policies/rehearsal.yaml

Five Tesla T4 hosts on driver 515.105.01 whose package repository also offers 535.161.08: one
canary and two waves of two (``rollout_stage`` host data). The canary's new driver logs an
XID 119 (GSP RPC timeout) once it loads (``sim_upgrade_faults``), so its health gate fails:
the rollout rolls the canary back to 515.105.01, pins it there again, and halts with every
wave host untouched.
A reboot keeps a host down for one second (``sim_reboot_seconds``).
"""

from gpuaudit.sim.profiles import get_profile

TARGET = "535.161.08"


def _host(name: str, stage: str, **data):
    profile = {**get_profile("t4-01"), "repository": [TARGET]}
    return (
        f"@sim/{name}",
        {
            "sim_profile": profile,
            "sim_reboot_seconds": 1,
            "rollout_stage": stage,
            "gpu_model": "Tesla T4",
            "gpu_vendor": "nvidia",
            "expected_gpu_count": 1,
            **data,
        },
    )


rehearsal = [
    _host("rh-canary-01", "canary", sim_upgrade_faults={"xid_after_upgrade": {"xid": 119}}),
    _host("rh-wave1-01", "wave1"),
    _host("rh-wave1-02", "wave1"),
    _host("rh-wave2-01", "wave2"),
    _host("rh-wave2-02", "wave2"),
]
