"""`shapecalc serve`: a discrete-event simulation of continuous batching (vLLM-like) on replicas
of one deployment, timed by the calibrated performance model (plan/perf.py)."""
