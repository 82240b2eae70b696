rollout_stage = "wave1"
