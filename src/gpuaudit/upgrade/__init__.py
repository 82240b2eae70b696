"""Staged driver upgrades: plan, gates, the rollout journal, the controller lease and the
rollout report."""
