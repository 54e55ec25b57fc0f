"""Code that runs inside a worker process, next to the candidate (or the vendor baseline): drawing inputs,
loading and calling the candidate, timing with CUDA events, the launch gate, and ncu's standalone profiled
program. It returns raw data and never decides a verdict; the parent (``ptxbench.evaluate``) judges."""
