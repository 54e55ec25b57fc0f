"""Evaluating many candidates on many GPUs: the run-directory driver (``run``), one ``GpuEvaluator`` per GPU
behind a process boundary (``gpu_host``), one shared queue over them (``scheduler``), the two backends
that start the hosts (``pool`` on this machine, ``ray_backend`` on a Ray cluster), and the long-lived
``engine`` that keeps the hosts of this machine for a server's lifetime."""
