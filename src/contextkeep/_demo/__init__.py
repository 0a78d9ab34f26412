"""`contextkeep demo`: a long tool-using agent session that shows every layer at work."""

from contextkeep._demo.run import DemoResult, run_demo

__all__ = ["DemoResult", "run_demo"]
