"""Node states (SPEC §5)."""
from django.db import models


class NodeState(models.TextChoices):
    UP = "up", "Up"
    DRAINING = "draining", "Draining"
    DOWN = "down", "Down"
