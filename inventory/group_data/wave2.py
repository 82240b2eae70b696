rollout_stage = "wave2"
