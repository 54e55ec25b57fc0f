"""Errors a user can act on. Each message says what is wrong and, where there is one, the fix."""


class PtxbenchError(Exception):
    """Base for errors shown to the user as one clear line (the CLI prints them without a traceback)."""


class ToolchainMissing(PtxbenchError):
    """A CUDA tool (nvcc, ptxas, cuobjdump, nvdisasm) could not be found."""


class TaskError(PtxbenchError):
    """A task file is malformed or a task id is unknown."""


class CandidateError(PtxbenchError):
    """A candidate file cannot be read or is not a CUDA source."""


class ProviderError(PtxbenchError):
    """An LLM provider cannot be set up or used: bad 'provider:name' spec, bad options, unreadable replay file."""


class UnknownProvider(ProviderError):
    """The 'provider' part of a model spec names no registered provider."""


class ProviderSdkMissing(ProviderError):
    """The SDK a provider needs is not installed; the message names the extra that installs it."""


class ApiKeyMissing(ProviderError):
    """A hosted provider has no API key; the message names the environment variable to set."""
