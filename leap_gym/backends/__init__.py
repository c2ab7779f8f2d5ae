"""Stage: backends. NVRTC compiles a response's CUDA (`nvrtc`); a `Backend` (`base`) loads and launches it on the GPU
(`cuda`, with `cuda_driver` and GPU `timing`) or the CUDA-on-CPU runtime (`cpu`, `cpu_build`, `cpu_checked`)."""
