"""Keeping candidate code apart from the harness and from other evaluations: the supervised worker process
(``worker``), its confinement (environment, files, cgroup, sessions: ``confinement``), what it left behind
(``processes``), who may use the GPU when (``gpu_lock``), and how much of its memory an evaluation needs
(``memory_need``, from the task alone) beside what the others reserved (``memory_ledger``). ``confinement``,
``processes`` and ``gpu_lock`` use the standard library alone: ncu's profiled program loads them by their paths."""
