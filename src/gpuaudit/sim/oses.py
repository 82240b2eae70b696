"""The operating systems a simulated host can run: /etc/os-release as the distribution ships it."""

from __future__ import annotations

_UBUNTU_URLS = """\
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
"""

OS_RELEASES: dict[str, str] = {
    "ubuntu-22.04": """\
PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
"""
    + _UBUNTU_URLS
    + "UBUNTU_CODENAME=jammy\n",
    "ubuntu-20.04": """\
NAME="Ubuntu"
VERSION="20.04.6 LTS (Focal Fossa)"
ID=ubuntu
ID_LIKE=debian
PRETTY_NAME="Ubuntu 20.04.6 LTS"
VERSION_ID="20.04"
"""
    + _UBUNTU_URLS
    + "VERSION_CODENAME=focal\nUBUNTU_CODENAME=focal\n",
}


def driver_proc_version(version: str) -> str:
    """/proc/driver/nvidia/version of the proprietary kernel module (build stamp is fixed)."""
    return (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Jan  9 22:31:23 UTC 2024\n"
        "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n"
    )
