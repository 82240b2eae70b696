"""Snapshot assembly: one host's collected bundle becomes a typed
:class:`~gpuaudit.model.snapshot.HostSnapshot`.

It joins what the parsers read from each section (``build``) and judges the host's status from
it (``status``). The model's types themselves live in :mod:`gpuaudit.model`, below both the
parsers that fill them and this assembly.
"""
