"""Context for the ``arch`` and ``full`` prompt conditions: per-target guides, the PTX wrapper header,
and the renderers in ``pack``."""
