"""Typed errors. The command line turns each into one line on stderr and exit code 2."""

from __future__ import annotations

from pathlib import Path


class EaglelabError(Exception):
    """Base class: an input eaglelab cannot use, named together with the problem.

    Args:
        where: the file, folder, hub id or field the problem is in.
        problem: what is wrong, in words a user can act on.
    """

    def __init__(self, where: str | Path, problem: str):
        self.where = str(where)
        self.problem = problem
        super().__init__(f"{self.where}: {problem}")


class SourceError(EaglelabError):
    """A checkpoint source cannot be resolved or read (missing files, no weights)."""


class HeaderError(SourceError):
    """A safetensors header is malformed or claims something the file cannot hold."""


class UnsafeFormatError(SourceError):
    """Weights only in a pickle-based format, which eaglelab refuses to unpickle."""


class HubError(SourceError):
    """A hub id cannot be reached (offline, missing repository, no access)."""


class ConfigError(EaglelabError):
    """A config.json is missing, unparsable, or not an EAGLE-3 drafter config."""


class UnsupportedDrafterError(ConfigError):
    """A drafter eaglelab reads (shapes, configs) but does not compute: another family or variant."""


class CheckpointMismatchError(EaglelabError):
    """A state dict does not fit the model: missing, unexpected or wrong-shaped keys."""


class LogFormatError(EaglelabError):
    """A serving log cannot be read or holds no speculative-decoding lines."""


class CostTableError(EaglelabError):
    """A cost table (an engine's measured plain steps and speculative cycles) cannot be read."""


class ParameterError(EaglelabError):
    """A numeric or command-line parameter is out of its valid range."""


def is_whole(value, low: int = 1) -> bool:
    """Whether ``value`` is an int (a bool is not) of at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def require_whole(name: str, value, low: int = 1) -> int:
    """``value`` when it is a whole number >= ``low``, else a :class:`ParameterError` naming ``name``."""
    if not is_whole(value, low):
        raise ParameterError(name, f"must be a whole number >= {low}, got {value!r}")
    return value


class EngineError(EaglelabError):
    """A serving engine (vLLM in its own environment) is absent, failed, or answered outside its contract."""


class NotebookError(EaglelabError):
    """A notebook failed while the workbook runner executed it."""


class OverwriteError(EaglelabError):
    """A write would replace something the user made, without being asked to."""


class OutputError(EaglelabError):
    """A write failed: a read-only place, a path under a file, no space left, a name the file system refuses."""


class DumpError(SourceError):
    """A hidden-state dump (SpecForge's or vLLM's) cannot be read or does not fit the probe."""


class ResourceError(EaglelabError):
    """This machine lacks what a step needs (memory): the message says how much it needs and how much is there."""
