"""``manage.py issue_node_token NODE [NODE ...]``: create each node if new and print a fresh agent token
for each, one per line, in the order given."""
from django.core.management.base import BaseCommand, CommandError
from django.utils.text import slugify

from apps.pool.services import node_token_issue


class Command(BaseCommand):
    help = "Print a new token for each NODE (its old one stops working). Give it to e31-agent --token."

    def add_arguments(self, parser):
        parser.add_argument("node", nargs="+")

    def handle(self, *args, node: list[str], **options):
        for name in node:
            if slugify(name) != name or len(name) > 64:
                raise CommandError(f"node {name!r}: a node name is letters, digits, '-' and '_' (at most 64)")
        for name in node:
            self.stdout.write(node_token_issue(name=name))
