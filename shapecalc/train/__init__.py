"""Training: a step's backward and recompute FLOPs derived from the forward's stages
(backward.py), model-state memory under ZeRO (memory.py), and the `train` report (report.py)."""
