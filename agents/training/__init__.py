"""Training: a `RolloutEngine` (`rollout`) turns policy generations into `Trajectory` groups (`trajectory`), which
`LeapTrainer` (`trainer`, with `config`, `metrics`, `logprobs`, `tiny`) learns from; `mini` is LEAP-mini beside it."""
