"""Optional integrations of the agent: evaluation on Ray actors (`ray_pool`, needs ray) and LEAP rollouts inside
TRL's GRPO trainer (`trl`, needs trl)."""
