"""Offloading what leaves the view: the `Offloader` protocols, workspaces and action snapshots."""

from contextkeep._offload.adapter import OffloaderWorkspace
from contextkeep._offload.fsspec_workspace import FsspecWorkspace
from contextkeep._offload.protocols import Offloader, ReadableOffloader, SnapshotOffloader
from contextkeep._offload.snapshot import ActionSnapshot
from contextkeep._offload.workspace import LocalWorkspace, Workspace

__all__ = [
    "ActionSnapshot",
    "FsspecWorkspace",
    "LocalWorkspace",
    "Offloader",
    "OffloaderWorkspace",
    "ReadableOffloader",
    "SnapshotOffloader",
    "Workspace",
]
