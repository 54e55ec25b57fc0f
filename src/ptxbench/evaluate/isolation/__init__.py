"""Keeping candidate code apart from the harness and from other evaluations: the supervised worker process
(``worker``), its confinement (environment, files, cgroup, sessions: ``confinement``), what it left behind
(``processes``), and who may use the GPU when (``gpu_lock``). ``confinement``, ``processes`` and ``gpu_lock``
use the standard library alone: ncu's profiled program loads them by their paths."""
