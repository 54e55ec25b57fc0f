"""What failed where, when a candidate's call ends in a CUDA error that names neither kernel nor access:
``sanitizer`` runs it once more in the profiled program under ``compute-sanitizer --tool memcheck`` and adds the
tool's first finding to the message. A diagnosis only: nothing here changes a status."""
