"""``python -m e31_cli``."""
from .main import main

raise SystemExit(main())
