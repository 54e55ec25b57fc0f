"""The timing protocol: how a candidate and its vendor baseline are measured so that their ratio repeats and no
timed call can be answered from a cache. ``protocol``: the interleaved measurement with a budget per workload,
the baselines' clean times and the re-check of timed outputs; ``fresh_inputs``: every timed round's input set
changed in place, the same way in the worker and replayed in the parent, and the timed calls drawn at random
whose outputs are checked; ``samples``: how a side's timed samples are summed up, alike on both sides; ``profiles``: which workloads each
evidence profile times. Which
process runs what, and what a failure means for the candidate, is the pipeline's (``evaluator``)."""
