"""The MemTool system-call filter: a seccomp program for bubblewrap's ``--seccomp FD``.

Built with libseccomp through ``pyseccomp`` (a ctypes binding to the system's
``libseccomp.so.2``, API-compatible with libseccomp's own Python bindings).
Default action: allow. The calls below fail with ``EPERM``: nothing a memory
tool needs, everything that would change the sandbox from inside (mounts,
namespaces, tracing other processes, kernel keyrings, BPF, modules, kexec,
the clock, swap, reboot, raw handles) or inject input into a terminal
(``ioctl(TIOCSTI)``); ``socket``/``socketpair`` of any address family but
``AF_UNIX`` fail with ``EAFNOSUPPORT``. Calls of other ABIs (x32 on x86_64) are killed by
libseccomp's architecture check.

Where the filter cannot be built (``pyseccomp`` missing, or no libseccomp on
the machine) :func:`build_filter` says why, and the sandbox runs without it;
the run's log and ``docs/forecast.md`` say what that leaves open.
"""

from __future__ import annotations

import errno
import os
import socket

DENIED_SYSCALLS = (
    # file systems and mounts
    "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "quotactl", "quotactl_fd", "swapon", "swapoff",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init",
    # namespaces and other processes
    "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # kernel facilities
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "acct",
    "syslog", "vhangup", "iopl", "ioperm",
    # the clock
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
)
TIOCSTI = 0x5412
SOCKET_CALLS = ("socket", "socketpair")  # refused for any address family but AF_UNIX (EAFNOSUPPORT)

_CACHE: list = []


def build_filter() -> tuple[bytes | None, str]:
    """(compiled BPF program, "") or (None, why none could be built); cached per process."""
    if _CACHE:
        return _CACHE[0]
    try:
        import pyseccomp as seccomp
    except Exception as exc:  # noqa: BLE001 - ImportError, or OSError when libseccomp.so is missing
        res = (None, f"no system-call filter: libseccomp's Python binding is unavailable ({type(exc).__name__}: "
                     f"{exc}); install the 'pyseccomp' package and the system's libseccomp2")
        _CACHE.append(res)
        return res
    try:
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        skipped = []
        for name in DENIED_SYSCALLS:
            try:
                f.add_rule(seccomp.ERRNO(errno.EPERM), name)
            except (RuntimeError, ValueError, OSError):
                skipped.append(name)  # not a system call of this architecture
        f.add_rule(seccomp.ERRNO(errno.EPERM), "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
        # sockets of one family only: AF_UNIX (pipes between a tool's own processes). The private network
        # namespace does not cover every family (AF_VSOCK bound a port of the host VM's vsock space)
        for call in SOCKET_CALLS:
            f.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), call, seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
        fd = os.memfd_create("toe-seccomp")
        try:
            with open(fd, "wb", closefd=False) as out:
                f.export_bpf(out)
            os.lseek(fd, 0, os.SEEK_SET)
            program = b""
            while chunk := os.read(fd, 1 << 16):
                program += chunk
        finally:
            os.close(fd)
        if not program or len(program) % 8:
            raise RuntimeError(f"libseccomp exported a program of {len(program)} bytes (not whole BPF instructions)")
        res = (program, "")
    except Exception as exc:  # noqa: BLE001 - report any failure of the native library as a reason
        res = (None, f"no system-call filter: libseccomp failed to build it ({type(exc).__name__}: {exc})")
    _CACHE.append(res)
    return res
