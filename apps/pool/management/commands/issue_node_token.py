"""``manage.py issue_node_token NODE``: create the node if new and print a fresh agent token."""
from django.core.management.base import BaseCommand, CommandError
from django.utils.text import slugify

from apps.pool.services import node_token_issue


class Command(BaseCommand):
    help = "Print a new token for node NODE (the old one stops working). Give it to e31-agent --token."

    def add_arguments(self, parser):
        parser.add_argument("node")

    def handle(self, *args, node: str, **options):
        if slugify(node) != node or len(node) > 64:
            raise CommandError("a node name is letters, digits, '-' and '_' (at most 64)")
        self.stdout.write(node_token_issue(name=node))
