"""LEAP-mini: a small kernel-writing policy trained here, and the LEAP vs baselines comparison on a CPU."""
