"""Offloading what leaves the view: the `Offloader` protocols, workspaces and action snapshots."""

from contextkeep.offload.adapter import OffloaderWorkspace
from contextkeep.offload.fsspec_workspace import FsspecWorkspace
from contextkeep.offload.protocols import Offloader, ReadableOffloader, SnapshotOffloader
from contextkeep.offload.snapshot import ActionSnapshot
from contextkeep.offload.workspace import LocalWorkspace, Workspace

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
