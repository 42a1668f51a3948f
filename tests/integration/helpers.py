"""helpers.py — what the integration tests share besides fixtures: running ip in a namespace,
writing policy files the way operators and Kubernetes do, the daemon under test as an object,
and predicates over nl.read_links() results."""

import json
import os
import re
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import nl

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get('BIGTCPD_BIN', REPO / 'build' / 'daemon' / 'bigtcpd'))
# The namespaces the tests make are named PREFIX<random>; scripts/test.sh counts those left behind
# by the same prefix. Another prefix keeps two runs on one machine apart (BT_NETNS_PREFIX=bt-me-).
NETNS_PREFIX = os.environ.get('BT_NETNS_PREFIX', 'bt-')
if not re.fullmatch(r'bt-[a-z0-9-]{0,8}', NETNS_PREFIX):
    raise RuntimeError(f'BT_NETNS_PREFIX={NETNS_PREFIX!r}: expected bt- and at most 8 of [a-z0-9-]')
# Multiply every deadline (e.g. 3 under valgrind or a slow sanitizer build).
SCALE = float(os.environ.get('BIGTCPD_TEST_TIMEOUT_SCALE', '1'))

SANITIZER_MARKERS = ('ERROR: AddressSanitizer', 'ERROR: LeakSanitizer', 'runtime error:')
# What the daemon logs when it catches itself breaking its own rules (a device taking a step the
# lifecycle does not list): a bug, whatever the test was about.
BUG_MARKER = 'BUG: '


def T(seconds):
    return seconds * SCALE


def run(*cmd, check=True, input=None, env=None):
    """`cmd`, its output captured; `env`: variables added to this process's environment."""
    r = subprocess.run([str(c) for c in cmd], input=input, capture_output=True, text=True,
                       env={**os.environ, **env} if env else None)
    if check and r.returncode != 0:
        raise AssertionError(f'{shlex.join(map(str, cmd))} exited {r.returncode}: {r.stderr.strip()}')
    return r


def as_host(hostname=None, machine_id=None):
    """The command prefix that runs what follows as another host: its own UTS namespace with
    `hostname`, and — with `machine_id` (a file holding one) — a private mount namespace where
    that file is bind-mounted over /etc/machine-id. Both namespaces go with the process; the
    host's own hostname and machine id are never touched. Execs all the way down, so the pid of
    the command is the pid of what follows."""
    if hostname is None and machine_id is None:
        return []
    setup = []
    if hostname is not None:
        setup.append(f'hostname {shlex.quote(hostname)}')
    if machine_id is not None:
        setup.append(f'mount --bind {shlex.quote(str(machine_id))} /etc/machine-id')
    mount = ['--mount', '--propagation', 'private'] if machine_id is not None else []
    return ['unshare', '--uts', *mount, 'sh', '-c', ' && '.join(setup) + ' && exec "$@"', 'sh']


def ip(ns, *args, check=True):
    return run('ip', '-n', ns, *args, check=check)


def children(pid):
    """The children of process `pid` now, {pid: comm} (a zombie's too: it is still there; one gone
    while they are read is left out)."""
    out = {}
    for task in os.listdir(f'/proc/{pid}/task'):
        for k in Path(f'/proc/{pid}/task/{task}/children').read_text().split():
            try:
                out[int(k)] = Path(f'/proc/{k}/comm').read_text().strip()
            except FileNotFoundError:
                pass   # gone meanwhile
    return out


def ip_batch(ns, lines):
    """Run many ip commands in one process (`ip -n NS -batch -`)."""
    return run('ip', '-n', ns, '-batch', '-', input=''.join(l + '\n' for l in lines))


def veth(ns, a, b):
    ip(ns, 'link', 'add', a, 'type', 'veth', 'peer', 'name', b)


def write_file_atomic(path, text):
    """Write `text` next to nothing the daemon watches, then rename it over `path`: an editor's
    or config manager's atomic replace, seen by inotify as one IN_MOVED_TO."""
    path = Path(path)
    staging = path.parent.parent / '.staging'
    staging.mkdir(exist_ok=True)
    tmp = staging / (path.name + f'.{os.getpid()}.tmp')
    tmp.write_text(text)
    os.rename(tmp, path)
    return path


def policy_text(text):
    return textwrap.dedent(text).lstrip('\n')


def line_of(text, needle):
    """1-based line number of the first line containing `needle`."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise ValueError(needle)


def sizes4(a, b=None, c=None, d=None):
    """(gso, gro, gso_ipv4, gro_ipv4); sizes4(x) means x everywhere."""
    if b is None:
        return (a, a, a, a)
    return (a, b, c, d)


def at(expected):
    """Predicate for nl.wait_links: every ifname in `expected` exists with those four sizes."""
    def pred(links):
        return all(n in links and nl.sizes_of(links[n]) == s for n, s in expected.items())
    return pred


def current(ns, names):
    links = nl.read_links(ns)
    return {n: nl.sizes_of(links[n]) if n in links else None for n in names}


def assert_sizes(ns, expected, why=''):
    """Check sizes now, with one dump (used right after READY=1, which promises convergence)."""
    got = current(ns, expected)
    assert got == expected, f'{why}\nexpected {expected}\n     got {got}\n{nl.format_table(nl.read_links(ns))}'


class DaemonDied(AssertionError):
    pass


class Daemon:
    """bigtcpd running in a namespace, with its own sd_notify socket and log file."""

    def __init__(self, ns, config, workdir, sockdir, runtime_dir, env=None, hostname=None,
                 log_level='debug', extra_args=(), strace=False, wrapper=(), machine_id=None):
        self.ns = ns
        self.config = Path(config) if config is not None else None   # None: the standard paths
        self.runtime_dir = Path(runtime_dir)
        self.log_path = Path(workdir) / f'bigtcpd-{ns}-{int(time.monotonic() * 1000)}.log'
        self.notes = []      # every notify line received, in order
        self.note_times = []  # (time.monotonic() when received, line), for each of them
        self.cursor = 0      # wait_notify searches from here
        self.proc = None
        self.pidfd = None
        self.returncode = None
        self.sender_pids = set()   # pids that sent notify datagrams (SO_PASSCRED)
        self.strace_path = None

        if not BIN.exists():
            raise AssertionError(f'daemon binary {BIN} does not exist: build it (meson setup build && '
                                 f'ninja -C build) or point BIGTCPD_BIN at it')

        self.notify_path = Path(sockdir) / f'notify-{len(os.listdir(sockdir))}'
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.notify.bind(str(self.notify_path))
        # The daemon need not be trusted to keep messages small, but a notify burst must fit.
        self.notify.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.notify.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

        argv = [str(BIN), *(['--config', str(self.config)] if self.config else []),
                '--runtime-dir', str(self.runtime_dir), '--log-level', log_level, *extra_args]
        # exec all the way down, so that the pid we hold is the daemon's.
        argv = [*as_host(hostname, machine_id), *argv]
        # A command that sets something up and execs the daemon (its pid stays the daemon's).
        argv = [*wrapper, *argv]
        full_env = {k: v for k, v in os.environ.items()
                    if k not in ('NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID', 'LISTEN_FDS',
                                 'LISTEN_PID', 'LISTEN_FDNAMES', 'INVOCATION_ID')}
        full_env['NOTIFY_SOCKET'] = str(self.notify_path)
        if strace:
            # The kernel sends no notification for a size change, so the only way to see that
            # the daemon wrote nothing is to watch what it sends. strace is the parent of the
            # daemon then; the daemon's pid comes from its first notify datagram.
            self.strace_path = Path(workdir) / (self.log_path.stem + '.strace')
            argv = ['strace', '-f', '-qq', '--seccomp-bpf', '-e', 'trace=sendmsg,sendto,sendmmsg',
                    '-e', 'signal=none', '-s', '1024', '-o', str(self.strace_path), *argv]
            # LeakSanitizer cannot run under ptrace.
            full_env['ASAN_OPTIONS'] = ':'.join(filter(None, [full_env.get('ASAN_OPTIONS'),
                                                              'detect_leaks=0']))
        argv = ['ip', 'netns', 'exec', ns, *argv]
        full_env.update(env or {})
        self.argv = argv
        self.env = env or {}
        self._log = open(self.log_path, 'wb')
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
        # ip, unshare and sh exec into the daemon, so this is its pid (checked against the
        # notify sender); under strace it is strace's until the first notify datagram.
        self.pid = self.proc.pid
        self.pidfd = os.pidfd_open(self.proc.pid)
        # Read notifications all the time, as systemd does: a reader that stops reading fills the
        # socket's queue (net.unix.max_dgram_qlen datagrams) and sd_notify() then blocks the daemon.
        self._notes_lock = threading.Lock()
        self._reader_stop = False
        self._reader_paused = False
        self._reader = threading.Thread(target=self._reader_loop, daemon=True)
        self._reader.start()

    # --- notify -------------------------------------------------------------------------------

    def _reader_loop(self):
        while not self._reader_stop:
            try:
                select.select([self.notify], [], [], 0.1)
            except (OSError, ValueError):
                return
            if self._reader_stop:
                return
            if self._reader_paused:
                time.sleep(0.05)  # a test plays the slow reader: leave the socket alone
                continue
            self._recv_notes()

    def pause_reader(self):
        """Stop reading notifications in the background (the waits still read): for tests of a
        reader that falls behind."""
        self._reader_paused = True

    def resume_reader(self):
        self._reader_paused = False

    def _recv_notes(self):
        with self._notes_lock:
            self._recv_notes_locked()

    def _recv_notes_locked(self):
        if self.notify.fileno() < 0:
            return
        while True:
            try:
                data, anc, _flags, _addr = self.notify.recvmsg(
                    65536, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(253 * 4), socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            for level, ctype, cdata in anc:
                if level == socket.SOL_SOCKET and ctype == socket.SCM_CREDENTIALS and len(cdata) >= 12:
                    pid = int.from_bytes(cdata[:4], 'little')
                    self.sender_pids.add(pid)
                    if self.strace_path is not None and self.pid == self.proc.pid:
                        self.pid = pid
                elif level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
                    for i in range(0, len(cdata) - len(cdata) % 4, 4):
                        os.close(int.from_bytes(cdata[i:i + 4], 'little'))
            now = time.monotonic()
            for line in data.decode('utf-8', 'replace').split('\n'):
                if line:
                    self.notes.append(line)
                    self.note_times.append((now, line))

    def _find(self, line, start):
        for i in range(start, len(self.notes)):
            if self.notes[i] == line or (line.endswith('=') and self.notes[i].startswith(line)):
                return i
        return None

    def wait_notify(self, line, timeout=10):
        """Wait for a notify line (exact, or a prefix when it ends in '=') received after the
        previous match, and return it. Fails at once if the daemon exits."""
        deadline = time.monotonic() + T(timeout)
        while True:
            self._recv_notes()
            i = self._find(line, self.cursor)
            if i is not None:
                self.cursor = i + 1
                return self.notes[i]
            if self.proc.poll() is not None:
                self._recv_notes()
                i = self._find(line, self.cursor)
                if i is not None:
                    self.cursor = i + 1
                    return self.notes[i]
                raise DaemonDied(f'bigtcpd exited with {self.proc.returncode} while waiting for '
                                 f'{line!r}; notify: {self.notes}\n--- log tail ---\n{self.log_tail()}')
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f'no {line!r} from bigtcpd within {T(timeout)}s; notify so far: '
                                     f'{self.notes}\n--- log tail ---\n{self.log_tail()}')
            select.select([self.notify, self.pidfd], [], [], min(left, 0.05))

    def mark(self):
        """Forget notify lines received so far: later waits see only newer ones."""
        self._recv_notes()
        self.cursor = len(self.notes)

    def reload(self, write=None, timeout=10):
        """SIGHUP (after `write()`, if given) and wait for RELOADING=1 then READY=1 of a reload
        that began after the write. A write also triggers the daemon's inotify reload, and an
        earlier SIGHUP may still be answered late: RELOADING=1 carries MONOTONIC_USEC, taken
        before the daemon reads the files, which tells them apart."""
        self.mark()
        if write is not None:
            write()
        since = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.signal(signal.SIGHUP)
        while True:
            self.wait_notify('RELOADING=1', timeout)
            stamp = self.wait_notify('MONOTONIC_USEC=', timeout)
            if int(stamp.split('=', 1)[1]) >= since:
                break
        self.wait_notify('READY=1', timeout)

    # --- process ------------------------------------------------------------------------------

    def signal(self, sig):
        if self.proc.poll() is not None:
            raise DaemonDied(f'bigtcpd already exited with {self.proc.returncode}\n{self.log_tail()}')
        os.kill(self.pid, sig)

    def running(self):
        return self.proc.poll() is None

    def kill(self, sig=9):  # SIGKILL (the method `signal` shadows the module here)
        """Kill the daemon with no chance to clean up (a crash), and wait for it."""
        os.kill(self.pid, sig)
        self.proc.wait(T(10))
        self.returncode = self.proc.returncode
        self._recv_notes()
        self.close()

    def _terminate(self, timeout):
        if self.proc.poll() is None:
            self._recv_notes()
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(T(timeout))
            except subprocess.TimeoutExpired:
                # Our own session (start_new_session): the daemon and anything between it and
                # us (strace), by process group id.
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.returncode = self.proc.returncode
                return False
        self.returncode = self.proc.returncode
        return True

    def stop(self, timeout=10):
        """SIGTERM, wait; SIGKILL if it does not exit. Checks a clean exit."""
        was_running = self.proc.poll() is None
        clean = self._terminate(timeout)
        self._recv_notes()
        self.close()
        assert clean, f'bigtcpd did not exit within {T(timeout)}s of SIGTERM (killed)\n{self.log_tail()}'
        self.check_exit(expect_stopping=was_running)

    def check_exit(self, expect_stopping=True):
        log = self.log()
        bad = [l for l in log.splitlines() if any(m in l for m in SANITIZER_MARKERS) or BUG_MARKER in l]
        assert not bad, f'sanitizer or BUG reports in {self.log_path}:\n' + '\n'.join(bad[:20])
        assert self.returncode == 0, f'bigtcpd exited with {self.returncode}\n{self.log_tail()}'
        if self.strace_path is None:
            assert self.sender_pids <= {self.pid}, \
                f'notify datagrams from {self.sender_pids}, daemon pid {self.pid}: the harness lost the pid'
        if expect_stopping:
            assert 'STOPPING=1' in self.notes, f'no STOPPING=1 before exit; notify: {self.notes}'

    def close(self):
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        self._reader_stop = True
        if self._reader.is_alive():
            self._reader.join()
        with self._notes_lock:
            self.notify.close()
        if not self._log.closed:
            self._log.close()

    # --- output -------------------------------------------------------------------------------

    def log(self):
        return self.log_path.read_text(errors='replace')

    def netlink_writes(self):
        """RTM_NEWLINK requests the daemon sent (needs strace=True), as a list of the devices
        they named: an ifindex (int) or a name (str, as strace resolves it in the namespace)."""
        assert self.strace_path is not None, 'start the daemon with strace=True'
        text = self.strace_path.read_text(errors='replace')
        devs = []
        for chunk in text.split('nlmsg_type=')[1:]:
            if not chunk.startswith('RTM_NEWLINK'):
                continue
            m = re.search(r'ifi_index=(?:(\d+)|if_nametoindex\("([^"]*)"\))', chunk)
            if m is None:
                raise AssertionError(f'cannot parse an RTM_NEWLINK in {self.strace_path}: {chunk[:300]}')
            if m.group(2) is not None:
                devs.append(m.group(2))
            elif int(m.group(1)) != 0:
                devs.append(int(m.group(1)))
            else:
                n = re.search(r'nla_type=IFLA_IFNAME\}, "([^"]*)"', chunk)
                devs.append(n.group(1) if n else 0)
        return devs

    def log_tail(self, n=60):
        return '\n'.join(self.log().splitlines()[-n:])

    def log_lines(self, pattern):
        rx = re.compile(pattern)
        return [l for l in self.log().splitlines() if rx.search(l)]

    def state(self):
        return read_state(self.runtime_dir)


def device_lines(log, ifname, word):
    """Log lines of one device decision: 'IFNAME: ... word ...'."""
    return [l for l in log.splitlines() if _dev_line(l, ifname) and word in l]


def _dev_line(line, ifname):
    # Tolerate a timestamp/level prefix before the device name.
    return re.search(rf'(^|\s){re.escape(ifname)}: ', line) is not None


def state_devices(state):
    assert state.get('version') == 1, f'state.json version: {state.get("version")!r}'
    return {d['ifname']: d for d in state['devices']}


def set_and_check(ns, ifname, sizes):
    """Give a device four exact sizes (IPv6 first, so the kernel's IPv4 overwrite is undone in
    the same message) and check they took."""
    nl.set_sizes(ns, ifname, **dict(zip(nl.SIZES, sizes)))
    got = nl.sizes_of(nl.read_links(ns)[ifname])
    assert got == tuple(sizes), f'{ifname}: set {sizes}, reads {got}'


def netlink_drops(pid):
    """Multicast messages the kernel dropped (ENOBUFS) on pid's NETLINK_ROUTE sockets: the Drops
    column of /proc/PID/net/netlink for the sockets among its fds."""
    inodes = set()
    for fd in os.listdir(f'/proc/{pid}/fd'):
        try:
            target = os.readlink(f'/proc/{pid}/fd/{fd}')
        except OSError:
            continue
        if target.startswith('socket:['):
            inodes.add(int(target[8:-1]))
    drops = 0
    with open(f'/proc/{pid}/net/netlink') as f:
        next(f)
        for line in f:
            cols = line.split()
            if len(cols) >= 10 and cols[1] == '0' and int(cols[9]) in inodes:
                drops += int(cols[8])
    return drops


def vm(pid, key):
    """VmHWM, VmRSS or another Vm* figure of a process, in bytes."""
    for line in Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024
    raise KeyError(f'no {key} for pid {pid}')


def read_state(runtime_dir):
    """The daemon's state as it would load it: the snapshot state.json, then the lines of
    state.journal of the snapshot's generation (a device entry replaces, "forget" drops; a torn
    line ends the replay). Raises when the snapshot is not whole JSON.

    A running daemon may write a new snapshot between the two reads: it renames the new one over
    state.json and then unlinks the journal, so an old snapshot read before and the journal read
    after would lose every line of the old one. The pair is read again until state.json is the
    same file after the journal's read as before the snapshot's."""
    runtime_dir = Path(runtime_dir)
    for _ in range(1000):
        try:
            with open(runtime_dir / 'state.json', 'rb') as f:
                before = os.fstat(f.fileno())
                snap = json.loads(f.read())
        except FileNotFoundError:
            before, snap = None, {'version': 1, 'generation': 0, 'devices': []}
        try:
            lines = (runtime_dir / 'state.journal').read_text().split('\n')[:-1]
        except FileNotFoundError:
            lines = []
        try:
            after = os.stat(runtime_dir / 'state.json')
        except FileNotFoundError:
            after = None
        if (before is None) == (after is None) and \
                (before is None or (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)):
            break
    else:
        raise AssertionError(f'state.json in {runtime_dir} replaced under every one of 1000 reads')
    gen = snap.get('generation', 0)
    devs = {e['ifindex']: e for e in snap['devices']}
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            break
        if rec.get('g') != gen:
            continue
        if rec.get('forget'):
            devs.pop(rec['ifindex'], None)
        else:
            devs[rec['device']['ifindex']] = rec['device']
    return {'version': snap['version'], 'generation': gen, 'devices': list(devs.values())}


# --- waiting on events ----------------------------------------------------------------------

class _Inotify:
    """A minimal inotify(7) watch (ctypes; Python has no binding): wait() returns once the
    watched path reported one of `mask`, or the timeout passed."""

    IN_MODIFY = 0x002
    IN_CLOSE_WRITE = 0x008
    IN_MOVED_TO = 0x080
    IN_CREATE = 0x100
    IN_NONBLOCK = 0o4000
    IN_CLOEXEC = 0o2000000

    def __init__(self, path, mask):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
        if self.fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f'inotify_init1: {os.strerror(e)}')
        if libc.inotify_add_watch(self.fd, os.fsencode(str(path)), mask) < 0:
            e = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(e, f'inotify_add_watch {path}: {os.strerror(e)}')

    def wait(self, timeout):
        r, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if r:
            try:
                while os.read(self.fd, 65536):
                    pass
            except BlockingIOError:
                pass
        return bool(r)

    def close(self):
        os.close(self.fd)


class StateWrites(_Inotify):
    """The state file's writes in a runtime directory, counted by inotify as they happen:
    `snapshots`, state.json renamed into place (two fsyncs each: the file's and the directory's);
    `appends`, writes to state.journal (one write(2) and one fdatasync each: the sync comes after,
    so what a reader sees of the journal is counted already). Its opens and closes are watched too:
    inotify merges an event into the one before it when they are the same, and the daemon opens
    and closes the journal around each append. read() takes what came since it was last called:
    call it often enough for the kernel's queue (16384 events by default), or `overflows` says it
    was not."""

    IN_OPEN = 0x020
    IN_Q_OVERFLOW = 0x4000

    def __init__(self, runtime_dir):
        super().__init__(runtime_dir, self.IN_OPEN | self.IN_MODIFY | self.IN_CLOSE_WRITE | self.IN_MOVED_TO)
        self.snapshots = self.appends = self.overflows = 0

    def read(self):
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return self
            off = 0
            while off + 16 <= len(buf):
                _, mask, _, n = struct.unpack_from('iIII', buf, off)
                name = buf[off + 16:off + 16 + n].rstrip(b'\0')
                off += 16 + n
                if mask & self.IN_Q_OVERFLOW:
                    self.overflows += 1
                elif mask & self.IN_MOVED_TO and name == b'state.json':
                    self.snapshots += 1
                elif mask & self.IN_MODIFY and name == b'state.journal':
                    self.appends += 1


class Attacker:
    """An attacker script (attacker.py: varlink, dbus_attacker.py: D-Bus) run under another UID
    against `target` (a socket path), by pid; each line it prints is JSON, and kept."""

    def __init__(self, script, target, uid, *args):
        self.proc = subprocess.Popen(
            ['setpriv', f'--reuid={uid}', f'--regid={uid}', '--clear-groups', sys.executable, str(script),
             str(target), *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []

    def line(self, timeout=60):
        """The next line it prints, as JSON."""
        deadline = time.monotonic() + T(timeout)
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f'attacker said nothing in {T(timeout)} s'
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                text = self.proc.stdout.readline()
                if not text:
                    raise AssertionError(f'attacker exited {self.proc.wait()}: {self.proc.stderr.read()}')
                self.lines.append(json.loads(text))
                return self.lines[-1]

    def say(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self):
        """Close its stdin: it stops and says what it saw."""
        self.proc.stdin.close()
        return self.line()

    def stop(self):
        try:
            self.proc.stdin.close()   # also when it is gone already: the pipe is still ours
        except BrokenPipeError:
            pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=T(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


def stop(proc, timeout=5):
    """Stop a process the test started, by its pid: SIGTERM, and SIGKILL if it is still there
    after `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Iperf:
    """An iperf3 server in `ns` (-1: one client; bound to `bind` if given), stopped by pid."""

    def __init__(self, ns, bind=None, once=True):
        self.proc = subprocess.Popen(['ip', 'netns', 'exec', ns, 'iperf3', '-s', *(['-1'] if once else []),
                                      *(['-B', bind] if bind else []), '--forceflush'],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # "-----" then "Server listening on 5201": it listens (read lines, not a sleep)
        lines = [self.proc.stdout.readline() for _ in range(2)]
        assert any('listening' in line for line in lines), lines

    def close(self):
        stop(self.proc)
        self.proc.stdout.close()


class Prober(threading.Thread):
    """probe() in a thread of its own, again every `every` seconds (at once when it returns True)
    until stop(), which joins it (at most `join` seconds, scaled) and fails with what a probe
    raised, said as `what`."""

    def __init__(self, every, join, what):
        super().__init__(daemon=True)
        self.every, self.join_timeout, self.what = every, join, what
        self.done = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self.done.is_set():
                if not self.probe():
                    self.done.wait(self.every)
        except Exception as e:   # reported by the test thread
            self.error = e

    def stop(self):
        self.done.set()
        self.join(T(self.join_timeout))
        assert self.error is None, f'{self.what}: {self.error!r}'
        return self


def wait_file(path, check, timeout, what, directory=False):
    """Wait until check() returns something true, re-evaluated whenever `path` (a file, or with
    directory=True a directory and the files renamed or written into it) changes: inotify, no
    polling. For the cases where a file on disk is what a test checks (the state file, the
    log); returns check()'s value. `what` may be a callable, for a message made at the end."""
    mask = (_Inotify.IN_MOVED_TO | _Inotify.IN_CLOSE_WRITE | _Inotify.IN_MODIFY | _Inotify.IN_CREATE
            if directory else _Inotify.IN_MODIFY | _Inotify.IN_CLOSE_WRITE)
    watch = _Inotify(path, mask)
    try:
        deadline = time.monotonic() + T(timeout)
        while True:
            v = check()   # after the watch exists: a change between the two is not lost
            if v:
                return v
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f'{what() if callable(what) else what}: not within {T(timeout)}s')
            watch.wait(left)
    finally:
        watch.close()


class Monitor:
    """A varlink io.bigtcpd.Manager.Monitor stream, read by a background thread.

    `events` holds every event after "subscribed", in order (dicts, the reply's parameters),
    `times` the time.monotonic() each arrived. wait_for() waits for an event (searching from a
    cursor, so that one event satisfies one wait).

    With seed=True it also keeps the state of every device: ListDevices right after the
    subscription, then every `state` event applied on top (only when its `previous` is the state
    held, so that an event older than the ListDevices answer does not undo it). state() and
    wait_state() read that view: the waits are on events, never a poll of the daemon."""

    IFACE = 'io.bigtcpd.Manager'

    def __init__(self, d, seed=True, timeout=10):
        import varlink_client
        self._vc = varlink_client
        self.path = d.runtime_dir / self.IFACE if isinstance(d, Daemon) else Path(d)
        self.daemon = d if isinstance(d, Daemon) else None
        self.client = varlink_client.Client(self.path, timeout=T(timeout))
        self.client.send(f'{self.IFACE}.Monitor', more=True)
        first = self.client.recv(timeout=T(timeout))
        assert first.get('parameters', {}).get('event') == 'subscribed', f'Monitor answered {first}'
        self.client.sock.settimeout(None)
        self.events = []
        self.times = []
        self.cursor = 0
        self.closed = None          # why the stream ended, once it did
        self.cond = threading.Condition()
        self.by_index = {}          # ifindex -> {'ifname', 'state'}
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        if seed:
            try:
                self._seed()
            except BaseException:
                self.close()
                raise

    def _seed(self):
        with self.cond:
            devs = self.call('ListDevices')['devices']
            # Newer than any event read so far; events read after it apply on top.
            for x in devs:
                self.by_index[x['ifindex']] = {'ifname': x['ifname'], 'state': x['state']}

    # --- plumbing ---

    def call(self, method, params=None):
        """One call on another connection (the stream owns this one)."""
        return self._vc.call(self.path, f'{self.IFACE}.{method}' if '.' not in method else method, params,
                             timeout=T(10))

    def _loop(self):
        buf = b''
        sock = self.client.sock
        while True:
            try:
                r, _, _ = select.select([sock, self._stop_r], [], [])
            except (OSError, ValueError):
                return
            if self._stop_r in r:
                return
            try:
                chunk = sock.recv(1 << 20)
            except OSError as e:
                chunk, err = b'', e
            else:
                err = None
            if not chunk:
                with self.cond:
                    self.closed = f'the Monitor connection closed ({err or "EOF"})'
                    self.cond.notify_all()
                return
            buf += chunk
            *msgs, buf = buf.split(b'\0')
            now = time.monotonic()
            with self.cond:
                for raw in msgs:
                    msg = json.loads(raw)
                    if 'error' in msg:
                        self.closed = f'Monitor error {msg}'
                        continue
                    ev = msg.get('parameters', {})
                    self.events.append(ev)
                    self.times.append(now)
                    self._apply(ev)
                self.cond.notify_all()

    def _apply(self, ev):
        idx = ev.get('ifindex')
        if idx is None:
            return
        kind = ev.get('event')
        cur = self.by_index.get(idx)
        if kind == 'added':
            self.by_index[idx] = {'ifname': ev.get('ifname'), 'state': ev.get('state', 'unmanaged')}
        elif kind == 'removed':
            self.by_index.pop(idx, None)
        elif kind == 'state':
            if cur is None or (ev.get('ifname') != cur['ifname'] and ev.get('previous') == 'unmanaged'):
                # a device we did not know, or another device under a reused ifindex (a daemon
                # without `added` events does not say so otherwise)
                self.by_index[idx] = {'ifname': ev.get('ifname'), 'state': ev['state']}
            elif cur['state'] == ev.get('previous'):
                cur['state'] = ev['state']
            if ev.get('ifname'):
                self.by_index[idx]['ifname'] = ev['ifname']
        elif cur is not None and ev.get('ifname'):
            cur['ifname'] = ev['ifname']

    def close(self):
        if self._stop_w is not None:
            os.write(self._stop_w, b'x')
            self._thread.join(T(5))
            os.close(self._stop_w)
            os.close(self._stop_r)
            self._stop_w = None
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- waiting ---

    def mark(self):
        """Later waits see only events from now on."""
        with self.cond:
            self.cursor = len(self.events)
        return self.cursor

    def _fail(self, what, timeout, start):
        tail = '\n'.join(json.dumps(e) for e in self.events[start:][-40:])
        log = f'\n--- log tail ---\n{self.daemon.log_tail(40)}' if self.daemon else ''
        raise AssertionError(f'{what}: not within {T(timeout)}s ({self.closed or "stream open"}); '
                             f'events since:\n{tail}{log}')

    def wait_for(self, pred, timeout, what='event', since=None):
        """The first event at or after `since` (default: the cursor) with pred(event) true;
        the cursor moves past it."""
        deadline = time.monotonic() + T(timeout)
        with self.cond:
            start = self.cursor if since is None else since
            i = start
            while True:
                while i < len(self.events):
                    if pred(self.events[i]):
                        self.cursor = i + 1
                        return self.events[i]
                    i += 1
                self._wait_more(deadline, what, timeout, start)

    def wait_until(self, pred, timeout, what='condition'):
        """Wait until pred(self) holds, re-checked after every event; the cursor then moves past
        every event read so far."""
        deadline = time.monotonic() + T(timeout)
        with self.cond:
            start = len(self.events)
            while not pred(self):
                self._wait_more(deadline, what, timeout, start)
            self.cursor = len(self.events)

    def _wait_more(self, deadline, what, timeout, start):
        """Wait (the lock held) for the next event, at most half a second; fail at the deadline, on
        a closed stream or when the daemon died."""
        left = deadline - time.monotonic()
        if left <= 0 or self.closed:
            self._fail(what, timeout, start)
        self.cond.wait(min(left, 0.5))
        if self.daemon is not None and not self.daemon.running():
            raise DaemonDied(f'bigtcpd exited while waiting for {what}\n{self.daemon.log_tail()}')

    def no_event(self, pred, duration, since=None):
        """Watch for `duration` seconds (not scaled: it is what the test claims, not a
        deadline) for an event at or after `since` (default: the cursor) with pred(event) true.
        Returns the first such event as soon as it arrives, or None when none came over a stream
        that stayed open: a stream that closed (or a daemon that died) saw nothing, which says
        nothing, so that fails."""
        deadline = time.monotonic() + duration
        with self.cond:
            i = self.cursor if since is None else since
            while True:
                while i < len(self.events):
                    if pred(self.events[i]):
                        return self.events[i]
                    i += 1
                if self.closed:
                    raise AssertionError(f'no_event: {self.closed} while watching for {duration}s: what it did '
                                         f'not see says nothing')
                if self.daemon is not None and not self.daemon.running():
                    raise DaemonDied(f'bigtcpd exited while no_event watched\n{self.daemon.log_tail()}')
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))

    def state(self, ifname):
        with self.cond:
            for x in self.by_index.values():
                if x['ifname'] == ifname:
                    return x['state']
        return None

    def wait_state(self, ifname, states, timeout):
        """Wait until the device is in one of `states` (a name or a tuple of names)."""
        states = (states,) if isinstance(states, str) else tuple(states)
        self.wait_until(lambda m: m.state(ifname) in states, timeout, f'{ifname} in {"/".join(states)}')

    def device_events(self, ifname=None, kind=None, since=0):
        """Events of one device (by name) and/or one type, from index `since`."""
        with self.cond:
            return [e for e in self.events[since:]
                    if (ifname is None or e.get('ifname') == ifname) and (kind is None or e.get('event') == kind)]
