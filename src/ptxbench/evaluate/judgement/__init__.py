"""The judgements of collected evidence, pure functions of what the stages gathered: the outputs compared with the
reference under the task's tolerance (``compare``), what a call launched in one vocabulary (``launches``), every
check that can REJECT a candidate (``guards``, its table ``GUARDS``), the status that follows from the evidence
(``verdict``, so ``--regrade`` needs no GPU), and the verdict of a candidate that cannot be run (``static_only``:
a failed build, a linked vendor library, no GPU), and which correct candidates the sweep evidence profile
profiles (``funnel``). Nothing here runs the candidate."""
