"""What an operator's tools probe: health (``/healthz``, ``/readyz``)."""
