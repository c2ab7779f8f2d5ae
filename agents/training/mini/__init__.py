"""LEAP-mini: a small kernel-writing policy built here (a Qwen2 of 1.5M parameters and a BPE tokenizer trained
on the project's own corpus), LEAP-mini's task split, its prompt (`leap_agents.policies.prompts.MiniPrompt`)
and its warm-up. The trainer (`leap_agents.training.trainer`) runs it as the ``leap-mini`` preset, the default
of ``leap-train``."""
