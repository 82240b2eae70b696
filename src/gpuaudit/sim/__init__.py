"""Simulated GPU hosts: real nvidia-smi / rocm-smi captures behind executables named like the
real tools, with per-host state and injectable faults (see host.py, profiles.py, connector.py).

Nothing is imported here: every simulated tool call starts a Python process that imports only
what that tool needs.
"""
