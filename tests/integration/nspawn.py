"""nspawn.py — a real systemd as PID 1, for the tests that need a service manager and a system bus:
this host's own /usr booted with systemd-nspawn in its own network namespace.

    systemd-nspawn --boot --volatile=yes -D / --private-network --register=no --keep-unit
                   --overlay=/usr:WORK/usr:/usr --bind=WORK/etc:/etc --bind=WORK/var:/var

- /usr is the host's, under an overlay whose writable layer is WORK/usr: what dpkg installs in
  the container lands there, the host's /usr is never written.
- /etc is a copy of the host's with none of the host's enabled units and a machine-id of its
  own (without one systemd runs "first boot" and presets enable units); /var is WORK/var with
  a copy of the host's dpkg database (so that apt sees what is installed and installs the rest)
  and what the container writes. Both survive a reboot of the container, as on a real machine;
  /run is a tmpfs that does not.
- --private-network: the container's own namespace, with only lo; the host's network devices
  are never touched. It is attached as /run/netns/PREFIXsd-<id> (PREFIX: BT_NETNS_PREFIX,
  default bt-), so that nl.py and `ip -n` reach it.
- --register=no --keep-unit: there is no systemd (machined) on the host to register with.

Everything it makes is removed by stop(), also after a failure: the container (powered off, or
its PID 1 killed by pid), the netns name, WORK. When the test process dies without stop() (killed),
nspawn gets SIGTERM (its parent-death signal) and powers the container off, and the next
Container() removes the WORK that nobody holds locked any more. Needs systemd-container
(scripts/setup.sh)."""

import contextlib
import fcntl
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from helpers import NETNS_PREFIX, REPO, T, read_state, wait_file

# What commands inside see: nothing of the test's environment (ASAN_OPTIONS, BIGTCPD_BIN...).
ENV = {'PATH': '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LANG': 'C.UTF-8',
       'TERM': 'dumb', 'SYSTEMD_PAGER': '', 'SYSTEMD_COLORS': '0', 'DEBIAN_FRONTEND': 'noninteractive'}
NOBODY = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--']
REBOOT_EXIT = 133   # systemd-nspawn's exit status when the container asked for a reboot
WORK_PREFIX = 'bigtcpd-nspawn-'


def _remove_orphaned_work():
    """The WORK of containers whose test process died without stop(): its lock is free."""
    for d in Path('/var/tmp').glob(WORK_PREFIX + '*'):
        try:
            fd = os.open(d / '.lock', os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue    # not (yet) locked by its maker: leave it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue    # its test process lives
        finally:
            os.close(fd)
        shutil.rmtree(d, ignore_errors=True)


class Container:
    def __init__(self, logdir):
        self.id = secrets.token_hex(4)
        self.name = f'{NETNS_PREFIX}sd-{self.id}'   # machine name, hostname and netns name
        self.logdir = Path(logdir)
        _remove_orphaned_work()
        self.work = Path(tempfile.mkdtemp(prefix=f'{WORK_PREFIX}{self.id}.', dir='/var/tmp'))
        # Held while this process lives: a WORK whose lock is free is an orphan.
        self.lock = os.open(self.work / '.lock', os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.proc = None
        self.leader = None
        self.boots = 0
        self.netns_attached = False
        try:
            self._prepare()
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            os.close(self.lock)
            raise

    def _prepare(self):
        w = self.work
        (w / 'usr').mkdir()
        subprocess.run(['cp', '-a', '/etc', str(w / 'etc')], check=True)
        etc = w / 'etc'
        # A fresh /etc: the host's enabled units stay on the host, its policy too.
        for p in (etc / 'systemd' / 'system').iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        shutil.rmtree(etc / 'bigtcpd', ignore_errors=True)
        (etc / 'machine-id').write_text(secrets.token_hex(16) + '\n')
        (etc / 'hostname').write_text(self.name + '\n')
        (w / 'var' / 'lib').mkdir(parents=True)
        subprocess.run(['cp', '-a', '/var/lib/dpkg', str(w / 'var' / 'lib' / 'dpkg')], check=True)
        for d in ('var/lib/apt/lists/partial', 'var/cache/apt/archives/partial', 'var/tmp'):
            (w / d).mkdir(parents=True, exist_ok=True)
        os.chmod(w / 'var' / 'tmp', 0o1777)

    # --- life -------------------------------------------------------------------------------

    def boot(self, timeout=60):
        """Start the container and return once its systemd reports the boot finished (nspawn
        --notify-ready passes its READY=1 on)."""
        assert self.proc is None
        self.boots += 1
        notify_dir = Path(tempfile.mkdtemp(prefix='bt-nspawn-', dir='/tmp'))
        notify_path = notify_dir / 'notify'
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(str(notify_path))
            self.console = self.logdir / f'{self.name}-boot{self.boots}.console'
            env = dict(ENV, NOTIFY_SOCKET=str(notify_path))
            console = open(self.console, 'wb')
            self.proc = subprocess.Popen(
                # setpriv: SIGTERM to nspawn (a poweroff) if this process dies without stop()
                ['setpriv', '--pdeathsig', 'SIGTERM', '--',
                 'systemd-nspawn', '--quiet', '--boot', '--volatile=yes', '--directory=/', '--private-network',
                 '--register=no', '--keep-unit', '--notify-ready=yes', f'--machine={self.name}',
                 f'--overlay=/usr:{self.work / "usr"}:/usr', f'--bind={self.work / "etc"}:/etc',
                 f'--bind={self.work / "var"}:/var'],
                stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
            console.close()   # nspawn has it
            deadline = time.monotonic() + T(timeout)
            ready = False
            while not ready:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f'the container did not boot within {T(timeout)} s (nspawn exit '
                                         f'{self.proc.poll()}); console:\n{self.console_tail()}')
                sock.settimeout(min(left, 0.5))
                try:
                    msg = sock.recv(4096).decode(errors='replace')
                except socket.timeout:
                    continue
                for line in msg.splitlines():
                    if line.startswith('X_NSPAWN_LEADER_PID='):
                        self.leader = int(line.split('=', 1)[1])
                    ready = ready or line == 'READY=1'
            assert self.leader, 'nspawn did not say its leader pid'
        except BaseException:
            self._kill()
            raise
        finally:
            sock.close()
            shutil.rmtree(notify_dir, ignore_errors=True)
        if not self.netns_attached:
            subprocess.run(['ip', 'netns', 'attach', self.name, str(self.leader)], check=True)
            self.netns_attached = True
        else:
            # A new boot, a new namespace.
            subprocess.run(['ip', 'netns', 'del', self.name], check=True)
            subprocess.run(['ip', 'netns', 'attach', self.name, str(self.leader)], check=True)
        state = self.sh('systemctl is-system-running --wait', check=False).stdout.strip()
        if state != 'running':
            failed = self.sh('systemctl --failed --no-legend', check=False).stdout
            print(f'{self.name}: boot {self.boots} ended {state!r}; failed units:\n{failed}')

    def reboot(self, timeout=60):
        """`systemctl reboot` in the container: systemd-nspawn exits with 133 (a reboot), and the
        container boots again from the same /etc, /var and /usr layer."""
        self.run('systemctl', 'reboot', check=False)
        try:
            rc = self.proc.wait(T(timeout))
        except subprocess.TimeoutExpired:
            raise AssertionError(f'the container did not reboot within {T(timeout)} s\n{self.console_tail()}')
        assert rc == REBOOT_EXIT, f'systemd-nspawn exited {rc} on reboot, not {REBOOT_EXIT}\n{self.console_tail()}'
        self.proc = None
        self.leader = None
        self.boot()

    def poweroff(self, timeout=60):
        """SIGTERM to nspawn, which powers the container off; True if it went within timeout."""
        if self.proc is None or self.proc.poll() is not None:
            return True
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(T(timeout))
            return True
        except subprocess.TimeoutExpired:
            return False

    def _kill(self):
        """The hard way, by pid: the container's PID 1 (SIGKILL ends its whole pid namespace),
        then nspawn."""
        if self.leader:
            try:
                os.kill(self.leader, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(T(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop(self):
        """Power off (or kill) the container and remove everything this object made."""
        problems = []
        try:
            if self.proc is not None and not self.poweroff():
                problems.append(f'{self.name} did not power off, killed')
                self._kill()
            self.proc = None
        finally:
            if self.netns_attached:
                r = subprocess.run(['ip', 'netns', 'del', self.name], capture_output=True, text=True)
                if r.returncode != 0:
                    problems.append(f'ip netns del {self.name}: {r.stderr.strip()}')
                self.netns_attached = False
            shutil.rmtree(self.work, ignore_errors=True)
            if self.lock is not None:
                os.close(self.lock)
                self.lock = None
        return problems

    def processes(self):
        """Every process of the container's PID namespace, read from the host's /proc (whatever the
        image has, and whether or not its systemd answers): pid, state, where it sleeps in the
        kernel, its name, and for bigtcpd's own the kernel stack (a stop that hangs says where)."""
        try:
            ns = os.readlink(f'/proc/{self.leader}/ns/pid')
        except OSError as e:
            return f'(none: {e})'
        lines = []
        for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):
            try:
                if os.readlink(f'/proc/{pid}/ns/pid') != ns:
                    continue
                comm = Path(f'/proc/{pid}/comm').read_text().strip()
                state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
                wchan = Path(f'/proc/{pid}/wchan').read_text().strip() or '-'
                lines.append(f'{pid:>8} {state} {wchan:<28} {comm}')
                if comm.startswith('bigtcpd'):
                    stack = Path(f'/proc/{pid}/stack').read_text().strip()
                    lines += ['           ' + l for l in stack.splitlines()]
            except OSError:
                continue   # gone meanwhile
        return '\n'.join(lines)

    def console_tail(self, n=40):
        try:
            return '\n'.join(self.console.read_text(errors='replace').splitlines()[-n:])
        except OSError:
            return '(no console log)'

    # --- commands ---------------------------------------------------------------------------

    # systemd 252 in this container (cgroup v1: "Failed to kill control group …: Input/output
    # error" at every stop) once in a while cannot attach a unit it starts again right after a
    # stop to its cgroup ("Failed to attach to cgroup …: No such file or directory", status
    # 219/CGROUP): a start that failed so is the container's doing, not the daemon's, and is made
    # once more.
    STARTS = ('start', 'restart', 'try-restart', 'reload-or-restart')

    def run(self, *cmd, user=None, check=True, timeout=60, input=None):
        """A command inside (all of the container's namespaces), as root or user='nobody'."""
        assert self.leader, 'the container is not running'
        argv = ['nsenter', '-t', str(self.leader), '-a', '--root', '--wd', '--', *(NOBODY if user == 'nobody' else []),
                *map(str, cmd)]

        def once():
            return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=T(timeout), input=input,
                                  stdin=None if input is not None else subprocess.DEVNULL)
        since = int(time.time()) - 1
        r = once()
        if r.returncode != 0 and len(cmd) > 1 and str(cmd[0]) == 'systemctl' and str(cmd[1]) in self.STARTS:
            j = self.run('journalctl', '--no-pager', '-q', '-o', 'cat', f'--since=@{since}', check=False, timeout=30)
            if 'Failed at step CGROUP spawning' in j.stdout:
                print(f'in {self.name}: {" ".join(map(str, cmd))}: systemd could not attach the unit to its '
                      f'cgroup (status 219/CGROUP); once more')
                r = once()
        if check and r.returncode != 0:
            raise AssertionError(f'in {self.name}: {" ".join(map(str, cmd))} exited {r.returncode}\n'
                                 f'stdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}')
        return r

    def sh(self, script, **kw):
        return self.run('sh', '-c', script, **kw)

    def path(self, p):
        """Where a path of the container's /etc or /var is on the host (they are bind mounts)."""
        p = Path(p)
        assert p.parts[1] in ('etc', 'var'), p
        return self.work / p.relative_to('/')

    def state_devices(self, into):
        """The devices of bigtcpd's state file in the container (/run/bigtcpd: the snapshot and
        the journal, copied into the new directory `into`), as the daemon would load them."""
        into.mkdir()
        for f in ('state.json', 'state.journal'):
            r = self.run('cat', f'/run/bigtcpd/{f}', check=False)
            if r.returncode == 0:
                (into / f).write_text(r.stdout)
        return read_state(into)['devices']

    def journal_cursor(self):
        out = self.run('journalctl', '--show-cursor', '-n', '0', '-q').stdout
        for line in out.splitlines():
            if line.startswith('-- cursor: '):
                return line[len('-- cursor: '):]
        raise AssertionError(f'no journal cursor in {out!r}')

    def journal_wait(self, cursor, patterns, timeout=20, args=()):
        """Follow the journal from `cursor` (journalctl --follow) until lines matching each of
        `patterns` (regexes, in this order) came; returns the lines read."""
        argv = ['nsenter', '-t', str(self.leader), '-a', '--root', '--wd', '--', 'journalctl', '--follow', '--no-tail', '-q',
                '-o', 'short-monotonic', f'--after-cursor={cursor}', *args]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                             env=ENV)
        lines, want, buf = [], [re.compile(x) for x in patterns], b''
        deadline = time.monotonic() + T(timeout)
        try:
            while want:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f'journal of {self.name}: no line matching {want[0].pattern!r} within '
                                         f'{T(timeout)} s; read:\n' + '\n'.join(lines[-60:]))
                r, _, _ = select.select([p.stdout], [], [], left)
                if not r:
                    continue
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError('journalctl --follow ended; read:\n' + '\n'.join(lines[-60:]))
                *done, buf = (buf + chunk).split(b'\n')
                for raw in done:
                    line = raw.decode(errors='replace')
                    lines.append(line)
                    if want and want[0].search(line):
                        want.pop(0)
        finally:
            p.terminate()
            try:
                p.wait(T(5))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
        return lines


# --- what the real-systemd test modules share ------------------------------------------------

def package_deb(tmp_path_factory):
    """The package under test: the one bigtcpd_*.deb in BIGTCPD_DEB_DIR (scripts/test.sh builds
    it with scripts/package.sh beside the tests, and writes package.sh's exit status into the
    file BIGTCPD_DEB_STATUS, when set, once the package is there: waited for here), or built
    here."""
    d = os.environ.get('BIGTCPD_DEB_DIR')
    status = os.environ.get('BIGTCPD_DEB_STATUS')
    if d and status:
        status = Path(status)
        started = time.monotonic()
        wait_file(status.parent, status.exists, 1200, f'{status}: scripts/package.sh did not end', directory=True)
        rc = status.read_text().strip()
        assert rc == '0', f'scripts/package.sh exited {rc} (its output: scripts/test.sh shows it after these tests)'
        print(f'package: waited {time.monotonic() - started:.0f} s for scripts/package.sh')
    if d:
        d = Path(d)
    else:
        d = tmp_path_factory.mktemp('debs')
        r = subprocess.run(['bash', str(REPO / 'scripts' / 'package.sh'), str(d)], capture_output=True, text=True,
                           timeout=T(1200), stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f'scripts/package.sh failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}'
    found = sorted(d.glob('bigtcpd_*.deb'))
    assert len(found) == 1, f'expected one bigtcpd_*.deb in {d} (did scripts/package.sh fail?): {found}'
    return found[0]


@contextlib.contextmanager
def booted(logdir, what, prepare=None):
    """A Container, prepare(container) run on its /etc and /var before the boot, booted, with
    Docker's policy-rc.d (exit 101: never start a service; on this host's /usr) gone from its
    overlay, as on any real Debian system, or nothing would start. Stopped and removed at the
    end, also on a CI timeout's SIGTERM. The whole's time is printed, not bounded: the suite's
    speed is measured (tests/integration/timeline.py), not asserted; every command in it has a
    timeout of its own, which is what catches a hang.
    A SIGTERM handler can only be set in the main thread: where pytest-xdist runs the test in
    another, the process's death is what ends the container (nspawn's parent-death signal)."""
    def terminated(signum, frame):
        # Through the finally below, so that the container goes too.
        raise KeyboardInterrupt(f'signal {signum}')

    started = time.monotonic()
    c = Container(logdir)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminated) if main else None
    try:
        if prepare:
            prepare(c)
        c.boot()
        c.run('rm', '-f', '/usr/sbin/policy-rc.d')
        yield c
    finally:
        problems = c.stop()
        if main:
            signal.signal(signal.SIGTERM, previous)
        took = time.monotonic() - started
        print(f'\n{what}: {took:.0f} s (boots: {c.boots})')
        assert not problems, problems


def journal_on_failure(request, c):
    """After a failed test (conftest.py's rep_call): the container's journal, last 150 lines."""
    rep = getattr(request.node, 'rep_call', None)
    if rep is not None and rep.failed and c.leader:
        r = c.run('journalctl', '-b', '--no-pager', '-n', '150', check=False)
        print(f'===== journal of {c.name} (last 150 lines) =====\n{r.stdout}')
        print(f'===== processes of {c.name} (seen from the host) =====\n{c.processes()}')
