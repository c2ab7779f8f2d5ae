"""Integrations around the environment: Stable-Baselines3 (`sb3`), Numba kernels (`numba_kernels`, `numba_examples`),
vector envs (`vector`), Gymnasium wrappers (`wrappers`) and the JSONL trajectory log (`trajectory_log`)."""
