"""Freezing a child process (SIGSTOP) for a test, and knowing it is frozen.

``kill(SIGSTOP)`` returns as soon as the signal is pending: the process's threads stop
one by one over the next milliseconds (8 ms seen under load), and a request sent
meanwhile may still be answered. :func:`freeze` returns only once the kernel reports
the whole process stopped (``waitpid`` with ``WUNTRACED``, which does not reap it).
"""

from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["freeze", "thaw"]


def freeze(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGSTOP ``process`` (a child of this one) and wait until all of it has stopped."""
    process.send_signal(signal.SIGSTOP)
    while True:
        try:
            _, status = os.waitpid(process.pid, os.WUNTRACED)
        except ChildProcessError:
            return  # it has already been reaped: nothing left to freeze
        if os.WIFSTOPPED(status):
            return
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            process.returncode = (
                os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
            )
            return


def thaw(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGCONT: a frozen ``process`` goes on."""
    process.send_signal(signal.SIGCONT)
