"""Periodic upkeep of git workspaces: fetch keeps clones fresh, prune removes idle worktrees."""
