"""Children that a test interrupts with SIGINT.

A process started with SIGINT ignored passes that on to its children, and Python then installs
no KeyboardInterrupt handler: a shell's background job (`make test &`) and pytest-xdist's
workers both start so. A test of how sglx meets Ctrl-C gives its child the default action back.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """preexec_fn for subprocess: SIGINT's default action in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
