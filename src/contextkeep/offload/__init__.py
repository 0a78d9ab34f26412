"""Offloading what leaves the view: the `Offloader` protocol and workspaces."""

from contextkeep.offload.fsspec_workspace import FsspecWorkspace
from contextkeep.offload.workspace import LocalWorkspace, Offloader, Workspace

__all__ = ["FsspecWorkspace", "LocalWorkspace", "Offloader", "Workspace"]
