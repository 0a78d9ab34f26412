"""Loading recorded agent trajectories and replaying them through contextkeep."""

from contextkeep.replay.engine import ReplayResult, replay
from contextkeep.replay.trajectories import Trajectory, load_trajectories

__all__ = ["ReplayResult", "Trajectory", "load_trajectories", "replay"]
