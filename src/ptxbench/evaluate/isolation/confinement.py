"""Keeping a candidate's process away from the harness: its environment, files and processes.

Standard library only: the ncu stage's profiled program (``profile_one.py``) runs without ptxbench
importable and loads this file by its path.

What a process that hosts candidate code gets, as far as the machine permits:

- ``candidate_environment``: an allow-list of the harness's environment (the paths, locale, CUDA and
  NVIDIA settings, the GPU lock's variables); no API key, token or secret, none of the harness's own
  ``PTXBENCH_*`` settings, and HOME in a private directory.
- ``protect_paths``: a private mount namespace in which the whole machine is read-only except scratch
  space (``SCRATCH_ROOTS`` and the temporary folder: the private working directory, shared memory, the
  GPU lock's folder, the kernel's pseudo file systems), and in which the run directory and the caches are
  read-only bind mounts even where they lie in scratch space. So candidate code can change neither the
  harness's code (the package, its Python, torch) nor other runs' results outside scratch space. As root
  (CAP_SYS_ADMIN) a plain mount namespace is used; as a normal user an unprivileged user namespace where
  the kernel allows it (it needs a single-threaded process). CAP_SYS_ADMIN is dropped afterwards, so
  candidate code cannot remount anything writable (a namespace it creates itself inherits the mounts
  locked read-only), and CAP_SYS_PTRACE too, so it cannot reach into a process that has more
  capabilities than it has (the harness: ``/proc/<pid>/root``, ``/proc/<pid>/mem``, ptrace); as root the
  process is also made non-dumpable, which keeps other lanes' candidates (same capabilities) out of it
  the same way. No PID or IPC namespace: CUDA IPC between the worker and the harness must keep working.
- ``Cgroup``: a cgroup v2 group per worker, which the worker joins before any candidate code runs, so the
  harness can freeze everything in it and kill everything in it, daemons that left the worker's session
  and cleared their subreaper flag included.

Residual risks (stated in the mode strings the evaluator reports):

- The candidate runs as the harness's user: it can signal any process of that user (``kill(-1, ...)``).
  Only another user or a PID namespace closes that, and a PID namespace would break CUDA IPC. As a
  normal user, concurrent lanes' candidates have the same capabilities (none) and stay dumpable (the
  harness reads their mapped libraries), so they can reach each other where the kernel's Yama setting
  allows ptrace between siblings.
- Scratch space stays writable: a run directory or cache placed under /tmp is protected by name, but
  another run's folder there is not.
- Without a writable cgroup2 mount, processes are ended through the worker's session and its subreaper
  flag: a daemon that clears the flag, leaves the session and is re-parented outside the worker's
  descendants escapes both.
- Without a mount namespace, nothing stops a candidate from writing files of the harness's user.
- A read-only bind mount covers its own file system: mounts below a protected path stay writable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

# The GPU lock's variables (gpu_lock.KEY_VARIABLE and the folder and trace it reads): a worker takes the
# lock while its start-up runs kernels, so it must find the same lock as the harness.
LOCK_VARIABLES = ("PTXBENCH_GPU_LOCK", "PTXBENCH_LOCK_DIR", "PTXBENCH_LOCK_TRACE")
# The variable through which the harness names the paths candidate code must not write (os.pathsep-separated).
PROTECTED_PATHS_VARIABLE = "PTXBENCH_PROTECTED_PATHS"

_ALLOWED_NAMES = frozenset({
    "PATH", "LD_LIBRARY_PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "USER", "LOGNAME", "SHELL",
    "PYTHONHASHSEED", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS", *LOCK_VARIABLES,
})
# Prefixes of device and library settings a worker's CUDA, torch and locale read after it starts, and the
# instructions of the CPU tests' stand-in for the GPU side (tests/evaluate/fake_runner.py), which runs
# where candidate code would: the harness itself never sets those, and they hold no secret.
_ALLOWED_PREFIXES = ("CUDA_", "NVIDIA_", "LC_", "PYTORCH_CUDA_", "TORCH_CUDA_", "PTXBENCH_FAKE_")
# A name that looks like a credential is refused even when an allowed prefix matches (CUDA_API_KEY).
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
# Where torch.compile and Triton keep compiled code between processes. Left at their defaults, Inductor's
# folder is /tmp/torchinductor_<user>: scratch space, writable by candidate code, and read by the baseline
# process, so a candidate could rewrite a compiled baseline kernel (slower baselines, larger speedups). The
# baseline process is given folders in the harness's cache (read-only to candidates); a candidate's process
# folders of its own (``compile_cache_environment``).
# FlashInfer JIT-compiles its kernels into FLASHINFER_WORKSPACE_BASE (default: HOME) for the same reuse and the
# same risk, so it is kept apart the same way.
COMPILE_CACHE_VARIABLES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton",
                           "FLASHINFER_WORKSPACE_BASE": "flashinfer"}


def candidate_environment(environ: Mapping[str, str], home: str | None = None) -> dict[str, str]:
    """The part of ``environ`` candidate code may see; HOME is ``home`` (the private working directory),
    or absent when none is given, so nothing is found in the harness user's home through it."""
    allowed = {
        name: value for name, value in environ.items()
        if (name in _ALLOWED_NAMES or name.startswith(_ALLOWED_PREFIXES))
        and (name in LOCK_VARIABLES or not _SECRET.search(name))
    }
    if home is not None:
        allowed["HOME"] = home
        allowed |= compile_cache_environment(home)
    return allowed


def compile_cache_environment(folder: os.PathLike[str] | str) -> dict[str, str]:
    """The compile caches' variables (``COMPILE_CACHE_VARIABLES``) pointing into ``folder``."""
    return {name: os.path.join(folder, "compile", sub) for name, sub in COMPILE_CACHE_VARIABLES.items()}


def protected_paths_from(environ: Mapping[str, str]) -> list[str]:
    """The paths the harness named in ``PTXBENCH_PROTECTED_PATHS`` (read before the environment is scrubbed)."""
    return [path for path in environ.get(PROTECTED_PATHS_VARIABLE, "").split(os.pathsep) if path]


def name_protected_paths(paths: Sequence[os.PathLike[str] | str]) -> Callable[[], None]:
    """Name ``paths`` (created if missing, so even the first worker finds them) in the harness's
    ``PTXBENCH_PROTECTED_PATHS``, beside any already named, for the workers started from now on;
    returns the function that restores the variable as it was."""
    previous = os.environ.get(PROTECTED_PATHS_VARIABLE)
    named = protected_paths_from(os.environ)
    for path in paths:
        os.makedirs(path, exist_ok=True)
        named.append(os.path.realpath(path))
    os.environ[PROTECTED_PATHS_VARIABLE] = os.pathsep.join(dict.fromkeys(named))

    def restore() -> None:
        if previous is None:
            os.environ.pop(PROTECTED_PATHS_VARIABLE, None)
        else:
            os.environ[PROTECTED_PATHS_VARIABLE] = previous

    return restore


# -- mount namespace ---------------------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
# statvfs flags -> the mount flags a remount must keep (in a user namespace they are locked: EPERM otherwise)
_KEPT_FLAGS = {os.ST_NOSUID: _MS_NOSUID, os.ST_NODEV: _MS_NODEV, os.ST_NOEXEC: _MS_NOEXEC,
               os.ST_NOATIME: _MS_NOATIME, os.ST_NODIRATIME: _MS_NODIRATIME, os.ST_RELATIME: _MS_RELATIME}
_CAP_SYS_PTRACE, _CAP_SYS_ADMIN = 19, 21
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 4, 24
# Where candidate code may still write once the rest of the machine is read-only to it (with the temporary
# folder, ``tempfile.gettempdir()``): scratch space, where its private working directory and HOME are made;
# /dev (GPU device nodes, shared memory for CUDA IPC's bookkeeping); the kernel's pseudo file systems; and
# runtime state (sockets of the NVIDIA daemons). The harness keeps nothing of its own there but the GPU
# lock's folder, which must stay writable (a worker takes the lock), and what it names as protected.
SCRATCH_ROOTS = ("/tmp", "/var/tmp", "/dev", "/proc", "/sys", "/run")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _checked(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, flags: int, what: str) -> None:
    encode = (lambda text: text.encode() if text is not None else None)
    _checked(_libc().mount(encode(source), encode(target), None, ctypes.c_ulong(flags), None), what)


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _enter_user_namespace() -> None:
    """A user namespace in which this user is root (so it may mount), mapped to itself outside."""
    uid, gid = os.getuid(), os.getgid()
    _checked(_libc().unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as control:
            control.write(text)


def _enter_mount_namespace() -> str:
    """Enter a private mount namespace; returns how ("root" or "user namespace")."""
    if _libc().unshare(_CLONE_NEWNS) == 0:
        return "root"
    number = ctypes.get_errno()
    if number != errno.EPERM:
        raise OSError(number, f"unshare(CLONE_NEWNS): {os.strerror(number)}")
    if _thread_count() > 1:
        raise PermissionError(errno.EPERM, "no CAP_SYS_ADMIN, and a user namespace needs a single-threaded process")
    _enter_user_namespace()
    return "user namespace"


def _remount_read_only(path: str) -> None:
    """Remount the mount at ``path`` read-only, keeping the flags a user namespace locks (EPERM otherwise)."""
    kept = sum(flag for stat_flag, flag in _KEPT_FLAGS.items() if os.statvfs(path).f_flag & stat_flag)
    _mount(None, path, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | kept, f"remount {path} read-only")


def _bind_read_only(path: str) -> None:
    _mount(path, path, _MS_BIND | _MS_REC, f"bind {path}")
    _remount_read_only(path)


def _drop_capabilities(capabilities: Sequence[int] = (_CAP_SYS_ADMIN, _CAP_SYS_PTRACE)) -> None:
    """Drop ``capabilities`` from the bounding, effective, permitted and inheritable sets: code run later
    can then neither remount the protected paths writable nor unmount them (CAP_SYS_ADMIN), nor reach into
    a process with more capabilities than it has, the harness's (CAP_SYS_PTRACE)."""
    libc = _libc()
    for capability in capabilities:
        _checked(libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} sets of 32 bits
    _checked(libc.capget(header, data), "capget")
    mask = ~sum(1 << capability for capability in capabilities) & 0xFFFFFFFF
    for index in range(3):  # both are in the first 32 bits
        data[index] &= mask
    _checked(libc.capset(header, data), "capset")


def _unescape(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline and backslash as octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as info:
        return list(dict.fromkeys(_unescape(line.split()[4]) for line in info if len(line.split()) > 4))


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def writable_roots(environ: Mapping[str, str] | None = None) -> list[str]:
    """Scratch space that stays writable: ``SCRATCH_ROOTS``, the temporary folder and the GPU lock's."""
    environ = os.environ if environ is None else environ
    extra = [tempfile.gettempdir(), environ.get("PTXBENCH_LOCK_DIR", "")]
    return [root for root in dict.fromkeys([*SCRATCH_ROOTS, *extra]) if root]


def import_roots(entries: Sequence[str], keep_writable: Sequence[str] = ()) -> list[str]:
    """The folders the harness's Python imports from (``sys.path``), to protect: candidate code must not
    change code the harness or a later process of it loads, also where it lies in scratch space (wheels
    unpacked under /tmp). A folder that holds scratch space or ``keep_writable`` (the candidate's own
    working directory) is left out: protecting it would take the candidate's working space too."""
    spare = [os.path.realpath(path) for path in (*writable_roots(), *keep_writable) if path]
    roots = []
    for entry in entries:
        path = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(path) and not any(_within(folder, [path]) for folder in spare):
            roots.append(path)
    return list(dict.fromkeys(roots))


def _read_only_machine(writable: Sequence[str]) -> list[str]:
    """Remount every mount read-only except those at or below ``writable``, which are first bound onto
    themselves where they are plain folders (so they stay writable when the file system they lie on turns
    read-only). Returns the mounts that could not be made read-only, with the reason."""
    roots = sorted({os.path.realpath(path) for path in writable if os.path.isdir(path)})
    roots = [root for root in roots if not _within(root, [r for r in roots if r != root])]
    points = set(_mount_points())
    for root in roots:
        if root not in points:
            _mount(root, root, _MS_BIND | _MS_REC, f"bind {root}")
    refused = []
    for point in _mount_points():
        if _within(point, roots):
            continue
        try:
            _remount_read_only(point)
        except OSError as exc:
            refused.append(f"{point} ({exc.strerror or exc})")
    return refused


def _hide(path: str) -> None:
    """Cover the file ``path`` with an empty read-only one (/dev/null): reading it yields nothing."""
    _mount("/dev/null", path, _MS_BIND, f"hide {path}")
    _remount_read_only(path)


def protect_paths(paths: Sequence[str], hidden: Sequence[str] = (), writable: Sequence[str] | None = None) -> str:
    """Make the machine read-only for this process and its future children except ``writable`` (default:
    ``writable_roots()``; ``()`` leaves the machine as it is), ``paths`` read-only even there, and the
    files ``hidden`` (a signing key) unreadable; returns the mode achieved in one line ("read-only mounts:
    ..." or "not isolated: <reason>"). Never raises for lack of permission: the caller reports the mode."""
    existing = sorted({os.path.realpath(path) for path in paths if os.path.exists(path)})
    secret_files = sorted({os.path.realpath(path) for path in hidden if os.path.isfile(path)})
    scratch = writable_roots() if writable is None else list(writable)
    if not existing and not secret_files:
        return "not isolated: no protected path exists"
    try:
        how = _enter_mount_namespace()
        _mount(None, "/", _MS_REC | _MS_PRIVATE, "make mounts private")  # nothing propagates back out
        refused = _read_only_machine(scratch) if scratch else None
        for path in existing:
            _bind_read_only(path)
        for path in secret_files:  # after the read-only mounts, which would cover a file hidden earlier
            _hide(path)
        _drop_capabilities()  # in a user namespace too: there the bind mounts are ours to remount
        if os.getuid() == 0:  # the harness (root, CAP_SYS_PTRACE) still reads its maps; other lanes cannot
            _checked(_libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    except OSError as exc:
        return f"not isolated: {exc.strerror or exc}"
    hidden_note = f"; hidden: {', '.join(secret_files)}" if secret_files else ""
    if refused is None:
        machine = "; the rest of the machine unchanged"
    else:
        machine = f"; the rest of the machine read-only but {', '.join(sorted(set(scratch)))}"
        machine += f" (could not make read-only: {', '.join(refused)})" if refused else ""
    return f"read-only mounts: {', '.join(existing)}{hidden_note}{machine} (private mount namespace, {how})"


# -- inherited descriptors ---------------------------------------------------------------------------------


def close_inherited_descriptors(keep: Sequence[int]) -> None:
    """Close every descriptor but stdin, stdout, stderr and ``keep``: what the process inherited (the
    forkserver's and resource tracker's pipes, the harness's files) is then out of the candidate's reach."""
    kept = {0, 1, 2, *keep}
    try:
        opened = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        opened = list(range(3, 1024))
    for descriptor in opened:
        if descriptor not in kept:
            try:
                os.close(descriptor)
            except OSError:
                pass  # the listing's own descriptor, already closed


# -- cgroup v2 ---------------------------------------------------------------------------------------------


def _cgroup2_mounts() -> list[str]:
    try:
        with open("/proc/self/mounts") as mounts:
            return [fields[1] for fields in (line.split() for line in mounts) if len(fields) > 2 and fields[2] == "cgroup2"]
    except OSError:
        return []


def _own_cgroup() -> str:
    """This process's cgroup v2 path, relative to the hierarchy's root ("" for the root)."""
    try:
        with open("/proc/self/cgroup") as groups:
            for line in groups:
                if line.startswith("0::"):
                    return line[3:].strip().lstrip("/")
    except OSError:
        pass
    return ""


def cgroup_parent() -> str | None:
    """A writable cgroup v2 folder to create workers' groups in: below this process's own group where
    that is writable, else the hierarchy's root; None where no cgroup2 mount is writable."""
    for mount in _cgroup2_mounts():
        for folder in (os.path.join(mount, _own_cgroup()), mount):
            if os.path.isfile(os.path.join(folder, "cgroup.procs")) and os.access(folder, os.W_OK):
                return folder
    return None


class Cgroup:
    """One worker's cgroup v2 group: created by the harness, joined by the worker before any candidate code
    runs, so everything the candidate starts is in it (a group cannot be left without the rights to write
    another group's ``cgroup.procs``), whatever its session or parent."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: str | None = None, prefix: str = "ptxbench-worker") -> "Cgroup | str":
        """A new empty group, or why none could be made (a line for the mode string)."""
        parent = parent or cgroup_parent()
        if parent is None:
            return "no writable cgroup2 mount"
        sweep_stale_cgroups(parent, prefix)
        path = os.path.join(parent, f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(path)
        except OSError as exc:
            return f"cannot create a cgroup in {parent}: {exc.strerror}"
        return cls(path)

    def _write(self, name: str, text: str) -> None:
        with open(os.path.join(self.path, name), "w") as control:
            control.write(text)

    def _read(self, name: str) -> str:
        try:
            with open(os.path.join(self.path, name)) as control:
                return control.read()
        except OSError:
            return ""

    def join(self, pid: int = 0) -> None:
        """Move process ``pid`` (0: this one) into the group; raises OSError when not permitted."""
        self._write("cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        return [int(line) for line in self._read("cgroup.procs").split()]

    def _event(self, name: str) -> str | None:
        for line in self._read("cgroup.events").splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return value
        return None

    def freeze(self, timeout_s: float = 2.0) -> bool:
        """Stop every process of the group (forks included); True once the kernel reports it frozen."""
        try:
            self._write("cgroup.freeze", "1")
        except OSError:
            return False
        deadline = time.monotonic() + timeout_s
        while self._event("frozen") != "1" and time.monotonic() < deadline:
            time.sleep(0.0005)
        return self._event("frozen") == "1"

    def thaw(self) -> None:
        try:
            self._write("cgroup.freeze", "0")
        except OSError:
            pass

    def kill(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process of the group (``cgroup.kill``, else each pid while the group is frozen, so
        none forks meanwhile); True once the group is empty."""
        try:
            self._write("cgroup.kill", "1")
        except OSError:
            self.freeze(timeout_s=0.5)
            for pid in self.pids():
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            self.thaw()  # a frozen process dies only once thawed
        deadline = time.monotonic() + timeout_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.002)
        return not self.pids()

    def remove(self) -> None:
        """Kill what is left in the group and remove it (a group can only be removed empty)."""
        if not os.path.isdir(self.path):
            return
        self.kill()
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)  # the killed processes are still being torn down


def sweep_stale_cgroups(parent: str, prefix: str = "ptxbench-worker") -> None:
    """Kill and remove the groups that a harness process which has died since (SIGKILL: no clean-up ran)
    left in ``parent``: they are named after its pid."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        creator = name[len(prefix) + 1:].partition("-")[0] if name.startswith(prefix + "-") else ""
        if creator.isdigit() and not os.path.exists(f"/proc/{creator}"):
            Cgroup(os.path.join(parent, name)).remove()
