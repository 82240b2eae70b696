rollout_stage = "canary"
