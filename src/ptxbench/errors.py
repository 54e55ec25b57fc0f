"""Errors a user can act on. Each message says what is wrong and, where there is one, the fix."""


class PtxbenchError(Exception):
    """Base for errors shown to the user as one clear line (the CLI prints them without a traceback)."""


class ToolchainMissing(PtxbenchError):
    """A CUDA tool (nvcc, ptxas, cuobjdump, nvdisasm) could not be found."""


class TaskError(PtxbenchError):
    """A task file is malformed or a task id is unknown."""


class CandidateError(PtxbenchError):
    """A candidate file cannot be read or is not a CUDA source."""
