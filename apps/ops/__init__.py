"""What an operator's tools probe and scrape: health (``/healthz``, ``/readyz``) and ``/metrics``."""
