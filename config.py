"""pyinfra loads this file from the working directory before it connects to any host.

It keeps each host's connection error so the register can say why a host was unreachable.
"""

import gpuaudit.pyinfra_config  # noqa: F401
