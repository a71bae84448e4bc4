"""Run a command with io_uring refused, as a container runtime's seccomp profile refuses it:
no_uring.py PROGRAM ARGS... installs a seccomp filter under which io_uring_setup(2) fails with
EPERM (every other call allowed), then executes PROGRAM. Standard library only (ctypes)."""

import ctypes
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
NR_IO_URING_SETUP = 425  # the same on x86-64 and on the generic table (arm64)
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[platform.machine()]
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def refuse_io_uring():
    prog = [  # (code, jt, jf, k); seccomp_data: nr at 0, arch at 4
        (LD_W_ABS, 0, 0, 4),
        (JEQ_K, 0, 3, ARCH),  # another architecture's calls: allowed
        (LD_W_ABS, 0, 0, 0),
        (JEQ_K, 0, 1, NR_IO_URING_SETUP),
        (RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        (RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    raw = b"".join(struct.pack("HBBI", *insn) for insn in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = SockFprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        sys.exit(f"no_uring.py: cannot install the seccomp filter: {os.strerror(err)}")


if __name__ == "__main__":
    refuse_io_uring()
    os.execv(sys.argv[1], sys.argv[1:])
