"""pause.py — the test's end of the netlink-pause shim (preload/netlink-pause.c): the shim
built or found, FIFOs in a directory of their own, the arm file, and the environment for the
daemon. The `pause` fixture (conftest.py) makes them and closes them after the test."""

import os
import select
import shutil
import tempfile
from pathlib import Path

import helpers
from helpers import T

SHIM_SRC = Path(__file__).resolve().parent / 'preload' / 'netlink-pause.c'


def pause_shim(tmp_path):
    """libnetlink-pause.so: the one meson built next to the daemon under test, else built here."""
    if os.environ.get('BT_NETLINK_PAUSE_SO'):
        return Path(os.environ['BT_NETLINK_PAUSE_SO'])
    built = helpers.BIN.resolve().parents[1] / 'tests' / 'integration' / 'preload' / 'libnetlink-pause.so'
    if built.exists() and built.stat().st_mtime >= SHIM_SRC.stat().st_mtime:
        return built
    out = tmp_path / 'libnetlink-pause.so'
    helpers.run('cc', '-shared', '-fPIC', '-O2', '-Wall', '-o', out, SHIM_SRC, '-ldl')
    return out


class Pause:
    """The test's end of the shim: FIFOs in a directory of its own, an arm file, and the
    environment for the daemon."""

    def __init__(self, tmp_path, ifindex, on):
        self.dir = Path(tempfile.mkdtemp(prefix='bt-pause.', dir='/tmp'))
        for f in ('paused', 'release'):
            os.mkfifo(self.dir / f, 0o600)
        # Read and write end ourselves: never EOF, never a blocking open.
        self.paused = os.open(self.dir / 'paused', os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self.held = False
        asan = ':'.join(filter(None, [os.environ.get('ASAN_OPTIONS'), 'verify_asan_link_order=0']))
        self.env = {'LD_PRELOAD': str(pause_shim(tmp_path)), 'BT_PAUSE_FIFO_DIR': str(self.dir),
                    'BT_PAUSE_IFINDEX': str(ifindex), 'BT_PAUSE_ON': on, 'ASAN_OPTIONS': asan}

    def arm(self):
        (self.dir / 'arm').touch()

    def wait_paused(self, timeout, d):
        r, _, _ = select.select([self.paused], [], [], T(timeout))
        assert r, f'the daemon never sent the request the shim waits for\n{d.log_tail(40)}'
        os.read(self.paused, 1)
        self.held = True

    def release(self):
        if self.held:
            fd = os.open(self.dir / 'release', os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                os.write(fd, b'r')
            finally:
                os.close(fd)
            self.held = False

    def close(self):
        try:
            self.release()
        except OSError:
            pass
        os.close(self.paused)
        shutil.rmtree(self.dir, ignore_errors=True)
