"""Loading recorded agent trajectories and replaying them through contextkeep."""
